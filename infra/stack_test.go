package main

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/aws/aws-cdk-go/awscdk/v2/assertions"
	"github.com/aws/jsii-runtime-go"

	"github.com/hourglass/hourglass/shared/metrics"
)

func TestFunctions(t *testing.T) {
	f := stacks(t)
	tpl := f.defTpl
	ours := resources(f.defMap, "AWS::Lambda::Function")
	n := 0
	for _, r := range ours {
		if propsOf(r)["Runtime"] == "provided.al2023" {
			n++
		}
	}
	if n != 5 {
		t.Errorf("%d provided.al2023 functions, want 5", n)
	}
	tests := []struct {
		name    string
		memory  int
		timeout int
	}{
		{fnEnqueue, 512, 10},
		{fnSeckill, 1024, 10},
		{fnPoller, 1024, 75},
		{fnConsumer, 512, int(consumerTimeout.Seconds())},
		// Under API Gateway's 30 s, with the command's 25 s inside it.
		{fnOperator, 512, 30},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fn := f.def.Functions[tt.name]
			id := logicalID(f.def, fn)
			hasProps(t, tpl, "AWS::Lambda::Function", props{
				"Runtime":       "provided.al2023",
				"Architectures": []any{"arm64"},
				"Handler":       "bootstrap",
				"MemorySize":    tt.memory,
				"Timeout":       tt.timeout,
				"Role":          getAtt(logicalID(f.def, fn.Role()), "Arn"),
				"LoggingConfig": props{
					"LogFormat": "JSON",
					"LogGroup":  ref(logicalID(f.def, f.def.LogGroups[tt.name])),
				},
				"VpcConfig": props{
					"SecurityGroupIds": []any{getAtt(logicalID(f.def, f.def.SecurityGroups[tt.name]), "GroupId")},
					"SubnetIds": []any{
						ref(subnetID(t, f.defMap, "app", 1)), ref(subnetID(t, f.defMap, "app", 2)),
					},
				},
			})
			if _, ok := ours[id]; !ok {
				t.Errorf("no function %s in the template", id)
			}
		})
	}
	hasProps(t, tpl, "AWS::Lambda::Function", props{
		"Timeout":                      75,
		"ReservedConcurrentExecutions": assertions.Match_Absent(), // TestPollerReservedConcurrency
		"Environment":                  props{"Variables": props{"HOURGLASS_POLLER_MARGIN": "5s"}},
	})
	// A run outlasts the minute between starts: consecutive runs overlap.
	if pollerTimeout-pollerMargin <= 60e9 {
		t.Errorf("poller loop budget %s does not outlast the 1-minute schedule", pollerTimeout-pollerMargin)
	}
}

func subnetID(t *testing.T, tpl map[string]any, group string, n int) string {
	t.Helper()
	for id := range resources(tpl, "AWS::EC2::Subnet") {
		if strings.HasPrefix(id, fmt.Sprintf("Vpc%sSubnet%dSubnet", group, n)) {
			return id
		}
	}
	t.Fatalf("no subnet %s %d", group, n)
	return ""
}

