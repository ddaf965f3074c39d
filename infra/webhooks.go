package main

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"strings"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsapigateway"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsiam"
	"github.com/aws/aws-cdk-go/awscdk/v2/awslogs"
	"github.com/aws/aws-cdk-go/awscdk/v2/awswafv2"
	"github.com/aws/jsii-runtime-go"
)

// The providers' webhooks have an edge of their own: a regional REST API
// (an HTTP API takes neither WAF nor a resource policy) with its own
// throttling, behind a WAF web ACL that limits each source address and,
// given webhookSourceCidrs, admits the providers' addresses only (not in
// the serverless profile, which saves WAF's fixed cost). On the
// HTTP API, one address posting junk took the budget the provider's
// callbacks shared with it, and a late payment confirmation turns a flash
// sale's order into expired plus refund_required.

// webhooksStage is the REST API's one stage: the webhooks' URL is
// https://<api>.execute-api.<region>.amazonaws.com/webhooks/v1/webhooks/….
const webhooksStage = "webhooks"

// webhookSourceLimit is how many requests one source address may make in
// webhookSourceWindowSec before WAF blocks it (403) until its rate falls:
// 25/s on average, a quarter of one route's budget, so one address cannot
// take a route's budget alone (with the allowlist, only the providers' own
// addresses count). The function limits each address again
// (HOURGLASS_RATE_WEBHOOK_SOURCE, 50/s).
const (
	webhookSourceLimit     = 1500
	webhookSourceWindowSec = 60
)

// webhookRoute is a provider's route and its own budget.
type webhookRoute struct {
	path     string
	throttle throttle
	// required are the body's fields API Gateway checks are there (the
	// function then parses it exactly).
	required []string
	// why it needs no authorization (cdk-nag AwsSolutions-APIG4, COG4).
	why string
}

// webhookRoutes are served by the enqueue function behind the REST API,
// and by nothing else: the HTTP API has no route to them.
var webhookRoutes = []webhookRoute{
	{"/v1/webhooks/payouts", throttle{rate: 100, burst: 200}, []string{"event_id", "withdrawal_id", "status"},
		"the payout provider's callbacks, which carry no user identity: each is authenticated by its " +
			"X-Hourglass-Signature (HMAC-SHA256 with PAYOUT_WEBHOOK_SECRET, within 5 minutes)"},
	{"/v1/webhooks/payments", throttle{rate: 100, burst: 200}, []string{"event_id", "order_id", "status", "amount", "currency"},
		"the payment provider's confirmations of flash-sale orders, which carry no user identity: each is authenticated by its " +
			"X-Hourglass-Signature (HMAC-SHA256 with PAYMENTS_WEBHOOK_SECRET, within 5 minutes)"},
}

// signatureHeader is what every provider's request carries: API Gateway
// refuses one without it (400) before it costs an invocation.
const signatureHeader = "X-Hourglass-Signature"

// webhooksAccessLogFormat is one JSON line per request, as the HTTP API's,
// with what WAF decided.
var webhooksAccessLogFormat = map[string]string{
	"requestId":        "$context.requestId",
	"ip":               "$context.identity.sourceIp",
	"requestTime":      "$context.requestTime",
	"routeKey":         "$context.httpMethod $context.resourcePath",
	"status":           "$context.status",
	"protocol":         "$context.protocol",
	"responseLength":   "$context.responseLength",
	"latencyMs":        "$context.responseLatency",
	"integrationMs":    "$context.integrationLatency",
	"integrationError": "$context.integration.error",
	"errorMessage":     "$context.error.message",
	"wafStatus":        "$context.waf.status",
	"userAgent":        "$context.identity.userAgent",
}

