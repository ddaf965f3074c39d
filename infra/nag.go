package main

import (
	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/constructs-go/constructs/v10"
	"github.com/aws/jsii-runtime-go"
	"github.com/cdklabs/cdk-nag-go/cdknag/v2"
)

// ApplyNag checks every construct under scope against cdk-nag's AwsSolutions
// pack at synthesis: an unsuppressed finding is an error annotation (and
// fails `cdk deploy`); the report lands in the output directory as
// AwsSolutions-<stack>-NagReport.csv.
func ApplyNag(scope constructs.IConstruct) {
	awscdk.Aspects_Of(scope).Add(cdknag.NewAwsSolutionsChecks(&cdknag.NagPackProps{Verbose: jsii.Bool(true)}), nil)
}

// suppress accepts one cdk-nag finding on c's own resource (not its
// children: a role's attached policy is checked on its own), with the reason
// it is acceptable; appliesTo narrows it to the named findings (e.g.
// "Resource::*").
func suppress(c constructs.IConstruct, rule, reason string, appliesTo ...string) {
	sup := &cdknag.NagPackSuppression{Id: jsii.String(rule), Reason: jsii.String(reason)}
	if len(appliesTo) > 0 {
		at := make([]any, len(appliesTo))
		for i, a := range appliesTo {
			at[i] = a
		}
		sup.AppliesTo = &at
	}
	cdknag.NagSuppressions_AddResourceSuppressions(c, &[]*cdknag.NagPackSuppression{sup}, jsii.Bool(false))
}