func TestFunctionEnvironment(t *testing.T) {
	f := stacks(t)
	// Each function's own Redis user and password secret; the key prefix
	// its user's key patterns are written for.
	redisURL := func(name string) props {
		return props{"Fn::Join": []any{"", []any{
			"rediss://hourglass-" + name + "@", getAtt("Redis", "ConfigurationEndPoint.Address"), ":",
			getAtt("Redis", "ConfigurationEndPoint.Port"), "?cluster=true",
		}}}
	}
	base := props{
		"HOURGLASS_AUTH":              "jwt",
		"HOURGLASS_REDIS_PREFIX":      redisPrefix,
		"HOURGLASS_QUEUE_SHARDS":      "4",
		"HOURGLASS_LEDGER":            "dynamodb",
		"HOURGLASS_WITHDRAWALS_TABLE": ref(logicalID(f.def, f.def.Withdrawals)),
		"HOURGLASS_ORDERS_TABLE":      ref(logicalID(f.def, f.def.Orders)),
		"HOURGLASS_IDEMPOTENCY_TABLE": ref(logicalID(f.def, f.def.Idempotency)),
		"HOURGLASS_LOG_LEVEL":         "info",
	}
	own := map[string]props{
		fnEnqueue: {
			"HOURGLASS_JWT_SCOPE": "hourglass/user", "PAYOUT_WEBHOOK_SECRET_ID": "hourglass/payout-webhook",
			"PAYMENTS_WEBHOOK_SECRET_ID": "hourglass/payments-webhook", "HOURGLASS_ADMIN_ROLE_ARNS": "",
		},
		fnSeckill: {"HOURGLASS_JWT_SCOPE": "hourglass/user", "HOURGLASS_ADMIN_ROLE_ARNS": ""},
		fnPoller: {
			"WORK_QUEUE_URL":            ref(logicalID(f.def, f.def.WorkQueue)),
			"HOURGLASS_POLLER_MARGIN":   "5s",
			"HOURGLASS_RECONCILE_GRACE": "22m30s",
		},
		fnConsumer: {
			"PAYOUT_URL":                "https://payouts.example.com/v1/payouts",
			"PAYOUT_TIMEOUT":            "10s",
			"PAYOUT_SIGNING_SECRET_ID":  "hourglass/payout-signing-secret",
			"PAYOUT_LOOKUP":             "true",
			"PAYOUT_IDEMPOTENCY_WINDOW": "24h",
			"FINANCE_TOPIC_ARN":         ref(logicalID(f.def, f.def.FinanceTopic)),
			"ORDERS_TOPIC_ARN":          ref(logicalID(f.def, f.def.OrdersTopic)),
		},
		// The operator roles it admits; Redis and the tables come from base.
		fnOperator: {"HOURGLASS_ADMIN_ROLE_ARNS": "", "HOURGLASS_RECONCILE_GRACE": "22m30s"},
	}
	fns := resources(f.defMap, "AWS::Lambda::Function")
	for _, name := range functionNames {
		t.Run(name, func(t *testing.T) {
			want := props{}
			for k, v := range base {
				want[k] = v
			}
			for k, v := range own[name] {
				want[k] = v
			}
			want["REDIS_URL"] = redisURL(name)
			want["REDIS_AUTH_SECRET_ID"] = ref(logicalID(f.def, f.def.RedisSecrets[name]))
			// Exactly these variables: the Match_Exact of the whole map.
			got := propsOf(fns[logicalID(f.def, f.def.Functions[name])])["Environment"].(map[string]any)["Variables"]
			if gj, wj := mustJSON(got), mustJSON(want); gj != wj {
				t.Errorf("environment:\n got %s\nwant %s", gj, wj)
			}
		})
	}
}

func TestPollerSchedule(t *testing.T) {
	f := stacks(t)
	poller := logicalID(f.def, f.def.Functions[fnPoller])
	count(t, f.defTpl, "AWS::Events::Rule", 1)
	hasProps(t, f.defTpl, "AWS::Events::Rule", props{
		"ScheduleExpression": "rate(1 minute)",
		"State":              "ENABLED",
		"Targets":            arrayWith(like(props{"Arn": getAtt(poller, "Arn")})),
	})
	hasProps(t, f.defTpl, "AWS::Lambda::Permission", props{
		"Action": "lambda:InvokeFunction", "FunctionName": getAtt(poller, "Arn"), "Principal": "events.amazonaws.com",
	})
	hasProps(t, f.defTpl, "AWS::Lambda::EventInvokeConfig", props{
		"FunctionName": ref(poller), "MaximumRetryAttempts": 0, "MaximumEventAgeInSeconds": 60,
	})
}

func TestConsumerEventSource(t *testing.T) {
	f := stacks(t)
	count(t, f.defTpl, "AWS::Lambda::EventSourceMapping", 1)
	hasProps(t, f.defTpl, "AWS::Lambda::EventSourceMapping", props{
		"EventSourceArn":        getAtt(logicalID(f.def, f.def.WorkQueue), "Arn"),
		"BatchSize":             10,
		"FunctionResponseTypes": []any{"ReportBatchItemFailures"},
		"ScalingConfig":         props{"MaximumConcurrency": 20},
	})
	hasProps(t, f.optTpl, "AWS::Lambda::EventSourceMapping", props{"ScalingConfig": props{"MaximumConcurrency": 50}})
	// It invokes the consumer's live alias (TestCanaryDeployments).
	for _, m := range resources(f.defMap, "AWS::Lambda::EventSourceMapping") {
		if ids, _ := named(propsOf(m)["FunctionName"]); !slices.Equal(slices.Compact(ids), []string{logicalID(f.def, f.def.Aliases[fnConsumer])}) {
			t.Errorf("the event source invokes %v", propsOf(m)["FunctionName"])
		}
	}
}

