package localstack

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"

	"github.com/alicebob/miniredis/v2"

	"github.com/hourglass/hourglass/shared/app"
	"github.com/hourglass/hourglass/shared/config"
	"github.com/hourglass/hourglass/shared/redisconn"
)

// Serve runs the whole system until ctx is done, then stops in order: no new
// requests, no new claims, every claimed job finished, and returns nil. Logs
// and (without FINANCE_WEBHOOK_URL) finance messages go to out as JSON lines.
// ready, if not nil, is told the listening address once requests are served.
func Serve(ctx context.Context, cfg config.Config, out io.Writer, ready func(addr string)) error {
	log := app.NewLogger(out, cfg.SlogLevel())
	if cfg.RedisURL == "" {
		mr := miniredis.NewMiniRedis()
		if err := mr.StartAddr("127.0.0.1:0"); err != nil {
			return fmt.Errorf("embedded redis: %w", err)
		}
		defer mr.Close()
		cfg.RedisURL = config.Secret("redis://" + mr.Addr())
		log.Warn("REDIS_URL is not set: using an embedded in-process Redis (miniredis); its data is gone when hourglass stops",
			"redis_addr", mr.Addr())
	}
	rdb, err := app.Connect(cfg)
	if err != nil {
		return err
	}
	defer func() { _ = rdb.Close() }()
	if err := redisconn.Ping(ctx, rdb); err != nil {
		log.Warn("redis is not answering yet; /healthz says 503 until it does", "redis", redisconn.Redacted(string(cfg.RedisURL)), "error", err.Error())
	}
	a, err := app.New(cfg, log, rdb)
	if err != nil {
		return err
	}
	// The dashboard adds up the metrics lines the app writes beside its logs.
	tally := NewTally(a.Clock, 10*time.Second, time.Hour)
	a.EmitMetricsTo(io.MultiWriter(out, tally))
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

	ln, err := net.Listen("tcp", cfg.Addr)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", cfg.Addr, err)
	}
	rt := a.Router()
	handler := localServer{api: Gateway{Handler: rt.Serve, Log: log, Route: rt.Pattern, Observe: tally.ObserveRequest}}
	dashboard := ""
	if cfg.Auth == "dev" { // admin routes answer X-Admin-Token only in dev mode
		handler.dashboard = Dashboard{Token: string(cfg.AdminToken), Tally: tally, App: a}
		dashboard = "http://" + ln.Addr().String() + DashboardPath
	}
	srv := &http.Server{Handler: handler, ReadHeaderTimeout: 10 * time.Second}

	wq.Start()
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
		ready(ln.Addr().String())
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
	log.Info("stopped")
	if serveErr != nil && !errors.Is(serveErr, http.ErrServerClosed) {
		return serveErr
	}
	return nil
}