// sourcePolicy is the REST API's resource policy with cidrs given: anyone
// may invoke it from inside them, nobody from outside.
func sourcePolicy(cidrs []string) awsiam.PolicyDocument {
	invoke := jsii.Strings("execute-api:Invoke")
	everything := jsii.Strings("execute-api:/*")
	anyone := &[]awsiam.IPrincipal{awsiam.NewAnyPrincipal()}
	return awsiam.NewPolicyDocument(&awsiam.PolicyDocumentProps{Statements: &[]awsiam.PolicyStatement{
		awsiam.NewPolicyStatement(&awsiam.PolicyStatementProps{
			Sid: jsii.String("ProvidersInvoke"), Effect: awsiam.Effect_ALLOW,
			Principals: anyone, Actions: invoke, Resources: everything,
		}),
		awsiam.NewPolicyStatement(&awsiam.PolicyStatementProps{
			Sid: jsii.String("NobodyElse"), Effect: awsiam.Effect_DENY,
			Principals: anyone, Actions: invoke, Resources: everything,
			Conditions: &map[string]any{"NotIpAddress": map[string]any{"aws:SourceIp": cidrs}},
		}),
	}})
}

func (s *HourglassStack) createWebhooks() {
	cidrs := s.settings.WebhookSourceCIDRs
	accessLogs := awslogs.NewLogGroup(s.Stack, jsii.String("WebhooksAccessLogs"), &awslogs.LogGroupProps{
		Retention:     awslogs.RetentionDays_ONE_YEAR,
		RemovalPolicy: awscdk.RemovalPolicy_RETAIN,
	})
	suppressLogGroupGuard(accessLogs, "")
	format, _ := json.Marshal(webhooksAccessLogFormat) // a map of strings always marshals
	methodOptions := map[string]*awsapigateway.MethodDeploymentOptions{}
	for _, r := range webhookRoutes {
		// A method's settings replace the stage's: the logging again.
		methodOptions[r.path+"/POST"] = &awsapigateway.MethodDeploymentOptions{
			ThrottlingRateLimit: jsii.Number(r.throttle.rate), ThrottlingBurstLimit: jsii.Number(r.throttle.burst),
			LoggingLevel: awsapigateway.MethodLoggingLevel_ERROR, DataTraceEnabled: jsii.Bool(false), MetricsEnabled: jsii.Bool(true),
		}
	}
	props := &awsapigateway.RestApiProps{
		RestApiName:    jsii.String(*s.Stack.StackName() + "-webhooks"),
		Description:    jsii.String("Hourglass: the payment and payout providers' webhooks" + behindWAF(s.settings.Profile)),
		EndpointTypes:  &[]awsapigateway.EndpointType{awsapigateway.EndpointType_REGIONAL},
		CloudWatchRole: jsii.Bool(true),
		DeployOptions: &awsapigateway.StageOptions{
			StageName:            jsii.String(webhooksStage),
			AccessLogDestination: awsapigateway.NewLogGroupLogDestination(accessLogs),
			AccessLogFormat:      awsapigateway.AccessLogFormat_Custom(jsii.String(string(format))),
			// Errors only: INFO would log each request again, and data
			// tracing would log the providers' signed bodies.
			LoggingLevel:     awsapigateway.MethodLoggingLevel_ERROR,
			DataTraceEnabled: jsii.Bool(false),
			MetricsEnabled:   jsii.Bool(true),
			// Traced like the functions behind it (CT.APIGATEWAY.PR.2).
			TracingEnabled: jsii.Bool(true),
			// What a route does not name: nothing here is meant to be
			// reached, so a trickle.
			ThrottlingRateLimit:  jsii.Number(10),
			ThrottlingBurstLimit: jsii.Number(20),
			MethodOptions:        &methodOptions,
		},
	}
	if len(cidrs) > 0 {
		props.Policy = sourcePolicy(cidrs)
	}
	api := awsapigateway.NewRestApi(s.Stack, jsii.String("Webhooks"), props)
	s.Webhooks = api
	if len(cidrs) > 0 {
		// A REST API applies a changed resource policy only when it is
		// deployed again.
		api.LatestDeployment().AddToLogicalId(strings.Join(cidrs, ","))
	}
	suppress(api.Node().FindChild(jsii.String("CloudWatchRole")), "AwsSolutions-IAM4",
		"AmazonAPIGatewayPushToCloudWatchLogs is the policy AWS documents for the account-wide role through which API Gateway "+
			"writes a REST API's access and execution logs; it grants log writes only.",
		"Policy::arn:<AWS::Partition>:iam::aws:policy/service-role/AmazonAPIGatewayPushToCloudWatchLogs")

	// The serverless profile runs no WAF (its $5 a month and $1 a rule):
	// the signatures, the stage's throttling and the function's own limit
	// per source remain.
	limiter, front := "WAF and the function", "WAF and its own stage throttling stand"
	if !s.settings.Profile.WebhooksFirewall {
		limiter, front = "the function", "its own stage throttling stands"
		suppress(api.DeploymentStage(), "AwsSolutions-APIG3",
			"The "+s.settings.Profile.Name+" profile runs no WAF web ACL, to cost less (profile.go, docs/deploy.md): every "+
				"request must carry a valid HMAC signature, the stage throttles each route, and the function limits each "+
				"source address (HOURGLASS_RATE_WEBHOOK_SOURCE); prod and dev put WAF in front.")
	}
	integration := awsapigateway.NewLambdaIntegration(s.invoked(fnEnqueue), &awsapigateway.LambdaIntegrationOptions{
		Proxy: jsii.Bool(true),
		// The console's test button is not a provider.
		AllowTestInvoke: jsii.Bool(false),
	})
	// API Gateway refuses (400), before an invocation, a request without
	// the signature header or whose body is no JSON object with the
	// route's fields.
	validator := api.AddRequestValidator(jsii.String("SignedEvents"), &awsapigateway.RequestValidatorOptions{
		ValidateRequestParameters: jsii.Bool(true),
		ValidateRequestBody:       jsii.Bool(true),
	})
	for _, r := range webhookRoutes {
		model := api.AddModel(jsii.String(fnID(strings.TrimPrefix(r.path, "/v1/webhooks/"))+"Event"), &awsapigateway.ModelOptions{
			ContentType: jsii.String("application/json"),
			Schema: &awsapigateway.JsonSchema{
				Schema:   awsapigateway.JsonSchemaVersion_DRAFT4,
				Type:     awsapigateway.JsonSchemaType_OBJECT,
				Required: jsii.Strings(r.required...),
			},
		})
		m := api.Root().ResourceForPath(jsii.String(r.path)).AddMethod(jsii.String("POST"), integration, &awsapigateway.MethodOptions{
			AuthorizationType: awsapigateway.AuthorizationType_NONE,
			RequestParameters: &map[string]*bool{"method.request.header." + signatureHeader: jsii.Bool(true)},
			RequestValidator:  validator,
			RequestModels:     &map[string]awsapigateway.IModel{"application/json": model},
			OperationName:     jsii.String(strings.TrimPrefix(r.path, "/v1/")),
		})
		why := "Public by design (SPEC.md): POST " + r.path + " is " + r.why + " and rate-limited per source by " + limiter +
			"; " + front + " in front."
		suppress(m, "AwsSolutions-APIG4", why)
		suppress(m, "AwsSolutions-COG4", why)
		suppressGuardAll(m, "AWS::Lambda::Permission", "lambda_function_public_access_prohibited_check",
			"The permission admits API Gateway for this REST API's method only: its SourceArn is the method's execute-api "+
				"ARN, an Fn::Join of this account, region and API id, which the rule cannot read as a string or a Ref.")
	}
	if s.settings.Profile.WebhooksFirewall {
		s.createWebhooksFirewall(api, cidrs)
	}
}