func TestQueues(t *testing.T) {
	f := stacks(t)
	tpl := f.defTpl
	key := getAtt(logicalID(f.def, f.def.DataKey), "Arn")
	dlq := logicalID(f.def, f.def.DeadLetterQueue)
	count(t, tpl, "AWS::SQS::Queue", 6) // and the finance and orders queues, TestDurableSubscribers
	hasProps(t, tpl, "AWS::SQS::Queue", props{
		"KmsMasterKeyId":         key,
		"MessageRetentionPeriod": 4 * 24 * 3600,
		"RedrivePolicy":          props{"deadLetterTargetArn": getAtt(dlq, "Arn"), "maxReceiveCount": 5},
	})
	hasProps(t, tpl, "AWS::SQS::Queue", props{
		"KmsMasterKeyId": key, "MessageRetentionPeriod": 14 * 24 * 3600, "RedrivePolicy": assertions.Match_Absent(),
	})
	// The visibility timeout covers at least six consumer timeouts.
	work := propsOf(resources(f.defMap, "AWS::SQS::Queue")[logicalID(f.def, f.def.WorkQueue)])
	consumer := propsOf(resources(f.defMap, "AWS::Lambda::Function")[logicalID(f.def, f.def.Functions[fnConsumer])])
	if vis, to := work["VisibilityTimeout"].(float64), consumer["Timeout"].(float64); vis < 6*to {
		t.Errorf("work queue visibility timeout %v s < 6 x consumer timeout %v s", vis, to)
	}
	// TLS only: each queue denies every request without it.
	for _, q := range []string{logicalID(f.def, f.def.WorkQueue), dlq} {
		hasProps(t, tpl, "AWS::SQS::QueuePolicy", props{
			"Queues": []any{ref(q)},
			"PolicyDocument": like(props{"Statement": arrayWith(like(props{
				"Effect": "Deny", "Action": "sqs:*", "Principal": props{"AWS": "*"},
				"Condition": props{"Bool": props{"aws:SecureTransport": "false"}},
			}))}),
		})
	}
}

func TestTopics(t *testing.T) {
	f := stacks(t)
	tpl := f.defTpl
	count(t, tpl, "AWS::SNS::Topic", 3)
	hasProps(t, tpl, "AWS::SNS::Topic", props{
		"DisplayName": "Hourglass processed payouts", "KmsMasterKeyId": getAtt(logicalID(f.def, f.def.DataKey), "Arn"),
	})
	hasProps(t, tpl, "AWS::SNS::Topic", props{
		"DisplayName": "Hourglass order events", "KmsMasterKeyId": getAtt(logicalID(f.def, f.def.DataKey), "Arn"),
	})
	hasProps(t, tpl, "AWS::SNS::Topic", props{
		"DisplayName": "Hourglass ops alarms", "KmsMasterKeyId": getAtt(logicalID(f.def, f.def.AlarmKey), "Arn"),
	})
	for _, topic := range []string{logicalID(f.def, f.def.FinanceTopic), logicalID(f.def, f.def.OrdersTopic), logicalID(f.def, f.def.AlarmTopic)} {
		hasProps(t, tpl, "AWS::SNS::TopicPolicy", props{
			"Topics": []any{ref(topic)},
			"PolicyDocument": like(props{"Statement": arrayWith(like(props{
				"Effect": "Deny", "Action": "sns:Publish",
				"Condition": props{"Bool": props{"aws:SecureTransport": "false"}},
			}))}),
		})
	}
	// The finance and orders queues' subscriptions; each e-mail given
	// subscribes to its topic.
	count(t, tpl, "AWS::SNS::Subscription", 2)
	count(t, f.optTpl, "AWS::SNS::Subscription", 4)
	hasProps(t, f.optTpl, "AWS::SNS::Subscription", props{
		"Protocol": "email", "Endpoint": "finance@example.org", "TopicArn": ref(logicalID(f.opt, f.opt.FinanceTopic)),
	})
	hasProps(t, f.optTpl, "AWS::SNS::Subscription", props{
		"Protocol": "email", "Endpoint": "ops@example.org", "TopicArn": ref(logicalID(f.opt, f.opt.AlarmTopic)),
	})
}

func TestKeys(t *testing.T) {
	f := stacks(t)
	count(t, f.defTpl, "AWS::KMS::Key", 2)
	check(t, "keys rotate and are retained", func() {
		f.defTpl.AllResources(jsii.String("AWS::KMS::Key"), like(props{
			"Properties": like(props{"EnableKeyRotation": true}), "DeletionPolicy": "Retain",
		}))
	})
	hasProps(t, f.defTpl, "AWS::KMS::Key", props{
		"KeyPolicy": like(props{"Statement": arrayWith(like(props{
			"Principal": props{"Service": "cloudwatch.amazonaws.com"},
			"Action":    []any{"kms:Decrypt", "kms:GenerateDataKey*"},
		}))}),
	})
}

