package cli

import (
	"bytes"
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"

	"github.com/hourglass/hourglass/internal/proctest"
	"github.com/hourglass/hourglass/shared/config"
	"github.com/hourglass/hourglass/shared/localstack"
)

// cliIn runs the command line with adverts looked for in dir.
func cliIn(t *testing.T, dir string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	var out, errb bytes.Buffer
	ctx := context.WithValue(context.Background(), stateDirKey{}, dir)
	code = run(ctx, args, strings.NewReader(""), &out, &errb)
	return out.String(), errb.String(), code
}

// TestOperatorCommandsFindTheLocalStack: with no REDIS_URL an operator
// command acts on the running hourglass serve (its embedded Redis, its
// prefix) and says so; with two running it asks which, and --stack or
// HOURGLASS_STACK picks one; REDIS_URL on a Redis without Hourglass data is
// warned about; a stopped serve's advert is gone, a killed one's ignored.
func TestOperatorCommandsFindTheLocalStack(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("REDIS_URL", "")
	t.Setenv("HOURGLASS_STACK", "")
	t.Setenv("HOURGLASS_LOG_LEVEL", "error")
	env := map[string]string{"REDIS_URL": "", "HOURGLASS_STATE_DIR": dir, "HOURGLASS_REDIS_PREFIX": "demo:"}
	if _, errOut, code := cliIn(t, dir, "stats"); code != exitUsage || !strings.Contains(errOut, "no hourglass serve runs on this machine") {
		t.Fatalf("with nothing running: exit %d, %s", code, errOut)
	}
	a := serve(t, proctest.FreeAddr(t), env)
	addrA := strings.TrimPrefix(a.base, "http://")
	w := a.create("alice", "find-1", `{"amount":"1.00","currency":"CNY","destination":"bank_1","delay_seconds":600}`)
	id, _ := w.body["id"].(string)
	if id == "" {
		t.Fatalf("create: %d %s", w.status, w.raw)
	}
	out, errOut, code := cliIn(t, dir, "peek", "withdrawals", "--json")
	if code != exitOK || !strings.Contains(out, id) {
		t.Fatalf("peek: exit %d\nstdout: %s\nstderr: %s", code, out, errOut)
	}
	says := regexp.MustCompile(`^hourglass: acting on the local stack at ` + regexp.QuoteMeta(addrA) +
		` \(hourglass serve, pid \d+\): redis://127\.0\.0\.1:\d+, prefix "demo:"\n$`)
	if !says.MatchString(errOut) {
		t.Errorf("peek's stderr does not say which stack:\n%q", errOut)
	}

	b := serve(t, proctest.FreeAddr(t), env)
	addrB := strings.TrimPrefix(b.base, "http://")
	if _, errOut, code := cliIn(t, dir, "stats"); code != exitUsage || !strings.Contains(errOut, "2 hourglass serve processes run") ||
		!strings.Contains(errOut, addrA) || !strings.Contains(errOut, addrB) || !strings.Contains(errOut, "--stack") {
		t.Errorf("with two running: exit %d, %s", code, errOut)
	}
	if out, errOut, code := cliIn(t, dir, "--stack", addrB, "peek", "withdrawals", "--json"); code != exitOK ||
		strings.Contains(out, id) || !strings.Contains(errOut, "local stack at "+addrB) {
		t.Errorf("--stack %s: exit %d\nstdout: %s\nstderr: %s", addrB, code, out, errOut)
	}
	t.Setenv("HOURGLASS_STACK", addrA)
	if out, errOut, code := cliIn(t, dir, "peek", "withdrawals", "--json"); code != exitOK || !strings.Contains(out, id) {
		t.Errorf("HOURGLASS_STACK=%s: exit %d\nstdout: %s\nstderr: %s", addrA, code, out, errOut)
	}
	if _, errOut, code := cliIn(t, dir, "--stack", "127.0.0.1:1", "stats"); code != exitUsage || !strings.Contains(errOut, "no hourglass serve runs at 127.0.0.1:1") {
		t.Errorf("--stack of nothing: exit %d, %s", code, errOut)
	}
	t.Setenv("HOURGLASS_STACK", "")

	// An unrelated Redis named by REDIS_URL: acted on, and warned about.
	other := miniredis.RunT(t)
	_ = other.Set("someone-else:key", "x")
	t.Setenv("REDIS_URL", "redis://"+other.Addr())
	_, errOut, code = cliIn(t, dir, "--stack", "", "stats")
	if code != exitOK || !strings.Contains(errOut, "acting on redis://"+other.Addr()+" (REDIS_URL)") ||
		!strings.Contains(errOut, `holds no Hourglass data under prefix "hg:"`) {
		t.Errorf("an unrelated REDIS_URL: exit %d, %s", code, errOut)
	}
	t.Setenv("REDIS_URL", "")

	// Stopped: b exits 0 and its advert goes; killed: a's stays, ignored.
	if err := b.cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	<-b.exited
	if b.err != nil {
		t.Errorf("serve after SIGINT: %v, want exit 0", b.err)
	}
	if _, err := os.Stat(filepath.Join(dir, strings.ReplaceAll(addrB, ":", "_")+".json")); !os.IsNotExist(err) {
		t.Errorf("the stopped stack's advert is still there: %v", err)
	}
	_ = a.cmd.Process.Kill()
	<-a.exited
	if _, errOut, code := cliIn(t, dir, "stats"); code != exitUsage || !strings.Contains(errOut, "no hourglass serve runs") {
		t.Errorf("after both stopped: exit %d, %s", code, errOut)
	}
}

