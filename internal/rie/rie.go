// Package rie runs a Lambda function's bootstrap under the AWS Lambda runtime
// interface emulator (aws-lambda-rie), as Lambda's provided.al2023 runtime
// would: the emulator starts the bootstrap on the first invocation (the cold
// start), relays events to it over the Runtime API and reports the init and
// invoke durations in its log. make e2e and make invoke use it.
package rie

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Function is one function running under its own emulator process, on free
// loopback ports (the emulator's HTTP endpoint and the Runtime API), so that
// several run side by side.
type Function struct {
	// Name labels the function in errors and figures.
	Name string
	// URL is the invocation endpoint.
	URL string

	cmd    *exec.Cmd
	exited chan struct{}
	client *http.Client

	mu      sync.Mutex
	log     bytes.Buffer
	reports []Report
	// firstInvoke is the latency of the first invocation, as the caller saw
	// it: the cold start plus the handler's work.
	firstInvoke time.Duration
	invokes     int
}

// Options configures Start.
type Options struct {
	// Emulator is the aws-lambda-rie binary.
	Emulator string
	// Bootstrap is the function's executable.
	Bootstrap string
	// Env is the function's environment, on top of a minimal base (PATH,
	// HOME); the emulator passes its own environment on to the function.
	Env []string
	// Timeout is the function's timeout (AWS_LAMBDA_FUNCTION_TIMEOUT); it
	// bounds each invocation and sets the deadline in the handler's context.
	Timeout time.Duration
	// Log, if set, also receives the emulator's and the function's output as
	// it comes.
	Log io.Writer
}

// Report is what the emulator logged about one invocation.
type Report struct {
	// Init is the cold start (bootstrap started until it asked for its first
	// event), set on the first invocation only.
	Init     time.Duration
	Duration time.Duration
}

// DefaultTimeout is the function timeout when Options gives none.
const DefaultTimeout = 30 * time.Second

// Start starts the emulator for the function and waits until it accepts
// invocations. The bootstrap itself starts with the first invocation.
func Start(name string, o Options) (*Function, error) {
	if o.Timeout <= 0 {
		o.Timeout = DefaultTimeout
	}
	if o.Timeout%time.Second != 0 {
		return nil, fmt.Errorf("rie: %s: timeout %s is not whole seconds", name, o.Timeout)
	}
	for _, p := range []string{o.Emulator, o.Bootstrap} {
		if st, err := os.Stat(p); err != nil || st.IsDir() {
			return nil, fmt.Errorf("rie: %s: no executable at %q", name, p)
		}
	}
	var lastErr error
	for range 5 { // a port picked free may be taken before the emulator binds it
		f, err := start(name, o)
		if err == nil {
			return f, nil
		}
		lastErr = err
	}
	return nil, lastErr
}

func start(name string, o Options) (*Function, error) {
	ports, err := freePorts(2)
	if err != nil {
		return nil, err
	}
	addr := "127.0.0.1:" + strconv.Itoa(ports[0])
	f := &Function{
		Name: name, URL: "http://" + addr + "/2015-03-31/functions/function/invocations",
		exited: make(chan struct{}),
		client: &http.Client{Timeout: o.Timeout + 30*time.Second},
	}
	cmd := exec.Command(o.Emulator,
		"--runtime-interface-emulator-address", addr,
		"--runtime-api-address", "127.0.0.1:"+strconv.Itoa(ports[1]),
		"--log-level", "info",
		o.Bootstrap)
	cmd.Env = append([]string{
		"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME"),
		"AWS_LAMBDA_FUNCTION_NAME=" + name,
		"AWS_LAMBDA_FUNCTION_MEMORY_SIZE=512",
	}, o.Env...)
	cmd.Env = append(cmd.Env, "AWS_LAMBDA_FUNCTION_TIMEOUT="+strconv.Itoa(int(o.Timeout/time.Second)))
	// Its own process group, so that Stop ends the bootstrap with it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	pr, pw := io.Pipe()
	cmd.Stdout, cmd.Stderr = pw, pw
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("rie: %s: %w", name, err)
	}
	f.cmd = cmd
	scanned := make(chan struct{})
	go func() { f.scan(pr, o.Log); close(scanned) }()
	go func() {
		_ = cmd.Wait()
		_ = pw.Close()
		<-scanned
		close(f.exited)
	}()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case <-f.exited:
			return nil, fmt.Errorf("rie: %s: the emulator exited at start:\n%s", name, f.Log())
		default:
		}
		if c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond); err == nil {
			_ = c.Close()
			return f, nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	f.Stop()
	return nil, fmt.Errorf("rie: %s: the emulator did not listen on %s within 10s:\n%s", name, addr, f.Log())
}

func freePorts(n int) ([]int, error) {
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			_ = l.Close()
		}
	}()
	ports := make([]int, n)
	for i := range ports {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("rie: free port: %w", err)
		}
		ls = append(ls, l)
		ports[i] = l.Addr().(*net.TCPAddr).Port
	}
	return ports, nil
}

var (
	// The emulator's own account of the cold start: runtime process started
	// until it asked for its first event.
	initReport = regexp.MustCompile(`INIT REPORT\(durationMs: ([0-9.]+)\)`)
	// The REPORT line of each invocation, with "Init Duration" on the first.
	invokeReport = regexp.MustCompile(`^REPORT RequestId: \S+\s+(?:Init Duration: ([0-9.]+) ms\s+)?Duration: ([0-9.]+) ms`)
)