func TestTables(t *testing.T) {
	f := stacks(t)
	tpl := f.defTpl
	count(t, tpl, "AWS::DynamoDB::Table", 3)
	check(t, "every table is on-demand, recoverable, protected, encrypted and retained", func() {
		tpl.AllResources(jsii.String("AWS::DynamoDB::Table"), like(props{
			"Properties": like(props{
				"BillingMode":                      "PAY_PER_REQUEST",
				"PointInTimeRecoverySpecification": props{"PointInTimeRecoveryEnabled": true},
				"DeletionProtectionEnabled":        true,
				"SSESpecification":                 props{"SSEEnabled": true},
			}),
			"DeletionPolicy":      "Retain",
			"UpdateReplacePolicy": "Retain",
		}))
	})
	// The withdrawals table with the ledger's indexes: by_user (newest
	// first per user), by_state (the reconciler's sparse index).
	hasProps(t, tpl, "AWS::DynamoDB::Table", props{
		"KeySchema": []any{props{"AttributeName": "id", "KeyType": "HASH"}},
		"AttributeDefinitions": []any{
			props{"AttributeName": "id", "AttributeType": "S"}, props{"AttributeName": "user_id", "AttributeType": "S"},
			props{"AttributeName": "state_key", "AttributeType": "S"}, props{"AttributeName": "due_at", "AttributeType": "N"},
		},
		"GlobalSecondaryIndexes": []any{
			props{
				"IndexName":  "by_user",
				"KeySchema":  []any{props{"AttributeName": "user_id", "KeyType": "HASH"}, props{"AttributeName": "id", "KeyType": "RANGE"}},
				"Projection": props{"ProjectionType": "ALL"},
			},
			props{
				"IndexName":  "by_state",
				"KeySchema":  []any{props{"AttributeName": "state_key", "KeyType": "HASH"}, props{"AttributeName": "due_at", "KeyType": "RANGE"}},
				"Projection": props{"ProjectionType": "ALL"},
			},
		},
	})
	hasProps(t, tpl, "AWS::DynamoDB::Table", props{
		"KeySchema":               []any{props{"AttributeName": "id", "KeyType": "HASH"}},
		"GlobalSecondaryIndexes":  assertions.Match_Absent(),
		"TimeToLiveSpecification": assertions.Match_Absent(),
	})
	hasProps(t, tpl, "AWS::DynamoDB::Table", props{
		"KeySchema":               []any{props{"AttributeName": "pk", "KeyType": "HASH"}},
		"TimeToLiveSpecification": props{"AttributeName": "expires_at", "Enabled": true},
	})
}

func TestRedis(t *testing.T) {
	f := stacks(t)
	tpl := f.defTpl
	count(t, tpl, "AWS::ElastiCache::ReplicationGroup", 1)
	hasProps(t, tpl, "AWS::ElastiCache::ReplicationGroup", props{
		"ReplicationGroupId":       "hourglass",
		"Engine":                   "valkey",
		"EngineVersion":            "8.0",
		"CacheNodeType":            "cache.r7g.large",
		"ClusterMode":              "enabled",
		"NumNodeGroups":            2,
		"ReplicasPerNodeGroup":     1,
		"AutomaticFailoverEnabled": true,
		"MultiAZEnabled":           true,
		"TransitEncryptionEnabled": true,
		"TransitEncryptionMode":    "required",
		"AtRestEncryptionEnabled":  true,
		"KmsKeyId":                 getAtt(logicalID(f.def, f.def.DataKey), "Arn"),
		"Port":                     redisPort,
		"AuthToken":                assertions.Match_Absent(),
		"UserGroupIds":             []any{ref(logicalID(f.def, f.def.RedisUserGroup))},
		"CacheParameterGroupName":  ref(logicalID(f.def, f.def.RedisParameters)),
		"SecurityGroupIds":         []any{getAtt(logicalID(f.def, f.def.RedisSG), "GroupId")},
		"SnapshotRetentionLimit":   7,
	})
	check(t, "a final snapshot on deletion", func() {
		tpl.HasResource(jsii.String("AWS::ElastiCache::ReplicationGroup"), like(props{"DeletionPolicy": "Snapshot"}))
	})
	hasProps(t, f.optTpl, "AWS::ElastiCache::ReplicationGroup", props{
		"ReplicationGroupId": "hourglassoptions", "NumNodeGroups": 3, "CacheNodeType": "cache.r7g.xlarge",
	})
	hasProps(t, tpl, "AWS::ElastiCache::ParameterGroup", props{
		"CacheParameterGroupFamily": "valkey8",
		"Properties":                props{"cluster-enabled": "yes", "maxmemory-policy": "noeviction"},
	})
	// The subnet group is the isolated data subnets.
	hasProps(t, tpl, "AWS::ElastiCache::SubnetGroup", props{
		"SubnetIds": []any{ref(subnetID(t, f.defMap, "data", 1)), ref(subnetID(t, f.defMap, "data", 2))},
	})
	// The users' passwords: 64 letters and digits (ElastiCache: 16-128
	// printable, no @ " /, no space), each secret string the password itself.
	for _, name := range functionNames {
		check(t, name+"'s Redis password", func() {
			tpl.HasResourceProperties(jsii.String("AWS::SecretsManager::Secret"), assertions.Match_Exact(props{
				"Description":          "Hourglass: the " + name + " function's ElastiCache password (user hourglass-" + name + ")",
				"GenerateSecretString": props{"PasswordLength": 64, "ExcludePunctuation": true, "IncludeSpace": false},
			}))
		})
	}
}

