package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/aws/aws-cdk-go/awscdk/v2/awskms"
)

// TestCfnGuardControlTower: cfn-guard's AWS Control Tower proactive rules
// find nothing that is not suppressed with a reason, in the default stack,
// with every option set, and in the dev and serverless profiles. It needs node_modules
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
	}{{"default", f.defMap}, {"options", f.optMap}, {"dev", p.devMap}, {"serverless", p.slsMap}, {profileServerless6, p.sls6Map}} {
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

// TestGuardFixes: what the Control Tower rules asked for, where fixing was
// right, is in the template.
func TestGuardFixes(t *testing.T) {
	f := stacks(t)
	// CT.KMS.PR.3: only AWS services create grants on either key.
	want := `{"Action":"kms:CreateGrant","Condition":{"BoolIfExists":{"aws:PrincipalIsAWSService":"false",` +
		`"kms:GrantIsForAWSResource":"false"}},"Effect":"Deny","Principal":{"AWS":"*"},"Resource":"*","Sid":"DenyGrantsButForAWSServices"}`
	for _, key := range []awskms.Key{f.def.DataKey, f.def.AlarmKey} {
		id := logicalID(f.def, key)
		policy, _ := propsOf(resources(f.defMap, "AWS::KMS::Key")[id])["KeyPolicy"].(map[string]any)
		found := false
		for _, st := range asList(policy["Statement"]) {
			found = found || mustJSON(st) == want
		}
		if !found {
			t.Errorf("%s: no statement %s in %s", id, want, mustJSON(policy))
		}
	}
	// CT.EC2.PR.11: no subnet hands out public addresses.
	for id, r := range resources(f.defMap, "AWS::EC2::Subnet") {
		if v := propsOf(r)["MapPublicIpOnLaunch"]; v != nil && v != false {
			t.Errorf("%s: MapPublicIpOnLaunch %v", id, v)
		}
	}
	// CT.SQS.PR.1: the dead-letter queue says it is one.
	dlq := resources(f.defMap, "AWS::SQS::Queue")[logicalID(f.def, f.def.DeadLetterQueue)]
	if got := mustJSON(propsOf(dlq)["RedriveAllowPolicy"]); got != `{"redrivePermission":"allowAll"}` {
		t.Errorf("dead-letter queue RedriveAllowPolicy %s", got)
	}
	// CT.CLOUDWATCH.PR.2: the API's access log, its audit trail, is kept a year.
	hasProps(t, f.defTpl, "AWS::Logs::LogGroup", props{"RetentionInDays": 365})
}

// TestGuardFailureNamesRuleAndResource: a finding fails with the rule,
// the control, the resource and what to do.
func TestGuardFailureNamesRuleAndResource(t *testing.T) {
	root, err := repoRoot()
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "bare.template.json")
	tpl := `{"Resources": {"BareQueue": {"Type": "AWS::SQS::Queue", "Properties": {"SqsManagedSseEnabled": true}}}}`
	if err := os.WriteFile(path, []byte(tpl), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = guardTemplate(root, path)
	for _, want := range []string{"1 findings", "sqs_dlq_check (CT.SQS.PR.1) on AWS::SQS::Queue BareQueue", "suppressGuard(resource, rule, reason)"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error %v; want it to say %q", err, want)
		}
	}
}