func (f *Function) scan(r io.Reader, tee io.Writer) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), 4*1024*1024)
	var pendingInit time.Duration
	for sc.Scan() {
		line := sc.Text()
		if tee != nil {
			if _, err := fmt.Fprintln(tee, line); err != nil {
				tee = nil // the copy is a convenience; f.log keeps every line
			}
		}
		f.mu.Lock()
		if f.log.Len() < 8<<20 {
			f.log.WriteString(line)
			f.log.WriteByte('\n')
		}
		if m := initReport.FindStringSubmatch(line); m != nil {
			pendingInit = ms(m[1])
		}
		if m := invokeReport.FindStringSubmatch(line); m != nil {
			rep := Report{Duration: ms(m[2])}
			if pendingInit > 0 {
				rep.Init, pendingInit = pendingInit, 0
			} else if m[1] != "" {
				rep.Init = ms(m[1])
			}
			f.reports = append(f.reports, rep)
		}
		f.mu.Unlock()
	}
}

func ms(s string) time.Duration {
	v, _ := strconv.ParseFloat(s, 64)
	return time.Duration(v * float64(time.Millisecond))
}

// Invoke sends one event and returns the function's response. A function
// error (the handler returned an error or panicked) is an error here, with
// the error document Lambda returns.
func (f *Function) Invoke(ctx context.Context, payload []byte) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, f.URL, bytes.NewReader(payload))
	if err != nil {
		return nil, err
	}
	began := time.Now()
	resp, err := f.client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("rie: invoke %s: %w", f.Name, err)
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(resp.Body)
	took := time.Since(began)
	f.mu.Lock()
	f.invokes++
	if f.invokes == 1 {
		f.firstInvoke = took
	}
	f.mu.Unlock()
	if err != nil {
		return nil, fmt.Errorf("rie: invoke %s: %w", f.Name, err)
	}
	if resp.StatusCode != http.StatusOK {
		if len(bytes.TrimSpace(body)) == 0 {
			body = []byte("the function failed; its log says why")
		}
		return body, fmt.Errorf("rie: invoke %s: emulator answered %d: %s", f.Name, resp.StatusCode, body)
	}
	if fe, ok := functionError(body); ok {
		return body, fmt.Errorf("rie: %s failed: %s", f.Name, fe)
	}
	if bytes.HasPrefix(body, []byte("Task timed out")) {
		return body, fmt.Errorf("rie: %s: %s", f.Name, body)
	}
	return body, nil
}

// functionError recognizes Lambda's error document,
// {"errorMessage":"...","errorType":"..."}.
func functionError(body []byte) (string, bool) {
	var doc struct {
		Message *string `json:"errorMessage"`
		Type    string  `json:"errorType"`
	}
	if json.Unmarshal(body, &doc) != nil || doc.Message == nil {
		return "", false
	}
	return strings.TrimSpace(doc.Type + ": " + *doc.Message), true
}

// Reports returns the emulator's reports so far, one per finished invocation.
func (f *Function) Reports() []Report {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]Report(nil), f.reports...)
}

// ColdStart returns the init duration the emulator reported for the first
// invocation, and the first invocation's latency as the caller saw it. ok is
// false until the emulator has reported it.
func (f *Function) ColdStart() (init, firstInvoke time.Duration, ok bool) {
	// The REPORT line follows the response by a moment.
	for deadline := time.Now().Add(2 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		f.mu.Lock()
		if len(f.reports) > 0 {
			init, firstInvoke = f.reports[0].Init, f.firstInvoke
			f.mu.Unlock()
			return init, firstInvoke, init > 0
		}
		f.mu.Unlock()
		if time.Now().After(deadline) {
			return 0, f.firstInvoke, false
		}
	}
}

// PID is the emulator's process id. The bootstrap runs as its child, in
// its process group, from the first invocation on (see Bootstrap).
func (f *Function) PID() int { return f.cmd.Process.Pid }

// Bootstrap returns the process id of the function's bootstrap: the
// emulator's child, started by the first invocation. Linux only (it reads
// /proc).
func (f *Function) Bootstrap() (int, error) {
	dirs, err := os.ReadDir("/proc")
	if err != nil {
		return 0, fmt.Errorf("rie: %s: %w", f.Name, err)
	}
	for _, d := range dirs {
		pid, err := strconv.Atoi(d.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + d.Name() + "/stat")
		if err != nil {
			continue // it ended meanwhile
		}
		// pid (comm) state ppid ...: comm may hold spaces and parentheses.
		_, rest, ok := bytesCutLast(b, ") ")
		if !ok {
			continue
		}
		fields := strings.Fields(string(rest))
		if len(fields) > 1 && fields[1] == strconv.Itoa(f.PID()) {
			return pid, nil
		}
	}
	return 0, fmt.Errorf("rie: %s: no bootstrap process (was the function invoked?)", f.Name)
}

func bytesCutLast(b []byte, sep string) (before, after []byte, ok bool) {
	i := bytes.LastIndex(b, []byte(sep))
	if i < 0 {
		return b, nil, false
	}
	return b[:i], b[i+len(sep):], true
}

// Log returns what the emulator and the function wrote so far.
func (f *Function) Log() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.log.String()
}

// Stop ends the emulator and the function (SIGTERM, then SIGKILL after 5s)
// and waits for them.
func (f *Function) Stop() {
	if f.cmd == nil || f.cmd.Process == nil {
		return
	}
	pgid := f.cmd.Process.Pid
	_ = syscall.Kill(-pgid, syscall.SIGTERM)
	select {
	case <-f.exited:
	case <-time.After(5 * time.Second):
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
		<-f.exited
	}
	// The bootstrap may outlive the emulator by a moment.
	_ = syscall.Kill(-pgid, syscall.SIGKILL)
}