func TestNetwork(t *testing.T) {
	f := stacks(t)
	tpl := f.defTpl
	count(t, tpl, "AWS::EC2::VPC", 1)
	count(t, tpl, "AWS::EC2::Subnet", 6) // public, app, data in each of 2 AZs
	count(t, tpl, "AWS::EC2::NatGateway", 2)
	count(t, tpl, "AWS::EC2::FlowLog", 1)
	hasProps(t, tpl, "AWS::EC2::FlowLog", props{"ResourceType": "VPC", "TrafficType": "ALL", "LogDestinationType": "cloud-watch-logs"})
	for _, ep := range interfaceEndpoints {
		hasProps(t, tpl, "AWS::EC2::VPCEndpoint", props{
			"VpcEndpointType":   "Interface",
			"ServiceName":       props{"Fn::Join": []any{"", []any{"com.amazonaws.", ref("AWS::Region"), "." + ep.name}}},
			"PrivateDnsEnabled": true,
			"SecurityGroupIds":  []any{getAtt(logicalID(f.def, f.def.EndpointSGs[ep.name]), "GroupId")},
		})
	}
	hasProps(t, tpl, "AWS::EC2::VPCEndpoint", props{
		"VpcEndpointType": "Gateway",
		"ServiceName":     props{"Fn::Join": []any{"", []any{"com.amazonaws.", ref("AWS::Region"), ".dynamodb"}}},
	})
	count(t, tpl, "AWS::EC2::VPCEndpoint", 4)
	// The security groups: TestSecurityGroups.
}

// wantRoutes is SPEC.md's HTTP API: route key, serving function, auth type.
var wantRoutes = []struct{ key, fn, auth string }{
	{"POST /v1/withdrawals", fnEnqueue, "JWT"},
	{"GET /v1/withdrawals", fnEnqueue, "JWT"},
	{"GET /v1/withdrawals/{id}", fnEnqueue, "JWT"},
	{"PATCH /v1/withdrawals/{id}", fnEnqueue, "JWT"},
	{"DELETE /v1/withdrawals/{id}", fnEnqueue, "JWT"},
	{"GET /v1/admin/stats", fnEnqueue, "AWS_IAM"},
	{"POST /v1/admin/operator", fnOperator, "AWS_IAM"},
	{"GET /healthz", fnEnqueue, "NONE"},
	// The providers' webhooks are on the REST API of webhooks.go only
	// (TestWebhooksOnlyBehindTheFirewall).
	{"PUT /v1/seckill/items/{item_id}", fnSeckill, "AWS_IAM"},
	{"GET /v1/seckill/items/{item_id}", fnSeckill, "NONE"},
	{"POST /v1/seckill/items/{item_id}/purchases", fnSeckill, "JWT"},
	{"GET /v1/seckill/items/{item_id}/purchases/me", fnSeckill, "JWT"},
}

