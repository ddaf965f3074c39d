package walkthrough

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// A withdrawal's create as curl -si prints it, CRLF headers and all.
const created = "HTTP/1.1 202 Accepted\r\nCache-Control: no-store\r\nContent-Type: application/json\r\n" +
	"Etag: \"wd_01KBQ3M1T6Y2W9X4F0R8S5V7ZB.0\"\r\nLocation: /v1/withdrawals/wd_01KBQ3M1T6Y2W9X4F0R8S5V7ZB\r\n\r\n" +
	`{"id":"wd_01KBQ3M1T6Y2W9X4F0R8S5V7ZB","status":"scheduled","amount":"125.50","currency":"CNY",` +
	`"destination":"bank_6222","due_at":"2026-12-03T14:00:05.001Z","created_at":"2026-12-03T14:00:00.001Z",` +
	`"updated_at":"2026-12-03T14:00:00.001Z","attempts":0,"last_error":null,"payout_id":null}`

// The page's example of it: other ids and times, a wrapped body.
var createdDoc = []string{
	"HTTP/1.1 202 Accepted",
	"Location: /v1/withdrawals/wd_01M8KDW821ABJZ4X6AFGJZ0VSY",
	"",
	`{"id":"wd_01M8KDW821ABJZ4X6AFGJZ0VSY","status":"scheduled","amount":"125.50","currency":"CNY",`,
	` "destination":"bank_6222","due_at":"2026-11-29T10:33:46.185Z","created_at":"2026-11-29T10:33:41.185Z",`,
	` "updated_at":"2026-11-29T10:33:41.185Z","attempts":0,"last_error":null,"payout_id":null}`,
}

func TestMatchAcceptsWhatThePageShows(t *testing.T) {
	for _, tc := range []struct {
		name string
		want []string
		got  string
	}{
		{"ids and times are examples; headers between are skipped", createdDoc, created},
		{"… stands for the rest of a line", []string{`{"id":"wd_…","status":"scheduled",…}`}, created},
		{"… in the middle, and a cut id", []string{`Etag: "wd_01M8…`, `{"id":"wd_01M8SDHKSCBTZHNGQAJR32H16B",…,"due_at":"2026-12-01T19:23:19.340Z",…}`}, created},
		{"a line of … stands for any lines", []string{"HTTP/1.1 202 Accepted", "…", `{…}`}, created},
		{"nothing expected", nil, "anything"},
		{"RFC 3339 without fractions", []string{"due 2030-01-01T00:00:00Z"}, "due 2026-12-03T14:00:05Z"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := Match(tc.want, tc.got); err != nil {
				t.Error(err)
			}
		})
	}
}

// TestMatchFailsOnDrift: each change the docs must not miss makes the match
// fail, naming the line.
func TestMatchFailsOnDrift(t *testing.T) {
	for _, tc := range []struct {
		name string
		got  string
		line string // the expected line the error names
	}{
		{"another status code", strings.Replace(created, "202 Accepted", "200 OK", 1), "HTTP/1.1 202 Accepted"},
		{"a field gone", strings.Replace(created, `"attempts":0,`, "", 1), `{"id":"wd_01M8KDW821ABJZ4X6AFGJZ0VSY"`},
		{"a field added", strings.Replace(created, `"payout_id":null`, `"payout_id":null,"fee":"1.00"`, 1), `{"id":"wd_01M8KDW821ABJZ4X6AFGJZ0VSY"`},
		{"another value", strings.Replace(created, `"scheduled"`, `"processing"`, 1), `{"id":"wd_01M8KDW821ABJZ4X6AFGJZ0VSY"`},
		{"a header gone", strings.Replace(created, "Location:", "X-Location:", 1), "Location: /v1/withdrawals/"},
		{"lines out of order", "{}\r\n" + strings.Replace(created, "HTTP/1.1 202 Accepted\r\n", "", 1) + "\nHTTP/1.1 202 Accepted",
			"Location: /v1/withdrawals/"},
		{"an id of another kind", strings.ReplaceAll(created, "wd_01KBQ", "pu_01KBQ"), "Location: /v1/withdrawals/"},
		{"not a time", strings.Replace(created, `"due_at":"2026-12-03T14:00:05.001Z"`, `"due_at":"soon"`, 1), `{"id":"wd_01M8KDW821ABJZ4X6AFGJZ0VSY"`},
		{"no output", "", "HTTP/1.1 202 Accepted"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := Match(createdDoc, tc.got)
			if err == nil {
				t.Fatalf("matched drifted output:\n%s", tc.got)
			}
			if !strings.Contains(err.Error(), tc.line) {
				t.Errorf("error %q does not name the line %q", err, tc.line)
			}
		})
	}
	// A partial line is no match: the page shows whole lines.
	if err := Match([]string{"HTTP/1.1 202"}, created); err == nil {
		t.Error("a line's start matched the whole line")
	}
}

func TestLines(t *testing.T) {
	got := Lines([]string{"a", "  b", "", "c", "\td", "e  "})
	if diff := cmp.Diff([]string{"ab", "cd", "e"}, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

func TestParse(t *testing.T) {
	page := strings.Join([]string{
		"# Page",
		"## Quick start",
		"```sh", "make run", "```",
		"## Walkthrough: one",
		"Text.",
		"```sh", "A=1", "echo $A", "```",
		"",
		"```", "1", "```",
		"More text.",
		"```sh", "echo two", "```",
		"Prose between: not its output.",
		"```", "not shown as output", "```",
		"```log", "a log line", "```",
		"```json", `{"not":"run"}`, "```",
		"```log", "another", "```",
		"## Walkthrough: two",
		"```sh", "true", "```",
		"```json", `{"a":1}`, "```",
		"## The docs",
		"```sh", "ignored", "```",
	}, "\n")
	want := []Walkthrough{
		{Title: "one", Line: 6, Blocks: []Block{
			{Line: 8, Script: "A=1\necho $A\n", Want: []string{"1"}},
			{Line: 17, Script: "echo two\n", Log: []string{"a log line", "another"}},
		}},
		{Title: "two", Line: 33, Blocks: []Block{{Line: 34, Script: "true\n", Want: []string{`{"a":1}`}}}},
	}
	if diff := cmp.Diff(want, Parse(page)); diff != "" {
		t.Errorf("Parse (-want +got):\n%s", diff)
	}
}
