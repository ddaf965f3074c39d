package main

import (
	"strings"
	"testing"
)

// TestCdkNagAwsSolutions: cdk-nag's AwsSolutions pack finds nothing it was
// not told about, with every optional setting off and on.
func TestCdkNagAwsSolutions(t *testing.T) {
	f := stacks(t)
	for _, e := range f.nagErrors {
		t.Errorf("cdk-nag: %s", *e)
	}
	for _, w := range f.nagWarnings {
		t.Logf("cdk-nag warning: %s", *w)
	}
}

// TestNagSuppressionsHaveReasons: each accepted finding says why, at a
// length that can name the reason (cdk-nag itself only wants 10 characters).
func TestNagSuppressionsHaveReasons(t *testing.T) {
	f := stacks(t)
	n := 0
	for id, r := range f.defMap["Resources"].(map[string]any) {
		md, _ := r.(map[string]any)["Metadata"].(map[string]any)
		nag, _ := md["cdk_nag"].(map[string]any)
		for _, s := range asList(nag["rules_to_suppress"]) {
			sup := s.(map[string]any)
			n++
			reason, _ := sup["reason"].(string)
			if len(reason) < 60 || !strings.Contains(reason, " ") {
				t.Errorf("%s: suppression of %v has no real reason: %q", id, sup["id"], reason)
			}
		}
	}
	// The five function roles (VPC network interfaces) and their default
	// policies (X-Ray), the HTTP API's two public routes (health, item
	// state), the webhooks' REST API methods (the payout and payment
	// providers' signed callbacks: no authorizer, no Cognito) and its
	// CloudWatch role (AWS's managed policy for API Gateway's logs); the
	// rotation of each function's Redis password and AEC6 (an AUTH token
	// rule, where the replication group has RBAC users); the CodeDeploy
	// roles of the three canaried functions (AWS's managed policy for Lambda
	// deployments); the deployment-time lookup of DynamoDB's prefix list
	// (its policy's EC2 Describe on "*", its function's basic execution role).
	if want := len(functionNames) + len(functionNames) + 2 + 2*len(webhookRoutes) + 1 +
		len(functionNames) + 1 + len(canaried) + 2; n != want {
		t.Errorf("%d suppressions, want %d: a new one needs a reason here too", n, want)
	}
}
