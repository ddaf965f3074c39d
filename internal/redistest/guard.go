package redistest

import (
	"bytes"
	"os"
	"strings"
	"testing"

	"github.com/hourglass/hourglass/shared/redisguard"
)

// ServerlessCommands is the HOURGLASS_REDIS_COMMANDS the stack suites run
// with (the serve tests, the fault runs, the cluster tests): every command
// the functions send passes the ElastiCache Serverless guard, so one it does
// not serve fails a test here before it fails in production. Test set-up
// that drives Redis itself (ACL SETUSER, CONFIG, killing nodes) uses clients
// of its own, unguarded.
const ServerlessCommands = string(redisguard.ElastiCacheServerless)

// AssertNoRefusals fails t when it ends if any command guard of this
// process refused a command meanwhile, or if one of the log files (of an
// `hourglass serve` process) holds a refusal line.
func AssertNoRefusals(t testing.TB, logs ...string) {
	t.Helper()
	before := redisguard.Total()
	t.Cleanup(func() {
		if n := redisguard.Total() - before; n > 0 {
			t.Errorf("redistest: the command guard refused %d commands during the test: each is one ElastiCache Serverless would refuse (see the %q log lines)",
				n, redisguard.LogMessage)
		}
		for _, name := range logs {
			if lines := RefusalLines(name); len(lines) > 0 {
				t.Errorf("redistest: %s holds %d command refusals of the ElastiCache Serverless guard:\n  %s",
					name, len(lines), strings.Join(lines[:min(len(lines), 5)], "\n  "))
			}
		}
	})
}

// RefusalLines returns the command guard's refusal lines in the log file
// name (none if it cannot be read).
func RefusalLines(name string) []string {
	b, err := os.ReadFile(name)
	if err != nil {
		return nil
	}
	var out []string
	for _, l := range bytes.Split(b, []byte("\n")) {
		if bytes.Contains(l, []byte(redisguard.LogMessage)) {
			out = append(out, string(l))
		}
	}
	return out
}