func TestApiRoutes(t *testing.T) {
	f := stacks(t)
	tpl := f.defTpl
	count(t, tpl, "AWS::ApiGatewayV2::Api", 1)
	hasProps(t, tpl, "AWS::ApiGatewayV2::Api", props{"ProtocolType": "HTTP"})
	count(t, tpl, "AWS::ApiGatewayV2::Authorizer", 1)
	hasProps(t, tpl, "AWS::ApiGatewayV2::Authorizer", props{
		"AuthorizerType": "JWT",
		"IdentitySource": []any{"$request.header.Authorization"},
		"JwtConfiguration": props{
			"Issuer": "https://issuer.example.com/", "Audience": []any{"placeholder-audience"},
		},
	})
	hasProps(t, f.optTpl, "AWS::ApiGatewayV2::Authorizer", props{
		"JwtConfiguration": props{"Issuer": "https://auth.example.org/realms/app", "Audience": []any{"mobile"}},
	})
	count(t, tpl, "AWS::ApiGatewayV2::Route", len(wantRoutes))

	authorizer := onlyID(t, f.defMap, "AWS::ApiGatewayV2::Authorizer", "")
	integrations := resources(f.defMap, "AWS::ApiGatewayV2::Integration")
	routes := map[string]map[string]any{}
	for _, r := range resources(f.defMap, "AWS::ApiGatewayV2::Route") {
		p := propsOf(r)
		routes[p["RouteKey"].(string)] = p
	}
	for _, w := range wantRoutes {
		t.Run(w.key, func(t *testing.T) {
			r, ok := routes[w.key]
			if !ok {
				t.Fatalf("no route %q", w.key)
			}
			if r["AuthorizationType"] != w.auth {
				t.Errorf("authorization %v, want %s", r["AuthorizationType"], w.auth)
			}
			if w.auth == "JWT" {
				if got := mustJSON(r["AuthorizerId"]); got != mustJSON(ref(authorizer)) {
					t.Errorf("authorizer %s, want the JWT authorizer", got)
				}
				// The scope the functions check (HOURGLASS_JWT_SCOPE): no
				// ID token gets through.
				if got := mustJSON(r["AuthorizationScopes"]); got != `["hourglass/user"]` {
					t.Errorf("authorization scopes %s, want [\"hourglass/user\"]", got)
				}
			} else if r["AuthorizerId"] != nil || r["AuthorizationScopes"] != nil {
				t.Errorf("authorizer %s on a %s route", mustJSON(r["AuthorizerId"]), w.auth)
			}
			// Target: integrations/<id>, whose URI is the function's live
			// alias (TestCanaryDeployments), or the operator function itself
			// (not canaried: it serves a handful of operators).
			parts := r["Target"].(map[string]any)["Fn::Join"].([]any)[1].([]any)
			integ := propsOf(integrations[parts[1].(map[string]any)["Ref"].(string)])
			var want any = getAtt(logicalID(f.def, f.def.Functions[w.fn]), "Arn")
			if a, ok := f.def.Aliases[w.fn]; ok {
				want = ref(logicalID(f.def, a))
			}
			if mustJSON(integ["IntegrationUri"]) != mustJSON(want) || integ["PayloadFormatVersion"] != "2.0" || integ["IntegrationType"] != "AWS_PROXY" {
				t.Errorf("integration %s, want a 2.0 proxy to %s", mustJSON(integ), w.fn)
			}
		})
	}
}

// onlyID is the logical id of the one resource of typ whose id starts
// with prefix.
func onlyID(t *testing.T, tpl map[string]any, typ, prefix string) string {
	t.Helper()
	var ids []string
	for id := range resources(tpl, typ) {
		if strings.HasPrefix(id, prefix) {
			ids = append(ids, id)
		}
	}
	if len(ids) != 1 {
		t.Fatalf("%s %s*: %v, want one", typ, prefix, ids)
	}
	return ids[0]
}

func TestApiStage(t *testing.T) {
	f := stacks(t)
	tpl := f.defTpl
	count(t, tpl, "AWS::ApiGatewayV2::Stage", 1)
	settings := props{}
	for key, th := range routeThrottles {
		settings[key] = props{"ThrottlingRateLimit": th.rate, "ThrottlingBurstLimit": th.burst, "DetailedMetricsEnabled": true}
	}
	hasProps(t, tpl, "AWS::ApiGatewayV2::Stage", props{
		"StageName":  "$default",
		"AutoDeploy": true,
		"DefaultRouteSettings": props{
			"ThrottlingRateLimit": 1000, "ThrottlingBurstLimit": 2000, "DetailedMetricsEnabled": true,
		},
		"RouteSettings": settings,
		"AccessLogSettings": props{
			"DestinationArn": getAtt(onlyID(t, f.defMap, "AWS::Logs::LogGroup", "ApiAccessLogs"), "Arn"),
			"Format":         assertions.Match_SerializedJson(assertions.Match_ObjectLike(&map[string]any{"requestId": "$context.requestId", "status": "$context.status", "routeKey": "$context.routeKey"})),
		},
	})
	// Purchases are throttled tighter than the default; every throttled
	// key is a real route.
	if p := routeThrottles["POST /v1/seckill/items/{item_id}/purchases"]; p.rate >= defaultThrottle.rate || p.burst >= defaultThrottle.burst {
		t.Errorf("purchases throttle %+v is not tighter than the default %+v", p, defaultThrottle)
	}
	// The unauthenticated callbacks have a budget of their own, on their
	// own API (TestWebhooksStage), none here.
	for key := range routeThrottles {
		if strings.Contains(key, "/webhooks/") {
			t.Errorf("the HTTP API throttles %s, a webhook it must not serve", key)
		}
	}
	keys := map[string]bool{}
	for _, r := range wantRoutes {
		keys[r.key] = true
	}
	for key := range routeThrottles {
		if !keys[key] {
			t.Errorf("throttle for %q, which is no route", key)
		}
	}
	// The stage waits for the routes its settings name.
	stage := resources(f.defMap, "AWS::ApiGatewayV2::Stage")
	for _, r := range stage {
		deps := mustJSON(r["DependsOn"])
		for id, route := range resources(f.defMap, "AWS::ApiGatewayV2::Route") {
			if _, throttled := routeThrottles[propsOf(route)["RouteKey"].(string)]; throttled && !strings.Contains(deps, `"`+id+`"`) {
				t.Errorf("the stage does not depend on throttled route %s", id)
			}
		}
	}
}

