package main

import (
	"encoding/json"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsapigatewayv2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsapigatewayv2authorizers"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsapigatewayv2integrations"
	"github.com/aws/aws-cdk-go/awscdk/v2/awslogs"
	"github.com/aws/constructs-go/constructs/v10"
	"github.com/aws/jsii-runtime-go"
)

// Who may call a route (SPEC.md "Identity").
type access int

const (
	public access = iota // nobody in particular: health, the item state
	user                 // a JWT from the app's issuer; the user is its sub
	admin                // IAM (SigV4): operators
)

// throttle is a rate (requests per second, sustained) and a burst.
type throttle struct{ rate, burst float64 }

// Throttling of the $default stage. Every route gets defaultThrottle unless
// routeThrottles tightens it: purchases arrive in bursts and each one costs
// an admission script on one Redis shard, so a sale cannot starve the
// withdrawal API; creating withdrawals is a human action; admin routes are
// for a handful of operators.
var (
	defaultThrottle = throttle{rate: 1000, burst: 2000}
	routeThrottles  = map[string]throttle{
		"POST /v1/seckill/items/{item_id}/purchases": {rate: 500, burst: 1000},
		"POST /v1/withdrawals":                       {rate: 200, burst: 400},
		"PUT /v1/seckill/items/{item_id}":            {rate: 10, burst: 20},
		"GET /v1/admin/stats":                        {rate: 10, burst: 20},
		// A person at a terminal: a runaway script must not hammer Redis
		// with reconciler passes.
		"POST /v1/admin/operator": {rate: 2, burst: 5},
		// The providers' webhooks are not here: they have an API, a
		// budget and a firewall of their own (webhooks.go).
	}
)

type route struct {
	method awsapigatewayv2.HttpMethod
	path   string
	fn     string
	access access
	// why a public route needs no authorization (cdk-nag AwsSolutions-APIG4).
	why string
}

// routes is every route of SPEC.md the HTTP API serves, with the function
// that serves it; the providers' webhooks are webhookRoutes, on the REST
// API of webhooks.go, and nowhere here.
var routes = []route{
	{awsapigatewayv2.HttpMethod_POST, "/v1/withdrawals", fnEnqueue, user, ""},
	{awsapigatewayv2.HttpMethod_GET, "/v1/withdrawals", fnEnqueue, user, ""},
	{awsapigatewayv2.HttpMethod_GET, "/v1/withdrawals/{id}", fnEnqueue, user, ""},
	{awsapigatewayv2.HttpMethod_PATCH, "/v1/withdrawals/{id}", fnEnqueue, user, ""},
	{awsapigatewayv2.HttpMethod_DELETE, "/v1/withdrawals/{id}", fnEnqueue, user, ""},
	{awsapigatewayv2.HttpMethod_GET, "/v1/admin/stats", fnEnqueue, admin, ""},
	{awsapigatewayv2.HttpMethod_POST, "/v1/admin/operator", fnOperator, admin, ""},
	{awsapigatewayv2.HttpMethod_GET, "/healthz", fnEnqueue, public,
		"a health check for load balancers and uptime probes: it answers ok or unavailable and reveals no data"},
	{awsapigatewayv2.HttpMethod_PUT, "/v1/seckill/items/{item_id}", fnSeckill, admin, ""},
	{awsapigatewayv2.HttpMethod_GET, "/v1/seckill/items/{item_id}", fnSeckill, public,
		"a flash sale's public state (status, stock left, window) that every shopper sees before logging in; no user data"},
	{awsapigatewayv2.HttpMethod_POST, "/v1/seckill/items/{item_id}/purchases", fnSeckill, user, ""},
	{awsapigatewayv2.HttpMethod_GET, "/v1/seckill/items/{item_id}/purchases/me", fnSeckill, user, ""},
}

// accessLogFormat is one JSON line per request.
var accessLogFormat = map[string]string{
	"requestId":        "$context.requestId",
	"ip":               "$context.identity.sourceIp",
	"requestTime":      "$context.requestTime",
	"routeKey":         "$context.routeKey",
	"status":           "$context.status",
	"protocol":         "$context.protocol",
	"responseLength":   "$context.responseLength",
	"latencyMs":        "$context.responseLatency",
	"integrationMs":    "$context.integrationLatency",
	"integrationError": "$context.integrationErrorMessage",
	"authorizerError":  "$context.authorizer.error",
	"user":             "$context.authorizer.claims.sub",
	"iamCaller":        "$context.identity.caller",
}

