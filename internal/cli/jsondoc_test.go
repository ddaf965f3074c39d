package cli

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/hourglass/hourglass/internal/proctest"
	"github.com/hourglass/hourglass/internal/redistest"
)

// TestJSONOutputsAsDocumented runs each command whose --json output
// docs/operations.md shows ("The commands' JSON output") on a stack that
// has something of each kind to show (a scheduled job, a dead one, a payout
// that may have been paid, a preheated item with every term), and wants
// the fields the page shows to be exactly the fields the command prints,
// at every level, so neither can drift from the other.
func TestJSONOutputsAsDocumented(t *testing.T) {
	doc, err := os.ReadFile("../../docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	// The provider pays, but answers a "slow" destination past
	// PAYOUT_TIMEOUT: that payout may have been made. Its lookup is down.
	provider := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		var req struct {
			Destination string `json:"destination"`
		}
		_ = json.NewDecoder(r.Body).Decode(&req)
		if req.Destination == "slow" {
			time.Sleep(600 * time.Millisecond)
		}
		_, _ = w.Write([]byte(`{"payout_id":"po_1"}`))
	}))
	t.Cleanup(provider.Close)
	rs := redistest.Start(t)
	finance := newFinanceSwitch(t) // down: a paid withdrawal's job dies
	s := serve(t, proctest.FreeAddr(t), map[string]string{
		"REDIS_URL": rs.URL(), "FINANCE_WEBHOOK_URL": finance.URL, "HOURGLASS_MAX_RECEIVES": "1",
		"PAYOUT_URL": provider.URL, "PAYOUT_TIMEOUT": "200ms",
		"HOURGLASS_POLL_INTERVAL": "100ms", "HOURGLASS_LOG_LEVEL": "warn",
	})
	env := map[string]string{"REDIS_URL": rs.URL()}
	for key, body := range map[string]string{
		"later": `{"amount":"5.00","currency":"USD","destination":"acct_2","delay_seconds":3600}`,
		"dies":  `{"amount":"6.00","currency":"USD","destination":"acct_3","delay_seconds":0}`,
		"slow":  `{"amount":"7.00","currency":"USD","destination":"slow","delay_seconds":0}`,
	} {
		if r := s.create("alice", key, body); r.status != 202 {
			t.Fatalf("create %s: %d %s", key, r.status, r.raw)
		}
	}
	waitFor(t, 30*time.Second, "a dead job and an unresolved payout", func() bool {
		var dead, unresolved map[string][]any
		okJSON(t, env, &dead, "dead", "list", "--json")
		okJSON(t, env, &unresolved, "payouts", "unresolved", "--json")
		return len(dead["jobs"]) > 0 && len(unresolved["withdrawals"]) > 0
	})

	for _, c := range []struct {
		heading string
		args    []string
	}{
		{"### `hourglass peek --json`", []string{"peek", "withdrawals", "--json"}},
		{"### `hourglass dead list --json`", []string{"dead", "list", "--json"}},
		{"### `hourglass payouts unresolved --json`", []string{"payouts", "unresolved", "--json"}},
		{"### `hourglass preheat --json`", []string{"preheat", "tea-1", "--stock", "2", "--ends", "1h", "--price", "9.90",
			"--currency", "CNY", "--payment-window", "30s", "--json"}},
	} {
		t.Run(c.args[0], func(t *testing.T) {
			example, err := docExample(string(doc), c.heading)
			if err != nil {
				t.Fatalf("docs/operations.md: %v", err)
			}
			var want, got any
			if err := json.Unmarshal([]byte(example), &want); err != nil {
				t.Fatalf("docs/operations.md: the example under %s is not JSON: %v\n%s", c.heading, err, example)
			}
			out := ok(t, env, c.args...)
			if strings.Count(out, "\n") != 1 {
				t.Errorf("hourglass %s printed %d lines, want one JSON document on one line", strings.Join(c.args, " "),
					strings.Count(out, "\n"))
			}
			if err := json.Unmarshal([]byte(out), &got); err != nil {
				t.Fatalf("hourglass %s printed no JSON: %v\n%s", strings.Join(c.args, " "), err, out)
			}
			if diff := cmp.Diff(fieldPaths(want), fieldPaths(got)); diff != "" {
				t.Errorf("the fields of hourglass %s (-docs/operations.md +printed):\n%s\nprinted: %s",
					strings.Join(c.args, " "), diff, out)
			}
		})
	}
}

// docExample is the first ```json block after heading in doc.
func docExample(doc, heading string) (string, error) {
	i := strings.Index(doc, "\n"+heading+"\n")
	if i < 0 {
		return "", fmt.Errorf("no heading %s", heading)
	}
	rest := doc[i+len(heading)+2:]
	m := regexp.MustCompile("(?s)```json\n(.*?)\n```").FindStringSubmatchIndex(rest)
	if m == nil || strings.Contains(rest[:m[0]], "\n## ") || strings.Contains(rest[:m[0]], "\n### ") {
		return "", fmt.Errorf("no ```json example under %s", heading)
	}
	return rest[m[2]:m[3]], nil
}

// fieldPaths lists the field paths of a JSON value, sorted: "jobs[].id"
// for the field id of the objects in the array jobs. The types of values
// are left out: a null in one and a string in the other is the same field.
func fieldPaths(v any) []string {
	set := map[string]bool{}
	var walk func(prefix string, v any)
	walk = func(prefix string, v any) {
		switch v := v.(type) {
		case map[string]any:
			for k, x := range v {
				p := strings.TrimPrefix(prefix+"."+k, ".")
				set[p] = true
				walk(p, x)
			}
		case []any:
			for _, x := range v {
				walk(prefix+"[]", x)
			}
		}
	}
	walk("", v)
	out := make([]string, 0, len(set))
	for p := range set {
		out = append(out, p)
	}
	slices.Sort(out)
	return out
}

// TestFieldPathsSeeDrift: a field gone, added or renamed, at any depth,
// changes the paths.
func TestFieldPathsSeeDrift(t *testing.T) {
	doc := `{"queue":"q","jobs":[{"shard":0,"id":"x","due_at":"t"}]}`
	paths := func(s string) []string {
		var v any
		if err := json.Unmarshal([]byte(s), &v); err != nil {
			t.Fatal(err)
		}
		return fieldPaths(v)
	}
	if diff := cmp.Diff([]string{"jobs", "jobs[].due_at", "jobs[].id", "jobs[].shard", "queue"}, paths(doc)); diff != "" {
		t.Errorf("paths (-want +got):\n%s", diff)
	}
	for _, drifted := range []string{
		`{"queue":"q","jobs":[{"shard":0,"id":"x"}]}`,
		`{"queue":"q","jobs":[{"shard":0,"id":"x","due_at":"t","lag":1}]}`,
		`{"queue":"q","jobs":[{"shard":0,"job_id":"x","due_at":"t"}]}`,
		`{"name":"q","jobs":[{"shard":0,"id":"x","due_at":"t"}]}`,
		`{"queue":"q","jobs":[]}`, // nothing to compare: a test must print one
	} {
		if cmp.Equal(paths(doc), paths(drifted)) {
			t.Errorf("%s has the paths of %s", drifted, doc)
		}
	}
	if !cmp.Equal(paths(`{"price":"9.90"}`), paths(`{"price":null}`)) {
		t.Error("a null field differs from a set one")
	}
}
