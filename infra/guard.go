package main

import (
	"context"
	"fmt"
	"strings"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/constructs-go/constructs/v10"
	"github.com/aws/jsii-runtime-go"
	"github.com/hourglass/hourglass/internal/cfnguard"
)

// suppressGuard accepts one cfn-guard finding (rule is cfn-guard's rule
// name, e.g. "sqs_dlq_check", as the finding names it) on c's own
// resource, with the reason it is acceptable: Metadata guard
// SuppressedRules, and the reason beside it (package cfnguard).
func suppressGuard(c constructs.IConstruct, rule, reason string) {
	res, ok := c.(awscdk.CfnResource)
	if !ok {
		res, ok = c.Node().DefaultChild().(awscdk.CfnResource)
	}
	if !ok {
		panic(fmt.Sprintf("suppressGuard %s: %s has no CloudFormation resource", rule, *c.Node().Path()))
	}
	md, _ := res.GetMetadata(jsii.String("guard")).(map[string]any)
	if md == nil {
		md = map[string]any{}
	}
	rules, _ := md["SuppressedRules"].([]any)
	reasons, _ := md["SuppressionReasons"].(map[string]any)
	if reasons == nil {
		reasons = map[string]any{}
	}
	md["SuppressedRules"] = append(rules, rule)
	reasons[rule] = reason
	md["SuppressionReasons"] = reasons
	res.AddMetadata(jsii.String("guard"), md)
}

// guardTemplate runs cfn-guard's Control Tower rules over a synthesized
// template and returns an error listing every finding not suppressed.
func guardTemplate(root, template string) (cfnguard.Result, error) {
	g, err := cfnguard.FromNodeModules(root)
	if err != nil {
		return cfnguard.Result{}, err
	}
	res, err := g.Validate(context.Background(), template)
	if err != nil {
		return res, err
	}
	if len(res.Findings) > 0 {
		var b strings.Builder
		fmt.Fprintf(&b, "cfn-guard: %d findings in %s (fix each, or suppressGuard(resource, rule, reason) next to it):", len(res.Findings), template)
		for _, f := range res.Findings {
			fmt.Fprintf(&b, "\n  %s", f)
		}
		return res, fmt.Errorf("%s", b.String())
	}
	return res, nil
}

// suppressGuardAll accepts rule on every resource of type cfnType under
// scope (resources the CDK makes inside a construct, e.g. the Lambda
// permissions of a route's integration), with one reason.
func suppressGuardAll(scope constructs.IConstruct, cfnType, rule, reason string) {
	n := 0
	for _, c := range *scope.Node().FindAll(constructs.ConstructOrder_PREORDER) {
		if res, ok := c.(awscdk.CfnResource); ok && *res.CfnResourceType() == cfnType {
			suppressGuard(res, rule, reason)
			n++
		}
	}
	if n == 0 {
		panic(fmt.Sprintf("suppressGuardAll %s: no %s under %s", rule, cfnType, *scope.Node().Path()))
	}
}

// Log groups: what the Control Tower rules ask of each, and why ours
// differ. Retention is chosen per group, next to it.
const (
	guardLogRetention = "cloudwatch_log_group_retention_period_check" // CT.CLOUDWATCH.PR.2: a year
	guardLogKMS       = "cloudwatch_log_group_encrypted_check"        // CT.CLOUDWATCH.PR.3
	guardLogKMSReason = "CloudWatch Logs encrypts every log group at rest with keys it manages; a customer-managed " +
		"key would add a key policy for the logs service and KMS calls to protect logs that hold no secrets, tokens, " +
		"card or bank data (STYLE.md, logs), so IAM on the log group governs who reads them."
)

// suppressLogGroupGuard accepts both log group rules on lg: the key with
// the shared reason, the retention with the reason its caller gives.
func suppressLogGroupGuard(lg constructs.IConstruct, retentionReason string) {
	suppressGuard(lg, guardLogKMS, guardLogKMSReason)
	if retentionReason != "" {
		suppressGuard(lg, guardLogRetention, retentionReason)
	}
}