func TestLogGroups(t *testing.T) {
	f := stacks(t)
	for _, name := range functionNames {
		check(t, name+" log group", func() {
			f.defTpl.HasResource(jsii.String("AWS::Logs::LogGroup"), like(props{
				"Properties":     props{"RetentionInDays": 90},
				"DeletionPolicy": "Retain",
			}))
		})
		id := logicalID(f.def, f.def.LogGroups[name])
		if days := propsOf(resources(f.defMap, "AWS::Logs::LogGroup")[id])["RetentionInDays"]; days != float64(90) {
			t.Errorf("%s logs kept %v days, want 90", name, days)
		}
	}
	for id, r := range resources(f.defMap, "AWS::Logs::LogGroup") {
		if propsOf(r)["RetentionInDays"] == nil {
			t.Errorf("log group %s is kept forever", id)
		}
	}
}

func TestAlarms(t *testing.T) {
	f := stacks(t)
	tpl := f.defTpl
	topic := []any{ref(logicalID(f.def, f.def.AlarmTopic))}
	check(t, "every alarm notifies the alarm topic, in and out of alarm", func() {
		tpl.AllResourcesProperties(jsii.String("AWS::CloudWatch::Alarm"), like(props{"AlarmActions": topic, "OKActions": topic}))
	})
	// due lag, DLQ, 5 function errors, poller heartbeat, unresolved payouts,
	// refused credentials, callback conflicts, one per Redis shard; poller
	// failures, API 5xx, reconciler repairs, DLQ age, finance deliveries
	// and finance DLQ, order-event deliveries, orders DLQ and failed order
	// expiries (TestNewAlarms); housekeeping failures, payout failures,
	// throttles, the work queue's age, unknown callbacks, and the finance
	// and orders queues' age where no webhook is set (TestAlarmsThatPage);
	// the webhooks' 5xx (TestWebhooksAlarm)
	count(t, tpl, "AWS::CloudWatch::Alarm", 1+1+5+1+3+2+6+3+5+2+1)
	count(t, f.optTpl, "AWS::CloudWatch::Alarm", 1+1+5+1+3+3+6+3+5+1)
	// A payout that may have been made and is still unsettled pages.
	for _, m := range []string{metrics.PayoutsUnresolved, metrics.PayoutsRejected, metrics.PayoutConflicts} {
		hasProps(t, tpl, "AWS::CloudWatch::Alarm", props{
			"Namespace": "Hourglass", "MetricName": m, "Statistic": "Sum",
			"ComparisonOperator": "GreaterThanThreshold", "Threshold": 0, "EvaluationPeriods": 1,
		})
	}

	hasProps(t, tpl, "AWS::CloudWatch::Alarm", props{
		"ComparisonOperator": "GreaterThanThreshold",
		"Threshold":          60000,
		"EvaluationPeriods":  3,
		"DatapointsToAlarm":  3,
		"Metrics": []any{like(props{"MetricStat": like(props{
			"Metric": props{
				"Namespace": "Hourglass", "MetricName": "OldestDueLagMs",
				"Dimensions": []any{props{"Name": "Queue", "Value": "withdrawals"}},
			},
			"Stat": "Maximum",
		})})},
	})
	hasProps(t, tpl, "AWS::CloudWatch::Alarm", props{
		"ComparisonOperator": "GreaterThanThreshold",
		"Threshold":          0,
		"Metrics": []any{like(props{"MetricStat": like(props{"Metric": props{
			"Namespace": "AWS/SQS", "MetricName": "ApproximateNumberOfMessagesVisible",
			"Dimensions": []any{props{"Name": "QueueName", "Value": getAtt(logicalID(f.def, f.def.DeadLetterQueue), "QueueName")}},
		}})})},
	})
	for _, name := range functionNames {
		hasProps(t, tpl, "AWS::CloudWatch::Alarm", props{
			"Namespace": "AWS/Lambda", "MetricName": "Errors", "Statistic": "Sum",
			"ComparisonOperator": "GreaterThanThreshold", "Threshold": 0,
			"Dimensions": []any{props{"Name": "FunctionName", "Value": ref(logicalID(f.def, f.def.Functions[name]))}},
		})
	}
	hasProps(t, tpl, "AWS::CloudWatch::Alarm", props{
		"Namespace": "AWS/Lambda", "MetricName": "Invocations", "ComparisonOperator": "LessThanThreshold",
		"Threshold": 1, "TreatMissingData": "breaching",
		"Dimensions": []any{props{"Name": "FunctionName", "Value": ref(logicalID(f.def, f.def.Functions[fnPoller]))}},
	})
	for shard := 1; shard <= 2; shard++ {
		var nodes []any
		for node := 1; node <= 2; node++ {
			nodes = append(nodes, like(props{"MetricStat": like(props{"Metric": props{
				"Namespace": "AWS/ElastiCache", "MetricName": "DatabaseMemoryUsagePercentage",
				"Dimensions": []any{props{"Name": "CacheClusterId", "Value": fmt.Sprintf("hourglass-%04d-%03d", shard, node)}},
			}})}))
		}
		hasProps(t, tpl, "AWS::CloudWatch::Alarm", props{
			"ComparisonOperator": "GreaterThanThreshold", "Threshold": 80,
			"Metrics": arrayWith(append([]any{like(props{"Expression": "MAX([m0,m1])"})}, nodes...)...),
		})
	}
}