// createWebhooksFirewall puts the REST API's stage behind a WAF web ACL:
// a rate rule per source address, then, given cidrs, an allowlist with
// everything else blocked.
func (s *HourglassStack) createWebhooksFirewall(api awsapigateway.RestApi, cidrs []string) {
	// WAF's names run to 128 characters: \w and hyphens, as stack names.
	name := *s.Stack.StackName()
	name = name[:min(len(name), 128-len("-webhooks"))] + "-webhooks"
	visibility := func(metric string) *awswafv2.CfnWebACL_VisibilityConfigProperty {
		return &awswafv2.CfnWebACL_VisibilityConfigProperty{
			CloudWatchMetricsEnabled: jsii.Bool(true), MetricName: jsii.String(metric), SampledRequestsEnabled: jsii.Bool(true),
		}
	}
	rules := []any{&awswafv2.CfnWebACL_RuleProperty{
		Name:     jsii.String("RatePerSource"),
		Priority: jsii.Number(0),
		Action:   &awswafv2.CfnWebACL_RuleActionProperty{Block: &awswafv2.CfnWebACL_BlockActionProperty{}},
		Statement: &awswafv2.CfnWebACL_StatementProperty{RateBasedStatement: &awswafv2.CfnWebACL_RateBasedStatementProperty{
			AggregateKeyType:    jsii.String("IP"),
			Limit:               jsii.Number(webhookSourceLimit),
			EvaluationWindowSec: jsii.Number(webhookSourceWindowSec),
		}},
		VisibilityConfig: visibility("RatePerSource"),
	}}
	defaultAction := &awswafv2.CfnWebACL_DefaultActionProperty{Allow: &awswafv2.CfnWebACL_AllowActionProperty{}}
	if len(cidrs) > 0 {
		var refs []*awswafv2.CfnWebACL_StatementProperty
		for _, family := range []struct{ version, id string }{{"IPV4", "WebhookSourcesV4"}, {"IPV6", "WebhookSourcesV6"}} {
			var list []string
			for _, c := range cidrs {
				if (family.version == "IPV4") == netip.MustParsePrefix(c).Addr().Is4() {
					list = append(list, c)
				}
			}
			if len(list) == 0 {
				continue
			}
			set := awswafv2.NewCfnIPSet(s.Stack, jsii.String(family.id), &awswafv2.CfnIPSetProps{
				Scope:            jsii.String("REGIONAL"),
				IpAddressVersion: jsii.String(family.version),
				Addresses:        jsii.Strings(list...),
				Description:      jsii.String("The payment and payout providers source addresses, webhookSourceCidrs"),
			})
			refs = append(refs, &awswafv2.CfnWebACL_StatementProperty{
				IpSetReferenceStatement: &awswafv2.CfnWebACL_IPSetReferenceStatementProperty{Arn: set.AttrArn()},
			})
		}
		allow := refs[0]
		if len(refs) > 1 {
			allow = &awswafv2.CfnWebACL_StatementProperty{OrStatement: &awswafv2.CfnWebACL_OrStatementProperty{Statements: &refs}}
		}
		rules = append(rules, &awswafv2.CfnWebACL_RuleProperty{
			Name:             jsii.String("ProviderSources"),
			Priority:         jsii.Number(1),
			Action:           &awswafv2.CfnWebACL_RuleActionProperty{Allow: &awswafv2.CfnWebACL_AllowActionProperty{}},
			Statement:        allow,
			VisibilityConfig: visibility("ProviderSources"),
		})
		defaultAction = &awswafv2.CfnWebACL_DefaultActionProperty{Block: &awswafv2.CfnWebACL_BlockActionProperty{}}
	}
	acl := awswafv2.NewCfnWebACL(s.Stack, jsii.String("WebhooksFirewall"), &awswafv2.CfnWebACLProps{
		Name:             jsii.String(name),
		Description:      jsii.String(fmt.Sprintf("Hourglass webhooks, %d requests per %d s per source address%s", webhookSourceLimit, webhookSourceWindowSec, allowlistNote(cidrs))),
		Scope:            jsii.String("REGIONAL"),
		DefaultAction:    defaultAction,
		Rules:            &rules,
		VisibilityConfig: visibility("HourglassWebhooks"),
	})
	s.WebhooksFirewall = acl
	awswafv2.NewCfnWebACLAssociation(s.Stack, jsii.String("WebhooksFirewallAssociation"), &awswafv2.CfnWebACLAssociationProps{
		ResourceArn: api.DeploymentStage().StageArn(),
		WebAclArn:   acl.AttrArn(),
	})
}

// behindWAF ends a description of the webhooks in prod and dev.
func behindWAF(p Profile) string {
	if p.WebhooksFirewall {
		return ", behind WAF"
	}
	return ""
}

func allowlistNote(cidrs []string) string {
	if len(cidrs) == 0 {
		return ""
	}
	return fmt.Sprintf(", only from the providers %d address ranges", len(cidrs))
}
