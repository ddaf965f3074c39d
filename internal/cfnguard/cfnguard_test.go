package cfnguard

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
)

// guard is the binary and rules npm ci installed at the repository root.
func guard(t *testing.T) Guard {
	t.Helper()
	g, err := FromNodeModules(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// TestValidateAppliesSuppressions: the bare queue breaks CT.SQS.PR.1, the
// accepted one is suppressed with its reason, and a suppression without a
// reason is an error that names the resource and rule.
func TestValidateAppliesSuppressions(t *testing.T) {
	g := guard(t)
	res, err := g.Validate(context.Background(), filepath.Join("testdata", "queues.json"))
	if err == nil || !strings.Contains(err.Error(), "Unexplained sns_encrypted_kms") {
		t.Errorf("error %v; want one naming the suppression without a reason", err)
	}
	if res.RuleFiles < 200 {
		t.Errorf("%d rule files ran; the Control Tower set has over 200", res.RuleFiles)
	}
	var bare, accepted bool
	for _, f := range res.Findings {
		if f.Resource == "Accepted" && f.Rule == "sqs_dlq_check" {
			t.Errorf("suppressed finding reported: %s", f)
		}
		if f.Resource == "Bare" && f.Rule == "sqs_dlq_check" {
			bare = true
			if f.Control != "CT.SQS.PR.1" || f.Type != "AWS::SQS::Queue" || f.Fix == "" {
				t.Errorf("finding %+v: want control CT.SQS.PR.1, the type and the fix", f)
			}
		}
	}
	for _, f := range res.Suppressed {
		if f.Resource == "Accepted" && f.Rule == "sqs_dlq_check" && strings.Contains(f.Reason, "on purpose") {
			accepted = true
		}
	}
	if !bare || !accepted {
		t.Errorf("findings %v, suppressed %v: want Bare's sqs_dlq_check found and Accepted's suppressed", res.Findings, res.Suppressed)
	}
}

func TestFromNodeModulesSaysWhatToRun(t *testing.T) {
	_, err := FromNodeModules(t.TempDir())
	if err == nil || !strings.Contains(err.Error(), "npm ci") {
		t.Errorf("error %v; want one telling to run npm ci", err)
	}
}