func TestDashboard(t *testing.T) {
	f := stacks(t)
	count(t, f.defTpl, "AWS::CloudWatch::Dashboard", 1)
	hasProps(t, f.defTpl, "AWS::CloudWatch::Dashboard", props{"DashboardName": "Hourglass"})
	var body string
	for _, r := range resources(f.defMap, "AWS::CloudWatch::Dashboard") {
		body = mustJSON(propsOf(r)["DashboardBody"])
	}
	// What the seeds ask operators to watch: queue size, due backlog, oldest
	// due lag, in flight, dead letters (Redis and the SQS DLQ), payouts and
	// their success rate, admissions, stock left, consumer lag, Lambda
	// errors and durations; and Redis memory.
	for _, want := range []string{
		metrics.DueBacklog, metrics.DueNow, metrics.OldestDueLagMs, metrics.Inflight, metrics.Dead,
		metrics.PayoutsPaid, metrics.PayoutsFailed, metrics.PayoutRetries, "100 * paid / (paid + failed)",
		metrics.Admitted, metrics.Refusals, metrics.StockLeft, metrics.ConsumerLagMs, metrics.DispatchLagMs,
		metrics.Claimed, metrics.Refused, metrics.Reaped, metrics.OrdersConfirmed, metrics.OrdersReleased,
		metrics.CompensationRequeued, metrics.CompensationReleased,
		`\"AWS/Lambda\",\"Errors\"`, `\"AWS/Lambda\",\"Duration\"`, "ApproximateNumberOfMessagesVisible",
		"DatabaseMemoryUsagePercentage", `\"Queue\",\"withdrawals\"`, `\"Queue\",\"seckill\"`, "backlog_full",
		// Order events undelivered, and expiries of unpaid orders that fail.
		"orders dead-letter queue", metrics.OrderExpiryFailures,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("dashboard lacks %s", want)
		}
	}
	// Valid widget JSON once the tokens are joined.
	var parts []string
	var js map[string]any
	_ = json.Unmarshal([]byte(body), &js)
	if join, ok := js["Fn::Join"].([]any); ok {
		for _, p := range join[1].([]any) {
			if s, ok := p.(string); ok {
				parts = append(parts, s)
			} else {
				parts = append(parts, "TOKEN")
			}
		}
	}
	var widgets map[string]any
	if err := json.Unmarshal([]byte(strings.Join(parts, "")), &widgets); err != nil {
		t.Errorf("dashboard body is not JSON: %v", err)
	}
}

func TestOutputs(t *testing.T) {
	f := stacks(t)
	for _, out := range []string{"ApiUrl", "WorkQueueUrl", "DeadLetterQueueUrl", "FinanceTopicArn", "AlarmTopicArn",
		"FinanceQueueUrl", "FinanceDeadLetterQueueUrl", "OrdersTopicArn", "OrdersQueueUrl", "OrdersDeadLetterQueueUrl",
		"RedisConfigurationEndpoint", "DashboardUrl",
		"RedisEnqueueSecretArn", "RedisSeckillSecretArn", "RedisPollerSecretArn", "RedisConsumerSecretArn", "RedisOperatorSecretArn",
		"EnqueueLogGroup", "SeckillLogGroup", "PollerLogGroup", "ConsumerLogGroup"} {
		check(t, "output "+out, func() { f.defTpl.HasOutput(jsii.String(out), assertions.Match_AnyValue()) })
	}
}