func (s *HourglassStack) createApi() {
	s.Api = awsapigatewayv2.NewHttpApi(s.Stack, jsii.String("Api"), &awsapigatewayv2.HttpApiProps{
		ApiName:     jsii.String(*s.Stack.StackName()),
		Description: jsii.String("Hourglass HTTP API"),
	})
	jwt := awsapigatewayv2authorizers.NewHttpJwtAuthorizer(jsii.String("JwtAuthorizer"), jsii.String(s.settings.JWTIssuer),
		&awsapigatewayv2authorizers.HttpJwtAuthorizerProps{
			JwtAudience:    jsii.Strings(s.settings.JWTAudience),
			IdentitySource: jsii.Strings("$request.header.Authorization"),
		})
	authorizers := map[access]awsapigatewayv2.IHttpRouteAuthorizer{
		public: awsapigatewayv2.NewHttpNoneAuthorizer(),
		user:   jwt,
		admin:  awsapigatewayv2authorizers.NewHttpIamAuthorizer(),
	}
	integrations := map[string]awsapigatewayv2integrations.HttpLambdaIntegration{}
	for _, name := range []string{fnEnqueue, fnSeckill, fnOperator} {
		integrations[name] = awsapigatewayv2integrations.NewHttpLambdaIntegration(jsii.String(name+"Integration"),
			s.invoked(name), &awsapigatewayv2integrations.HttpLambdaIntegrationProps{
				PayloadFormatVersion: awsapigatewayv2.PayloadFormatVersion_VERSION_2_0(),
			})
	}
	var throttled []constructs.IDependable
	for _, r := range routes {
		opts := &awsapigatewayv2.AddRoutesOptions{
			Path:        jsii.String(r.path),
			Methods:     &[]awsapigatewayv2.HttpMethod{r.method},
			Integration: integrations[r.fn],
			Authorizer:  authorizers[r.access],
		}
		if r.access == user {
			// Access tokens granting the app's scope only: an ID token of
			// the same issuer and audience has no scope and is refused here
			// (and again by the function, HOURGLASS_JWT_SCOPE).
			opts.AuthorizationScopes = jsii.Strings(s.settings.JWTScope)
		}
		added := s.Api.AddRoutes(opts)
		for _, rt := range *added {
			suppressGuardAll(rt, "AWS::Lambda::Permission", "lambda_function_public_access_prohibited_check",
				"The permission admits API Gateway for this API's route only: its SourceArn is the route's execute-api "+
					"ARN, an Fn::Join of this account, region and API id, which the rule cannot read as a string or a Ref.")
		}
		if _, ok := routeThrottles[string(r.method)+" "+r.path]; ok {
			for _, rt := range *added {
				throttled = append(throttled, rt)
			}
		}
		if r.access == public {
			for _, rt := range *added {
				why := "Public by design (SPEC.md): " + string(r.method) + " " + r.path + " is " + r.why +
					"; it is throttled like every route."
				suppress(rt, "AwsSolutions-APIG4", why)
				suppressGuard(rt, "api_gw_v2_authorization_type_configured_check", why)
			}
		}
	}

	// The access log is the audit trail of who asked for what: kept a
	// year (cfn-guard CT.CLOUDWATCH.PR.2).
	accessLogs := awslogs.NewLogGroup(s.Stack, jsii.String("ApiAccessLogs"), &awslogs.LogGroupProps{
		Retention:     awslogs.RetentionDays_ONE_YEAR,
		RemovalPolicy: awscdk.RemovalPolicy_RETAIN,
	})
	suppressLogGroupGuard(accessLogs, "")
	format, _ := json.Marshal(accessLogFormat) // a map of strings always marshals
	// RouteSettings is free-form JSON to the CDK: CloudFormation's own
	// property names, spelled out.
	routeSettings := map[string]any{}
	for key, t := range routeThrottles {
		routeSettings[key] = map[string]any{
			"ThrottlingRateLimit": t.rate, "ThrottlingBurstLimit": t.burst, "DetailedMetricsEnabled": true,
		}
	}
	stage := s.Api.DefaultStage().Node().DefaultChild().(awsapigatewayv2.CfnStage)
	stage.SetAccessLogSettings(&awsapigatewayv2.CfnStage_AccessLogSettingsProperty{
		DestinationArn: accessLogs.LogGroupArn(),
		Format:         jsii.String(string(format)),
	})
	stage.SetDefaultRouteSettings(&awsapigatewayv2.CfnStage_RouteSettingsProperty{
		ThrottlingRateLimit:    jsii.Number(defaultThrottle.rate),
		ThrottlingBurstLimit:   jsii.Number(defaultThrottle.burst),
		DetailedMetricsEnabled: jsii.Bool(true),
	})
	stage.SetRouteSettings(routeSettings)
	// API Gateway refuses settings of a route that does not exist yet.
	stage.Node().AddDependency(throttled...)
}
