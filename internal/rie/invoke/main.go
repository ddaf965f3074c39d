// Command invoke runs one function's bootstrap under the Lambda runtime
// interface emulator with the caller's environment, sends it one event and
// prints the response, like `sam local invoke`: the response on stdout, the
// function's log and the cold-start figures on stderr. make invoke runs it.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/hourglass/hourglass/internal/rie"
)

func main() {
	var (
		emulator  = flag.String("emulator", "bin/aws-lambda-rie", "the aws-lambda-rie binary")
		bootstrap = flag.String("bootstrap", "", "the function's bootstrap")
		name      = flag.String("name", "function", "the function's name (AWS_LAMBDA_FUNCTION_NAME)")
		event     = flag.String("event", "", "the event: a JSON file, - for stdin")
		timeout   = flag.Duration("timeout", 10*time.Second, "the function's timeout, whole seconds (the poller polls until shortly before it)")
		quiet     = flag.Bool("quiet", false, "do not copy the function's log to stderr")
	)
	flag.Parse()
	if err := run(*emulator, *bootstrap, *name, *event, *timeout, *quiet); err != nil {
		fmt.Fprintln(os.Stderr, "invoke:", err)
		os.Exit(1)
	}
}

func run(emulator, bootstrap, name, eventFile string, timeout time.Duration, quiet bool) error {
	if bootstrap == "" || eventFile == "" {
		return fmt.Errorf("-bootstrap and -event are required")
	}
	var payload []byte
	var err error
	if eventFile == "-" {
		var buf bytes.Buffer
		_, err = buf.ReadFrom(os.Stdin)
		payload = buf.Bytes()
	} else {
		payload, err = os.ReadFile(eventFile)
	}
	if err != nil {
		return err
	}
	if !json.Valid(payload) {
		return fmt.Errorf("%s is not JSON", eventFile)
	}
	opts := rie.Options{Emulator: emulator, Bootstrap: bootstrap, Env: os.Environ(), Timeout: timeout}
	if !quiet {
		opts.Log = os.Stderr
	}
	fn, err := rie.Start(name, opts)
	if err != nil {
		return err
	}
	defer fn.Stop()
	out, invokeErr := fn.Invoke(context.Background(), payload)
	if len(out) > 0 {
		var pretty bytes.Buffer
		if json.Indent(&pretty, out, "", "  ") == nil {
			out = pretty.Bytes()
		}
		fmt.Println(string(out))
	}
	size := int64(0)
	if st, err := os.Stat(bootstrap); err == nil {
		size = st.Size()
	}
	init, first, ok := fn.ColdStart()
	initText := "not reported"
	if ok {
		initText = fmt.Sprintf("%.1f ms", float64(init)/float64(time.Millisecond))
	}
	fmt.Fprintf(os.Stderr, "%s: init %s, first invocation %.1f ms, bootstrap %.1f MiB\n",
		name, initText, float64(first)/float64(time.Millisecond), float64(size)/(1<<20))
	return invokeErr
}
