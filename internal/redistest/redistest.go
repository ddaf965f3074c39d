// Package redistest starts real redis-server processes and miniredis instances
// for tests. Each real server runs on its own free loopback port with its own
// directory, so tests are isolated and may kill or restart it.
package redistest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/hourglass/hourglass/internal/proctest"
)

// Server is a redis-server process owned by a test.
type Server struct {
	t    testing.TB
	port int
	dir  string
	args []string

	mu  sync.Mutex
	cmd *exec.Cmd
}

type options struct {
	aof  bool
	args []string
}

// Option configures Start.
type Option func(*options)

// WithAOF turns on the append-only file with an fsync per write, so a killed
// and restarted server keeps every acknowledged write.
func WithAOF() Option { return func(o *options) { o.aof = true } }

// WithArgs passes further command-line arguments to redis-server.
func WithArgs(args ...string) Option {
	return func(o *options) { o.args = append(o.args, args...) }
}

// Start spawns a redis-server on a free loopback port; it stops with the test.
func Start(t testing.TB, opts ...Option) *Server {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		t.Fatalf("redistest: redis-server is not installed (bash .ci/run installs it): %v", err)
	}
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	s := &Server{t: t, dir: t.TempDir()}
	aof := "no"
	if o.aof {
		aof = "yes"
	}
	var lastErr error
	for range 5 {
		s.port = proctest.FreePort(t)
		s.args = append([]string{
			"--port", strconv.Itoa(s.port), "--bind", "127.0.0.1",
			"--save", "", "--appendonly", aof, "--appendfsync", "always",
			"--dir", s.dir, "--logfile", filepath.Join(s.dir, "redis.log"),
			"--daemonize", "no",
		}, o.args...)
		if lastErr = s.spawn(bin); lastErr == nil {
			t.Cleanup(s.Kill)
			return s
		}
	}
	t.Fatalf("redistest: redis-server did not start: %v", lastErr)
	return nil
}

func (s *Server) spawn(bin string) error {
	cmd := exec.Command(bin, s.args...)
	cmd.Dir = s.dir
	if err := cmd.Start(); err != nil {
		return err
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case err := <-exited:
			log, _ := os.ReadFile(filepath.Join(s.dir, "redis.log"))
			return fmt.Errorf("redis-server exited: %v\n%s", err, log)
		default:
		}
		if s.ping() == nil {
			s.mu.Lock()
			s.cmd = cmd
			s.mu.Unlock()
			return nil
		}
		time.Sleep(10 * time.Millisecond)
	}
	_ = cmd.Process.Kill()
	return errors.New("redis-server did not answer PING within 10s")
}

func (s *Server) ping() error {
	c := redis.NewClient(&redis.Options{Addr: s.Addr(), MaxRetries: -1, DialTimeout: 200 * time.Millisecond})
	defer func() { _ = c.Close() }()
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	return c.Ping(ctx).Err()
}

// Addr is host:port of the server.
func (s *Server) Addr() string { return "127.0.0.1:" + strconv.Itoa(s.port) }

// URL is the redis:// URL of the server.
func (s *Server) URL() string { return "redis://" + s.Addr() }

// Dir is the server's working directory (its AOF lives there).
func (s *Server) Dir() string { return s.dir }

// Client returns a client of the server, closed with the test.
func (s *Server) Client(t testing.TB) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: s.Addr()})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// Kill stops the server with SIGKILL, as a crash would; it is a no-op when the
// server is not running.
func (s *Server) Kill() {
	s.mu.Lock()
	cmd := s.cmd
	s.cmd = nil
	s.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Signal(syscall.SIGKILL)
	for range 500 { // the Wait goroutine reaps it; wait until the port is free
		if s.ping() != nil {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Restart starts a killed server again on the same port and directory.
func (s *Server) Restart() {
	s.t.Helper()
	s.Kill()
	bin, _ := exec.LookPath("redis-server")
	var err error
	for range 50 { // the old socket may linger for a moment
		if err = s.spawn(bin); err == nil {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	s.t.Fatalf("redistest: restart: %v", err)
}

// Backend is one Redis implementation a test case runs against.
type Backend struct {
	Name   string
	Client *redis.Client
	// Mini is set for the miniredis backend, Real for the redis-server one.
	Mini *miniredis.Miniredis
	Real *Server
}

// Backends returns a fresh miniredis and a fresh real redis-server: run the same
// test case on both, fast on the first and true on the second.
func Backends(t testing.TB) []Backend {
	t.Helper()
	m := miniredis.RunT(t)
	mc := redis.NewClient(&redis.Options{Addr: m.Addr()})
	t.Cleanup(func() { _ = mc.Close() })
	s := Start(t)
	return []Backend{
		{Name: "miniredis", Client: mc, Mini: m},
		{Name: "redis-server", Client: s.Client(t), Real: s},
	}
}

// Each runs fn as a subtest once per backend.
func Each(t *testing.T, fn func(t *testing.T, b Backend)) {
	t.Helper()
	for _, b := range Backends(t) {
		t.Run(b.Name, func(t *testing.T) { fn(t, b) })
	}
}
