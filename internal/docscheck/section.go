package docscheck

import (
	"os"
	"strings"
	"testing"
)

// Section holds the part of the doc at path between the markers
// "<!-- name:begin -->" and "<!-- name:end -->" to body, text a test
// renders from the code (a transition table) so that the doc cannot drift
// from it. With update it rewrites that part instead; without, a
// difference fails t with the command that rewrites it (rerun, the test's
// package, with -update-docs).
func Section(t testing.TB, path, name, body string, update bool) {
	t.Helper()
	begin, end := "<!-- "+name+":begin -->\n", "<!-- "+name+":end -->"
	doc, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	s := string(doc)
	i, j := strings.Index(s, begin), strings.Index(s, end)
	if i < 0 || j < i {
		t.Fatalf("%s has no %q ... %q section", path, begin, end)
	}
	if s[i+len(begin):j] == body {
		return
	}
	if !update {
		t.Fatalf("the %s section of %s is not what the code does: rerun %s with -update-docs", name, path, t.Name())
	}
	if err := os.WriteFile(path, []byte(s[:i+len(begin)]+body+s[j:]), 0o644); err != nil {
		t.Fatal(err)
	}
}
