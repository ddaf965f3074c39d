package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"text/tabwriter"
	"time"

	"github.com/mattn/go-isatty"
	"github.com/schollz/progressbar/v3"
	"github.com/spf13/cobra"

	"github.com/hourglass/hourglass/shared/app"
	"github.com/hourglass/hourglass/shared/config"
	"github.com/hourglass/hourglass/shared/redisconn"
)

// usageError is a mistake on the command line or in the environment: the
// command did nothing, and exits 2.
type usageError struct{ err error }

func (u usageError) Error() string { return u.err.Error() }
func (u usageError) Unwrap() error { return u.err }

func usagef(format string, args ...any) error { return usageError{fmt.Errorf(format, args...)} }

// usageArgs makes an argument check's complaint a usage error.
func usageArgs(check cobra.PositionalArgs) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if err := check(cmd, args); err != nil {
			return usageError{err}
		}
		return nil
	}
}

// openApp wires the app the operator commands work on, from the environment,
// as serve does, against the Redis of REDIS_URL (which must answer).
func openApp(cmd *cobra.Command) (*app.App, func(), error) {
	if in, ok := cmd.Context().Value(inProcessKey{}).(inProcess); ok {
		return in.app, func() {}, nil // the operator function's, open across calls
	}
	cfg, err := config.Load(config.Local)
	if err != nil {
		return nil, nil, usageError{err}
	}
	acting, byURL, err := resolveStack(cmd, &cfg)
	if err != nil {
		return nil, nil, err
	}
	level := cfg.SlogLevel()
	if os.Getenv("HOURGLASS_LOG_LEVEL") == "" {
		level = slog.LevelWarn // an operator command's output is its report, not logs
	}
	log := app.NewLogger(cmd.ErrOrStderr(), level)
	ctx := cmd.Context()
	if err := app.ResolveSecrets(ctx, &cfg); err != nil {
		return nil, nil, err
	}
	rdb, err := app.Connect(cfg, app.WithLogger(log))
	if err != nil {
		return nil, nil, usageError{err}
	}
	pingCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := redisconn.Ping(pingCtx, rdb); err != nil {
		_ = rdb.Close()
		return nil, nil, fmt.Errorf("redis %s is not answering: %w", redisconn.Redacted(string(cfg.RedisURL)), err)
	}
	a, err := app.New(cfg, log, rdb)
	if err != nil {
		_ = rdb.Close()
		return nil, nil, usageError{err}
	}
	say := cmd.ErrOrStderr()
	_, _ = fmt.Fprintln(say, "hourglass: acting on "+acting)
	if byURL && !hasData(pingCtx, rdb, cfg.RedisPrefix) {
		hint := "check REDIS_URL and HOURGLASS_REDIS_PREFIX"
		if local, err := findStack(ctx, ""); err == nil {
			hint = fmt.Sprintf("hourglass serve runs at %s: unset REDIS_URL to act on it", local.Addr)
		}
		_, _ = fmt.Fprintf(say, "hourglass: warning: this Redis holds no Hourglass data under prefix %q: is it the stack you meant? (%s)\n",
			cfg.RedisPrefix, hint)
	}
	return a, func() { _ = rdb.Close() }, nil
}

// terminal reports whether w is a terminal a person watches.
func terminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok || os.Getenv("TERM") == "dumb" {
		return false
	}
	return isatty.IsTerminal(f.Fd()) || isatty.IsCygwinTerminal(f.Fd())
}

// progress shows how a long command advances, on standard error when that is
// a terminal; otherwise it shows nothing. A nil *progress does nothing.
type progress struct{ bar *progressbar.ProgressBar }

// newProgress starts a bar of total steps, or a spinner when total < 0.
func newProgress(cmd *cobra.Command, total int64, what string) *progress {
	w := cmd.ErrOrStderr()
	if !terminal(w) {
		return nil
	}
	opts := []progressbar.Option{
		progressbar.OptionSetWriter(w),
		progressbar.OptionSetDescription(what),
		progressbar.OptionThrottle(100 * time.Millisecond),
		progressbar.OptionClearOnFinish(),
		progressbar.OptionSetElapsedTime(true),
	}
	if total >= 0 {
		opts = append(opts, progressbar.OptionShowCount(), progressbar.OptionSetWidth(30))
	} else {
		opts = append(opts, progressbar.OptionSpinnerType(14))
	}
	return &progress{bar: progressbar.NewOptions64(total, opts...)}
}

// add records n more steps done.
func (p *progress) add(n int) {
	if p != nil {
		_ = p.bar.Add(n)
	}
}

// spin keeps a spinner turning until done is called.
func (p *progress) spin() (done func()) {
	if p == nil {
		return func() {}
	}
	stop := make(chan struct{})
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
				_ = p.bar.Add(1)
			}
		}
	}()
	return func() {
		close(stop)
		<-finished
		p.finish()
	}
}

func (p *progress) finish() {
	if p != nil {
		_ = p.bar.Finish()
	}
}

// printer writes a command's text output and keeps the first write error,
// so that output cut short (a closed pipe, a full disk) fails the command
// as printJSON's does, rather than exiting 0 after half a table. After an
// error it writes nothing more.
type printer struct {
	w   io.Writer
	err error
}

// newTable is a printer that lines up tab-separated columns; flush writes
// them out.
func newTable(w io.Writer) *printer { return &printer{w: tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)} }

func (p *printer) printf(format string, a ...any) {
	if p.err == nil {
		_, p.err = fmt.Fprintf(p.w, format, a...)
	}
}

func (p *printer) println(a ...any) {
	if p.err == nil {
		_, p.err = fmt.Fprintln(p.w, a...)
	}
}

// flush writes out a table's columns and returns the first write error.
func (p *printer) flush() error {
	if tw, ok := p.w.(*tabwriter.Writer); ok && p.err == nil {
		p.err = tw.Flush()
	}
	return p.err
}

// printJSON writes v as one line of JSON.
// jsonDoc is where the --json documents of peek, dead list, payouts
// unresolved and preheat are described, field by field (a test in this
// package holds the page to what the commands print).
const jsonDoc = "docs/operations.md#the-commands-json-output"

func printJSON(w io.Writer, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(w, "%s\n", b)
	return err
}

// since says how far t is from now, for people: "in 4m10s", "12s ago".
func since(t, now time.Time) string {
	d := t.Sub(now)
	switch {
	case d > 0:
		return "in " + roundDuration(d).String()
	case d < 0:
		return roundDuration(-d).String() + " ago"
	}
	return "now"
}

// roundDuration keeps a duration readable: milliseconds below a second, whole
// seconds above a minute.
func roundDuration(d time.Duration) time.Duration {
	switch {
	case d < time.Second:
		return d.Round(time.Millisecond)
	case d < time.Minute:
		return d.Round(100 * time.Millisecond)
	}
	return d.Round(time.Second)
}
