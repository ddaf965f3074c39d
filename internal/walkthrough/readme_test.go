package walkthrough

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hourglass/hourglass/internal/proctest"
)

// The address the README's commands talk to: `make run`'s default.
const docAddr = "127.0.0.1:8080"

// blockTimeout bounds one block: the longest waits the README writes are
// bounded polling loops of two minutes.
const blockTimeout = 3 * time.Minute

// TestReadmeWalkthroughs runs each "## Walkthrough:" section of README.md as
// a reader would: its ```sh blocks in order, in one bash process (so the
// variables one block sets are there for the next), from the repository
// root, against a fresh `hourglass serve` of its own (embedded Redis, the
// default dev settings) on a free port. The only rewrites: 127.0.0.1:8080
// becomes that server's address, and `go run ./cmd/hourglass` the binary
// built here (the same program, without compiling it again per call). The
// output block the README shows after a sh block must match what the block
// printed (see Match), and the ```log blocks after it what serve has
// printed by then (waited for a bounded time: a log line may follow the
// answer that caused it). When it stops, serve must exit 0, as the README
// says of Ctrl-C.
func TestReadmeWalkthroughs(t *testing.T) {
	root := repoRoot(t)
	page, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	wts := Parse(string(page))
	if len(wts) < 4 {
		t.Fatalf("README.md has %d walkthroughs, want at least the 4 it had when this test was written", len(wts))
	}
	for _, tool := range []string{"bash", "curl", "jq", "date", "sed"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("the walkthroughs need %s (README's quick start lists it): %v", tool, err)
		}
	}
	bin := buildHourglass(t, root)
	for _, wt := range wts {
		t.Run(wt.Title, func(t *testing.T) {
			t.Parallel()
			checked, logs := 0, 0
			for _, b := range wt.Blocks {
				if b.Want != nil {
					checked++
				}
				if b.Log != nil {
					logs++
				}
			}
			if checked == 0 {
				t.Fatalf("README.md:%d: the walkthrough shows no output to check", wt.Line)
			}
			srv := startServe(t, bin)
			sh := startShell(t, root)
			rewrite := strings.NewReplacer(docAddr, srv.addr, "go run ./cmd/hourglass", bin)
			start := time.Now()
			for i, b := range wt.Blocks {
				out, status := sh.run(t, i, rewrite.Replace(b.Script))
				if b.Want != nil {
					if err := Match(b.Want, out); err != nil {
						t.Fatalf("README.md:%d: the block's output is not what the README shows: %v\n"+
							"--- the block ---\n%s--- what it printed (last status %d) ---\n%s", b.Line, err, b.Script, status, out)
					}
				}
				if b.Log != nil {
					if err := srv.logShows(b.Log); err != nil {
						t.Fatalf("README.md:%d: after the block, serve's output is not what the README shows: %v\n"+
							"--- the block ---\n%s", b.Line, err, b.Script)
					}
				}
			}
			t.Logf("%d blocks, %d outputs and %d logs checked, in %s", len(wt.Blocks), checked, logs,
				time.Since(start).Round(time.Millisecond))
			sh.close(t)
			srv.stop(t)
		})
	}
}

func repoRoot(t *testing.T) string {
	t.Helper()
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		t.Fatal("no caller")
	}
	return filepath.Join(filepath.Dir(file), "..", "..")
}

// buildHourglass builds cmd/hourglass as `make run` runs it.
func buildHourglass(t *testing.T, root string) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "hourglass")
	cmd := exec.Command("go", "build", "-o", bin, "./cmd/hourglass")
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/hourglass: %v\n%s", err, out)
	}
	return bin
}

// cleanEnv is the test's environment without any Hourglass setting, so the
// server runs with the defaults a reader's `make run` has.
func cleanEnv() []string {
	var out []string
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		switch {
		case strings.HasPrefix(name, "HOURGLASS_"), strings.HasPrefix(name, "REDIS_"),
			strings.HasPrefix(name, "PAYOUT_"), strings.HasPrefix(name, "PAYMENTS_"),
			strings.HasPrefix(name, "FINANCE_"), strings.HasPrefix(name, "ORDERS_"):
			continue
		}
		out = append(out, kv)
	}
	return out
}

type server struct {
	addr   string
	cmd    *exec.Cmd
	log    string
	exited chan struct{}
	err    error
}