// TestServeTalks: a serve on an address another serve holds names it; the
// DynamoDB ledger without an endpoint or credentials is refused before
// anything starts; metric lines stay off the terminal unless asked for.
func TestServeTalks(t *testing.T) {
	dir := t.TempDir()
	a := serve(t, proctest.FreeAddr(t), map[string]string{"REDIS_URL": "", "HOURGLASS_STATE_DIR": dir})
	addr := strings.TrimPrefix(a.base, "http://")
	cmd := exec.Command(proctest.Build(t, hourglassPkg), "serve", "--addr", addr)
	cmd.Env = append(os.Environ(), "HOURGLASS_STATE_DIR="+dir)
	out, err := cmd.CombinedOutput()
	if code := cmd.ProcessState.ExitCode(); code != exitFailure || !regexp.MustCompile(`hourglass serve \(pid \d+, since .*\) already runs at `+
		regexp.QuoteMeta(addr)+`: .*--addr 127\.0\.0\.1:8081 \(or HOURGLASS_ADDR\)`).Match(out) {
		t.Errorf("a second serve on %s: exit %d (%v)\n%s", addr, code, err, out)
	}

	for _, v := range awsCredentialEnv {
		t.Setenv(v, "")
	}
	nothing := filepath.Join(t.TempDir(), "none")
	t.Setenv("HOME", nothing)
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", nothing)
	t.Setenv("AWS_CONFIG_FILE", nothing)
	t.Setenv("HOURGLASS_LEDGER", "dynamodb")
	t.Setenv("DYNAMODB_ENDPOINT", "")
	if _, errOut, code := cliIn(t, dir, "serve", "--addr", "127.0.0.1:0"); code != exitUsage ||
		!strings.Contains(errOut, "HOURGLASS_LEDGER=dynamodb needs DYNAMODB_ENDPOINT locally") {
		t.Errorf("dynamodb without an endpoint: exit %d, %s", code, errOut)
	}
	// A shared credentials file may hold a default profile: not refused.
	creds := filepath.Join(t.TempDir(), "credentials")
	if err := os.WriteFile(creds, []byte("[default]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", creds)
	if err := localLedgerReachable(config.Config{Ledger: "dynamodb"}); err != nil {
		t.Errorf("with a shared credentials file: %v", err)
	}

	// A payout processed: the terminal shows finance's message and no EMF
	// line; with --log-metrics it shows them too.
	r := a.create("alice", "talk-1", `{"amount":"1.00","currency":"CNY","destination":"bank_1","delay_seconds":0}`)
	if r.status != 202 {
		t.Fatalf("create: %d %s", r.status, r.raw)
	}
	waitFor(t, 30*time.Second, "payout.processed in the log", func() bool {
		b, _ := os.ReadFile(a.log)
		return bytes.Contains(b, []byte(`"type":"payout.processed"`))
	})
	if b, _ := os.ReadFile(a.log); bytes.Contains(b, []byte(`"_aws"`)) {
		t.Errorf("metric lines on the terminal without --log-metrics:\n%s", tail(b, 2048))
	}
	t.Setenv("HOURGLASS_LEDGER", "redis")
	m := exec.Command(proctest.Build(t, hourglassPkg), "serve", "--addr", proctest.FreeAddr(t), "--log-metrics")
	m.Env = append(os.Environ(), "HOURGLASS_STATE_DIR="+dir, "HOURGLASS_POLL_INTERVAL=50ms")
	stdout, err := m.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = m.Process.Kill(); _ = m.Wait() }()
	found := make(chan bool, 1)
	go func() {
		buf := make([]byte, 0, 64<<10)
		chunk := make([]byte, 4096)
		for {
			n, err := stdout.Read(chunk)
			buf = append(buf, chunk[:n]...)
			if bytes.Contains(buf, []byte(`"_aws"`)) {
				found <- true
				_, _ = io.Copy(io.Discard, stdout)
				return
			}
			if err != nil {
				found <- false
				return
			}
		}
	}()
	select {
	case ok := <-found:
		if !ok {
			t.Error("--log-metrics printed no metric line")
		}
	case <-time.After(60 * time.Second):
		t.Error("--log-metrics printed no metric line within 60 s")
	}
}

