package localstack

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"syscall"
	"time"

	"github.com/alicebob/miniredis/v2"

	"github.com/hourglass/hourglass/shared/app"
	"github.com/hourglass/hourglass/shared/config"
	"github.com/hourglass/hourglass/shared/redisconn"
)

// ErrAddrInUse is Serve's error when its address is taken.
var ErrAddrInUse = errors.New("address in use")

// Running is what Serve tells its caller once requests are served.
type Running struct {
	// Addr is the listening address.
	Addr string
	// RedisURL is the Redis the stack runs on (the embedded one's when
	// REDIS_URL was not set); Embedded says which.
	RedisURL string
	Embedded bool
}

// Serve runs the whole system until ctx is done, then stops in order: no new
// requests, no new claims, every claimed job finished, and returns nil. Logs
// and (without FINANCE_WEBHOOK_URL) finance messages go to out as JSON lines;
// metric lines feed the dashboard, and out too with HOURGLASS_LOG_METRICS.
// ready, if not nil, is told where the stack runs once requests are served.
func Serve(ctx context.Context, cfg config.Config, out io.Writer, ready func(Running)) error {
	// Listen first: an address in use fails before anything else starts.
	ln, err := net.Listen("tcp", cfg.Addr)
	if errors.Is(err, syscall.EADDRINUSE) {
		return fmt.Errorf("listen on %s: %w (another hourglass serve, or another program, holds it): "+
			"stop that one, or serve on another address with --addr 127.0.0.1:8081 (or HOURGLASS_ADDR)", cfg.Addr, ErrAddrInUse)
	}
	if err != nil {
		return fmt.Errorf("listen on %s: %w", cfg.Addr, err)
	}
	defer func() { _ = ln.Close() }() // closed already once served
	watching := newWatchState()
	log := app.NewLoggerFrom(quietHandler{
		inner: slog.NewJSONHandler(out, &slog.HandlerOptions{Level: cfg.SlogLevel()}), state: watching,
	})
	embedded := cfg.RedisURL == ""
	if embedded {
		mr := miniredis.NewMiniRedis()
		if err := mr.StartAddr("127.0.0.1:0"); err != nil {
			return fmt.Errorf("embedded redis: %w", err)
		}
		defer mr.Close()
		cfg.RedisURL = config.Secret("redis://" + mr.Addr())
		log.Warn("REDIS_URL is not set: using an embedded in-process Redis (miniredis); its data is gone when hourglass stops",
			"redis_addr", mr.Addr())
	}
	rdb, err := app.Connect(cfg, app.WithLogger(log))
	if err != nil {
		return err
	}
	defer func() { _ = rdb.Close() }()
	a, err := app.New(cfg, log, rdb)
	if err != nil {
		return err
	}
	// Before anything else talks to Redis: one clear word if it is not there.
	watch := newRedisWatch(func(ctx context.Context) error { return redisconn.Ping(ctx, rdb) },
		redisconn.Redacted(string(cfg.RedisURL)), log, a.Clock, watching)
	var since time.Time
	var backoff time.Duration
	firstWait := watch.check(ctx, &since, &backoff)
	// The dashboard adds up the metrics lines the app writes; the terminal
	// gets them only when asked (they would bury the log lines people read).
	tally := NewTally(a.Clock, 10*time.Second, time.Hour)
	if cfg.LogMetrics {
		a.EmitMetricsTo(io.MultiWriter(out, tally))
	} else {
		a.EmitMetricsTo(tally)
	}
	if cfg.CreateTables {
		if err := a.CreateTables(ctx); err != nil {
			return err
		}
	}
	provider, err := a.Provider(true)
	if err != nil {
		return err
	}
	notifier, err := a.Notifier(ctx, out, true)
	if err != nil {
		return err
	}
	proc, err := a.Processor(provider, notifier)
	if err != nil {
		return err
	}
	wq := NewWorkQueue(WorkQueueConfig{
		Handler: a.Consumer(proc, true).Handle, Kill: a.Kill,
		Visibility: cfg.Visibility, MaxReceives: cfg.MaxReceives, Log: log,
	})
	p, err := a.Poller(wq, false)
	if err != nil {
		return err
	}
	a.OnScheduled(p.Notify)

	rt := a.Router()
	handler := localServer{api: Gateway{Handler: rt.Serve, Log: log, Route: rt.Pattern, Observe: tally.ObserveRequest}}
	dashboard := ""
	if cfg.Auth == "dev" { // admin routes answer X-Admin-Token only in dev mode
		handler.dashboard = Dashboard{Token: string(cfg.AdminToken), Tally: tally, App: a}
		dashboard = "http://" + ln.Addr().String() + DashboardPath
	}
	srv := &http.Server{Handler: handler, ReadHeaderTimeout: 10 * time.Second}

	wq.Start()
	watchCtx, stopWatching := context.WithCancel(ctx)
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		watch.run(watchCtx, since, backoff, firstWait)
	}()
	pollCtx, stopPolling := context.WithCancel(context.Background())
	polled := make(chan struct{})
	go func() {
		defer close(polled)
		p.Run(pollCtx, time.Time{})
	}()
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	log.Info("hourglass is serving", "addr", ln.Addr().String(), "auth", cfg.Auth, "ledger", cfg.Ledger,
		"redis", redisconn.Redacted(string(cfg.RedisURL)), "poll_interval", cfg.PollInterval.String(), "lease", cfg.Lease.String(),
		"dashboard", dashboard)
	if ready != nil {
		ready(Running{Addr: ln.Addr().String(), RedisURL: string(cfg.RedisURL), Embedded: embedded})
	}

	var serveErr error
	select {
	case <-ctx.Done():
	case serveErr = <-served:
	}
	log.Info("shutting down: finishing claimed work")
	shutdownCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = srv.Shutdown(shutdownCtx)
	stopPolling()
	<-polled
	wq.Close()
	stopWatching()
	<-watched
	log.Info("stopped")
	if serveErr != nil && !errors.Is(serveErr, http.ErrServerClosed) {
		return serveErr
	}
	return nil
}
