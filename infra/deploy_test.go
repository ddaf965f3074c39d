package main

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/constructs-go/constructs/v10"
)

// TestCanaryDeployments: the API functions and the consumer serve through
// a live alias on a published version, which a CodeDeploy deployment group
// shifts by canary and rolls back on the function's alarms; the API and the
// work queue invoke the alias, never $LATEST.
func TestCanaryDeployments(t *testing.T) {
	f := stacks(t)
	for _, st := range []struct {
		stack *HourglassStack
		tpl   map[string]any
	}{{f.def, f.defMap}, {f.opt, f.optMap}, {f.acct, f.acctMap}} {
		name := *st.stack.Stack.StackName()
		aliases := resources(st.tpl, "AWS::Lambda::Alias")
		versions := resources(st.tpl, "AWS::Lambda::Version")
		groups := resources(st.tpl, "AWS::CodeDeploy::DeploymentGroup")
		if len(aliases) != len(canaried) || len(groups) != len(canaried) {
			t.Errorf("%s: %d aliases, %d deployment groups; want %d each", name, len(aliases), len(groups), len(canaried))
		}
		for fn, alarmIDs := range canaried {
			alias := logicalID(st.stack, st.stack.Aliases[fn])
			a := aliases[alias]
			if a == nil {
				t.Fatalf("%s: %s has no alias", name, fn)
			}
			p := propsOf(a)
			ids, _ := named(p["FunctionVersion"])
			if p["Name"] != liveAlias || len(ids) != 1 || versions[ids[0]] == nil {
				t.Errorf("%s: %s's alias %v on %v, want %q on a published version", name, fn, p["Name"], p["FunctionVersion"], liveAlias)
			} else if fnIDs, _ := named(propsOf(versions[ids[0]])["FunctionName"]); !slices.Equal(fnIDs, []string{logicalID(st.stack, st.stack.Functions[fn])}) {
				t.Errorf("%s: %s's alias is on a version of %v", name, fn, fnIDs)
			}
			// CloudFormation hands the alias's update to CodeDeploy.
			up, _ := a["UpdatePolicy"].(map[string]any)["CodeDeployLambdaAliasUpdate"].(map[string]any)
			groupIDs, _ := named(up["DeploymentGroupName"])
			if len(groupIDs) != 1 || groups[groupIDs[0]] == nil {
				t.Fatalf("%s: %s's alias is not updated by a deployment group: %v", name, fn, a["UpdatePolicy"])
			}
			g := propsOf(groups[groupIDs[0]])
			if g["DeploymentConfigName"] != "CodeDeployDefault.LambdaCanary10Percent5Minutes" {
				t.Errorf("%s: %s deploys by %v", name, fn, g["DeploymentConfigName"])
			}
			rollback, _ := g["AutoRollbackConfiguration"].(map[string]any)
			events := asList(rollback["Events"])
			for _, e := range []string{"DEPLOYMENT_FAILURE", "DEPLOYMENT_STOP_ON_REQUEST", "DEPLOYMENT_STOP_ON_ALARM"} {
				if rollback["Enabled"] != true || !slices.Contains(events, any(e)) {
					t.Errorf("%s: %s does not roll back on %s: %v", name, fn, e, rollback)
				}
			}
			ac, _ := g["AlarmConfiguration"].(map[string]any)
			var got []string
			for _, al := range asList(ac["Alarms"]) {
				ids, _ := named(al.(map[string]any)["Name"])
				got = append(got, ids...)
			}
			var want []string
			for _, id := range alarmIDs {
				want = append(want, logicalID(st.stack, st.stack.alarmByID[id]))
			}
			slices.Sort(got)
			slices.Sort(want)
			if ac["Enabled"] != true || !slices.Equal(got, want) {
				t.Errorf("%s: %s rolls back on alarms %v, want %v (%v)", name, fn, got, want, alarmIDs)
			}
		}
		// What invokes them invokes the alias; the operator function, not
		// canaried, is invoked as itself.
		for id, in := range resources(st.tpl, "AWS::ApiGatewayV2::Integration") {
			ids, _ := named(propsOf(in)["IntegrationUri"])
			if slices.Equal(ids, []string{logicalID(st.stack, st.stack.Functions[fnOperator])}) {
				continue
			}
			if len(ids) != 1 || aliases[ids[0]] == nil {
				t.Errorf("%s: integration %s invokes %v, not a live alias", name, id, propsOf(in)["IntegrationUri"])
			}
		}
		for id, m := range resources(st.tpl, "AWS::Lambda::EventSourceMapping") {
			ids, _ := named(propsOf(m)["FunctionName"])
			if !slices.Equal(slices.Compact(ids), []string{logicalID(st.stack, st.stack.Aliases[fnConsumer])}) {
				t.Errorf("%s: event source %s invokes %v, want the consumer's live alias", name, id, propsOf(m)["FunctionName"])
			}
		}
		if _, ok := st.stack.Aliases[fnPoller]; ok {
			t.Errorf("%s: the poller has an alias; its schedule invokes $LATEST", name)
		}
		if _, ok := st.stack.Aliases[fnOperator]; ok {
			t.Errorf("%s: the operator function has an alias; it is not canaried", name)
		}
	}
}

// TestTeardownListsWhatIsRetained: docs/deploy.md's teardown section
// names every kind of resource `cdk destroy` leaves behind, and each
// retained queue by its id.
func TestTeardownListsWhatIsRetained(t *testing.T) {
	f := stacks(t)
	doc, err := os.ReadFile(filepath.Join("..", "docs", "deploy.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, teardown, ok := strings.Cut(string(doc), "## Teardown and what is retained")
	if !ok {
		t.Fatal("docs/deploy.md has no teardown section")
	}
	teardown, _, _ = strings.Cut(teardown, "\n## ")
	says := map[string]string{
		"AWS::DynamoDB::Table": "DynamoDB tables",
		"AWS::KMS::Key":        "KMS keys",
		"AWS::Logs::LogGroup":  "log groups",
		"AWS::Lambda::Version": "published versions",
		// API Gateway's account-wide logging role (webhooks.go).
		"AWS::ApiGateway::Account": "AWS::ApiGateway::Account",
		"AWS::IAM::Role":           "CloudWatch role",
	}
	for _, st := range []*HourglassStack{f.def, f.opt} {
		for _, c := range *st.Stack.Node().FindAll(constructs.ConstructOrder_PREORDER) {
			res, ok := c.(awscdk.CfnResource)
			if !ok {
				continue
			}
			lid := *st.Stack.GetLogicalId(res)
			tpl := f.defMap
			if st == f.opt {
				tpl = f.optMap
			}
			entry, _ := tpl["Resources"].(map[string]any)[lid].(map[string]any)
			if entry == nil || entry["DeletionPolicy"] != "Retain" {
				continue
			}
			typ := *res.CfnResourceType()
			if typ == "AWS::SQS::Queue" {
				id := *c.Node().Scope().Node().Id()
				if !strings.Contains(teardown, "`"+id+"`") {
					t.Errorf("the teardown section does not name the retained queue `%s`", id)
				}
				continue
			}
			if phrase, ok := says[typ]; !ok || !strings.Contains(teardown, phrase) {
				t.Errorf("%s %s is retained; the teardown section does not say so (%q)", typ, lid, phrase)
			}
		}
	}
}
