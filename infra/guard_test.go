package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestCfnGuardControlTower: cfn-guard's AWS Control Tower proactive rules
// find nothing that is not suppressed with a reason, in the default stack,
// with every option set, and in the dev profile. It needs node_modules
// (npm ci; make test installs it) and fails, not skips, without it.
func TestCfnGuardControlTower(t *testing.T) {
	f, p := stacks(t), profileStacks(t)
	root, err := repoRoot()
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		tpl  map[string]any
	}{{"default", f.defMap}, {"options", f.optMap}, {"dev", p.devMap}} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), tc.name+".template.json")
			b, err := json.Marshal(tc.tpl)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(path, b, 0o644); err != nil {
				t.Fatal(err)
			}
			res, err := guardTemplate(root, path)
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("%d rule files, %d findings suppressed", res.RuleFiles, len(res.Suppressed))
		})
	}
}

// TestGuardSuppressionsHaveReasons: each accepted cfn-guard finding says
// why, at a length that can name the reason.
func TestGuardSuppressionsHaveReasons(t *testing.T) {
	f := stacks(t)
	for id, r := range f.defMap["Resources"].(map[string]any) {
		md, _ := r.(map[string]any)["Metadata"].(map[string]any)
		g, _ := md["guard"].(map[string]any)
		reasons, _ := g["SuppressionReasons"].(map[string]any)
		for _, rule := range asList(g["SuppressedRules"]) {
			reason, _ := reasons[rule.(string)].(string)
			if len(reason) < 60 || !strings.Contains(reason, " ") {
				t.Errorf("%s: suppression of %v has no real reason: %q", id, rule, reason)
			}
		}
	}
}