// TestMakeRunEndsCleanly: `make run` on a terminal builds with progress,
// serves, and one Ctrl-C ends it with status 0, make's included. script(1)
// gives it the terminal; the ^C byte it forwards becomes SIGINT there.
func TestMakeRunEndsCleanly(t *testing.T) {
	if _, err := exec.LookPath("script"); err != nil {
		t.Fatalf("script(1) is missing (util-linux/bsdutils): %v", err)
	}
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	addr := proctest.FreeAddr(t)
	bin := filepath.Join(dir, "hourglass")
	// -race as proctest builds it: the packages are in the build cache.
	cmd := exec.Command("script", "-qefc", "make --no-print-directory run HOURGLASS_BIN="+bin+" ARGS='--addr "+addr+"'", "/dev/null")
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "GOFLAGS=-race", "HOURGLASS_STATE_DIR="+dir, "TERM=xterm")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	var out lockedBuffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	defer func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
		}
	}()
	deadline := time.Now().Add(10 * time.Minute) // a cold build cache compiles ~430 packages
	for {
		if live, _ := localstack.FindAdverts(dir); len(live) == 1 {
			break
		}
		select {
		case err := <-exited:
			t.Fatalf("make run ended before serving: %v\n%s", err, out.String())
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("make run did not serve within 10 min:\n%s", out.String())
		}
	}
	if _, err := stdin.Write([]byte{3}); err != nil { // Ctrl-C
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		if err != nil {
			t.Errorf("make run after Ctrl-C: %v, want exit 0\n%s", err, out.String())
		}
	case <-time.After(60 * time.Second):
		t.Fatalf("make run did not end within 60 s of Ctrl-C:\n%s", out.String())
	}
	text := out.String()
	for _, want := range []string{"make run: building " + bin, "make run: starting " + bin + " serve --addr " + addr,
		`"msg":"hourglass is serving"`, `"msg":"stopped"`} {
		if !strings.Contains(text, want) {
			t.Errorf("make run's output lacks %q:\n%s", want, text)
		}
	}
	if strings.Contains(text, "make: *** ") { // "Error 1", "Interrupt"
		t.Errorf("make reports a failure:\n%s", text)
	}
	if live, _ := localstack.FindAdverts(dir); len(live) != 0 {
		t.Errorf("the advert outlived make run: %+v", live)
	}
}