// startServe starts `hourglass serve` on a free loopback port and waits for
// /healthz.
func startServe(t *testing.T, bin string) *server {
	t.Helper()
	logf, err := os.Create(filepath.Join(t.TempDir(), "serve.log"))
	if err != nil {
		t.Fatal(err)
	}
	s := &server{addr: proctest.FreeAddr(t), log: logf.Name(), exited: make(chan struct{})}
	s.cmd = exec.Command(bin, "serve")
	s.cmd.Env = append(cleanEnv(), "HOURGLASS_ADDR="+s.addr)
	s.cmd.Stdout, s.cmd.Stderr = logf, logf
	if err := s.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { s.err = s.cmd.Wait(); _ = logf.Close(); close(s.exited) }()
	t.Cleanup(func() {
		_ = s.cmd.Process.Kill()
		<-s.exited
		if t.Failed() {
			out, _ := os.ReadFile(s.log)
			if len(out) > 8<<10 {
				out = out[len(out)-8<<10:]
			}
			t.Logf("serve's output (the last 8 KiB):\n%s", out)
		}
	})
	if !proctest.AwaitHealthy(t, "http://"+s.addr+"/healthz", s.exited, time.Minute) {
		out, _ := os.ReadFile(s.log)
		t.Fatalf("serve exited early: %v\n%s", s.err, out)
	}
	return s
}

// logWait bounds the wait for a log line the README shows.
const logWait = 30 * time.Second

// logShows waits until what serve printed so far shows want (see Match).
func (s *server) logShows(want []string) error {
	deadline := time.Now().Add(logWait)
	for {
		out, err := os.ReadFile(s.log)
		if err != nil {
			return err
		}
		err = Match(want, string(out))
		if err == nil || time.Now().After(deadline) {
			return err
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// stop sends what Ctrl-C sends and wants exit 0.
func (s *server) stop(t *testing.T) {
	t.Helper()
	if err := s.cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	select {
	case <-s.exited:
		if s.err != nil {
			t.Errorf("serve after Ctrl-C: %v, want exit 0", s.err)
		}
	case <-time.After(time.Minute):
		t.Error("serve did not stop within a minute of Ctrl-C")
	}
}

// shell is one bash process that runs the blocks of a walkthrough in turn.
type shell struct {
	cmd   *exec.Cmd
	in    io.WriteCloser
	lines chan string
	dir   string
	done  sync.WaitGroup
}

// marker ends the output of a block; the block's status follows it.
const marker = "__walkthrough_block_done__"

func startShell(t *testing.T, root string) *shell {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	sh := &shell{lines: make(chan string, 1024), dir: t.TempDir()}
	sh.cmd = exec.CommandContext(ctx, "bash", "--noprofile", "--norc")
	sh.cmd.Dir = root
	sh.cmd.Env = cleanEnv()
	var err error
	if sh.in, err = sh.cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	out, err := sh.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	sh.cmd.Stderr = sh.cmd.Stdout // what a reader's terminal shows: both
	if err := sh.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	sh.done.Add(1)
	go func() {
		defer sh.done.Done()
		defer close(sh.lines)
		sc := bufio.NewScanner(out)
		sc.Buffer(make([]byte, 64<<10), 4<<20)
		for sc.Scan() {
			sh.lines <- sc.Text()
		}
	}()
	t.Cleanup(func() {
		cancel()
		sh.done.Wait()
		_ = sh.cmd.Wait() // already waited for if close ran
	})
	return sh
}

// run runs one block (sourced from a file, its standard input empty, as a
// pasted block has none) and returns what it printed and its last status.
func (sh *shell) run(t *testing.T, n int, script string) (string, int) {
	t.Helper()
	file := filepath.Join(sh.dir, fmt.Sprintf("block-%d.sh", n))
	if err := os.WriteFile(file, []byte(script), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := fmt.Fprintf(sh.in, "source %q </dev/null; printf '\\n%s %%d\\n' \"$?\"\n", file, marker); err != nil {
		t.Fatalf("bash: %v", err)
	}
	var out strings.Builder
	timeout := time.After(blockTimeout)
	for {
		select {
		case line, ok := <-sh.lines:
			if !ok {
				t.Fatalf("bash ended in block %d:\n%s\n--- printed ---\n%s", n, script, out.String())
			}
			if rest, found := strings.CutPrefix(line, marker+" "); found {
				var status int
				_, _ = fmt.Sscan(rest, &status)
				return out.String(), status
			}
			out.WriteString(line)
			out.WriteByte('\n')
		case <-timeout:
			t.Fatalf("block %d did not finish within %s:\n%s\n--- printed so far ---\n%s", n, blockTimeout, script, out.String())
		}
	}
}

func (sh *shell) close(t *testing.T) {
	t.Helper()
	_ = sh.in.Close()
	sh.done.Wait()
	if err := sh.cmd.Wait(); err != nil {
		t.Logf("bash: %v", err)
	}
}
