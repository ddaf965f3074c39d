// Package proctest has what tests that drive real processes share: free
// loopback ports, and this module's programs built once per test binary.
package proctest

import (
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

// FreePort is a loopback port nobody listens on (at the time of asking).
func FreePort(t testing.TB) int {
	t.Helper()
	return freeTCP(t).Port
}

// FreeAddr is "127.0.0.1:<a free port>".
func FreeAddr(t testing.TB) string {
	t.Helper()
	return freeTCP(t).String()
}

// freeTCP is a free loopback TCP address.
func freeTCP(t testing.TB) *net.TCPAddr {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("proctest: free port: %v", err)
	}
	defer func() { _ = l.Close() }()
	return l.Addr().(*net.TCPAddr)
}

type build struct {
	once sync.Once
	path string
	err  error
}

var (
	mu     sync.Mutex
	builds = map[string]*build{}
	dirs   []string
)

// Build builds the program of package pkg (an import path) with the race
// detector, once per test binary, and returns its path: tests drive the real
// program, signals and all. A TestMain calls RemoveBuilds after m.Run.
func Build(t testing.TB, pkg string) string {
	t.Helper()
	mu.Lock()
	b := builds[pkg]
	if b == nil {
		b = &build{}
		builds[pkg] = b
	}
	mu.Unlock()
	b.once.Do(func() {
		dir, err := os.MkdirTemp("", "proctest-"+path.Base(pkg))
		if err != nil {
			b.err = err
			return
		}
		mu.Lock()
		dirs = append(dirs, dir)
		mu.Unlock()
		b.path = filepath.Join(dir, path.Base(pkg))
		if out, err := exec.Command("go", "build", "-race", "-o", b.path, pkg).CombinedOutput(); err != nil {
			b.err = fmt.Errorf("go build %s: %v\n%s", pkg, err, out)
		}
	})
	if b.err != nil {
		t.Fatal(b.err)
	}
	return b.path
}

// RemoveBuilds deletes the programs Build made.
func RemoveBuilds() {
	mu.Lock()
	defer mu.Unlock()
	for _, d := range dirs {
		_ = os.RemoveAll(d)
	}
	dirs = nil
}

// AwaitHealthy polls url (a process's /healthz) until it answers 200 and
// reports true; it reports false as soon as exited is closed (the process
// ended first), and fails t once timeout passes.
func AwaitHealthy(t testing.TB, url string, exited <-chan struct{}, timeout time.Duration) bool {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		if resp, err := http.Get(url); err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return true
			}
		}
		select {
		case <-exited:
			return false
		case <-time.After(50 * time.Millisecond):
		}
	}
	t.Fatalf("%s did not answer 200 within %s", url, timeout)
	return false
}
