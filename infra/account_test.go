package main

import (
	"archive/tar"
	"compress/gzip"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-cdk-go/awscdk/v2/assertions"
	"github.com/aws/constructs-go/constructs/v10"
	"github.com/aws/jsii-runtime-go"

	"github.com/hourglass/hourglass/shared/metrics"
)

// What the account the tests imagine resolves pseudo parameters to.
const (
	testPartition = "aws"
	testRegion    = "eu-west-1"
	testAccount   = "123456789012"
)

// render is the text a template value takes once deployed in the test
// account. A Ref to a secret of the stack is that secret's complete ARN
// (a name of the logical id and a random suffix); other references stay
// visibly unresolved, so they match no ARN.
func render(tpl map[string]any, v any) string {
	switch x := v.(type) {
	case string:
		return x
	case map[string]any:
		if r, ok := x["Ref"].(string); ok {
			switch r {
			case "AWS::Partition":
				return testPartition
			case "AWS::Region":
				return testRegion
			case "AWS::AccountId":
				return testAccount
			}
			if _, ok := resources(tpl, "AWS::SecretsManager::Secret")[r]; ok {
				return fmt.Sprintf("arn:%s:secretsmanager:%s:%s:secret:%s-Rnd0m1", testPartition, testRegion, testAccount, r)
			}
			if _, ok := resources(tpl, "AWS::SNS::Topic")[r]; ok {
				return arnOf("AWS::SNS::Topic", r)
			}
			return "<ref " + r + ">"
		}
		if ga, ok := x["Fn::GetAtt"].([]any); ok && len(ga) == 2 && ga[1] == "Arn" {
			id := ga[0].(string)
			if res, ok := tpl["Resources"].(map[string]any)[id].(map[string]any); ok {
				if arn := arnOf(res["Type"].(string), id); arn != "" {
					return arn
				}
			}
		}
		if j, ok := x["Fn::Join"].([]any); ok {
			var parts []string
			for _, p := range j[1].([]any) {
				parts = append(parts, render(tpl, p))
			}
			return strings.Join(parts, j[0].(string))
		}
	}
	return "<" + mustJSON(v) + ">"
}

// arnOf is the ARN a resource of the test account has once deployed, its
// name taken to be its logical id; "" for a type not listed.
func arnOf(typ, id string) string {
	switch typ {
	case "AWS::SNS::Topic":
		return fmt.Sprintf("arn:%s:sns:%s:%s:%s", testPartition, testRegion, testAccount, id)
	case "AWS::SQS::Queue":
		return fmt.Sprintf("arn:%s:sqs:%s:%s:%s", testPartition, testRegion, testAccount, id)
	case "AWS::KMS::Key":
		return fmt.Sprintf("arn:%s:kms:%s:%s:key/%s", testPartition, testRegion, testAccount, id)
	case "AWS::DynamoDB::Table":
		return fmt.Sprintf("arn:%s:dynamodb:%s:%s:table/%s", testPartition, testRegion, testAccount, id)
	case "AWS::IAM::Role":
		return fmt.Sprintf("arn:%s:iam::%s:role/%s", testPartition, testAccount, id)
	}
	return ""
}

// evaluatedARNs are the ARNs IAM may evaluate a GetSecretValue of secretID
// against. A name resolves to the secret's complete ARN: the name, a hyphen
// and six random characters. An ARN whose end looks like that suffix is
// taken as complete, as it is; a shorter (partial) ARN resolves like a name.
func evaluatedARNs(secretID string, suffixes []string) []string {
	if strings.HasPrefix(secretID, "arn:") {
		if regexp.MustCompile(`:secret:.*-[A-Za-z0-9]{6}$`).MatchString(secretID) {
			return []string{secretID}
		}
		name := secretID[strings.Index(secretID, ":secret:")+len(":secret:"):]
		prefix := strings.TrimSuffix(secretID, name)
		var out []string
		for _, sfx := range suffixes {
			out = append(out, prefix+name+"-"+sfx)
		}
		return out
	}
	var out []string
	for _, sfx := range suffixes {
		out = append(out, fmt.Sprintf("arn:%s:secretsmanager:%s:%s:secret:%s-%s", testPartition, testRegion, testAccount, secretID, sfx))
	}
	return out
}

// iamMatch reports whether an IAM resource pattern (* any run, ? any one
// character) matches arn.
func iamMatch(pattern, arn string) bool {
	var re strings.Builder
	re.WriteString("^")
	for _, r := range pattern {
		switch r {
		case '*':
			re.WriteString(".*")
		case '?':
			re.WriteString(".")
		default:
			re.WriteString(regexp.QuoteMeta(string(r)))
		}
	}
	re.WriteString("$")
	return regexp.MustCompile(re.String()).MatchString(arn)
}

// allows reports whether some Allow statement grants action on arn.
func allows(tpl map[string]any, stmts []statement, action, arn string) bool {
	for _, s := range stmts {
		if s.effect != "Allow" || !slices.ContainsFunc(s.actions, func(a string) bool { return iamMatch(a, action) }) {
			continue
		}
		for _, r := range s.resources {
			if iamMatch(render(tpl, r), arn) {
				return true
			}
		}
	}
	return false
}

func randomSuffix() string {
	const chars = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"
	b := make([]byte, 6)
	for i := range b {
		b[i] = chars[rand.IntN(len(chars))]
	}
	return string(b)
}

// TestSecretResolution: the old way (a partial ARN built from the name)
// fails for the old default name; passing the name, or a complete ARN,
// works for every name, whatever it ends in.
func TestSecretResolution(t *testing.T) {
	f := stacks(t)
	grant := func(id string) string { return render(f.defMap, f.def.Stack.Resolve(f.def.secretGrant(id))) }
	partial := func(name string) string {
		return fmt.Sprintf("arn:%s:secretsmanager:%s:%s:secret:%s", testPartition, testRegion, testAccount, name)
	}
	complete := "arn:aws:secretsmanager:eu-west-1:111122223333:secret:shared/payout-key-AbC123"
	tests := []struct {
		name     string
		secretID string // what the function passes to GetSecretValue
		grant    string // the resource its role is granted
		want     bool
	}{
		{"old: partial ARN of the default name ending in -secret", partial("hourglass/payout-signing-secret"),
			partial("hourglass/payout-signing-secret") + "-??????", false},
		{"old: partial ARN of a name ending in -abcdef", partial("prod/payout-abcdef"), partial("prod/payout-abcdef") + "-??????", false},
		{"old: partial ARN of a plain name", partial("prod/payout"), partial("prod/payout") + "-??????", true},
		{"name ending in -secret", "hourglass/payout-signing-secret", grant("hourglass/payout-signing-secret"), true},
		{"name ending in -abcdef", "prod/payout-abcdef", grant("prod/payout-abcdef"), true},
		{"plain name", "hourglass/payout-webhook", grant("hourglass/payout-webhook"), true},
		{"complete ARN", complete, grant(complete), true},
		{"another secret sharing the prefix", "hourglass/payout-webhook-extra", grant("hourglass/payout-webhook"), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, arn := range evaluatedARNs(tt.secretID, []string{"AbCdEf", "x1y2z3", randomSuffix()}) {
				if got := iamMatch(tt.grant, arn); got != tt.want {
					t.Errorf("grant %s on %s (passed %q): allowed %v, want %v", tt.grant, arn, tt.secretID, got, tt.want)
				}
			}
		})
	}
}

// TestEverySecretIsGrantedAsItIsAsked: each function can read every
// secret its *_SECRET_ID variables name, under the ARN Secrets Manager
// evaluates, and no other function can.
func TestEverySecretIsGrantedAsItIsAsked(t *testing.T) {
	f := stacks(t)
	for _, st := range []struct {
		name  string
		stack *HourglassStack
		tpl   map[string]any
		want  map[string][]string // function -> its *_SECRET_ID variables
	}{
		{"default", f.def, f.defMap, map[string][]string{
			fnEnqueue: {"PAYMENTS_WEBHOOK_SECRET_ID", "PAYOUT_WEBHOOK_SECRET_ID", "REDIS_AUTH_SECRET_ID"}, fnSeckill: {"REDIS_AUTH_SECRET_ID"},
			fnPoller: {"REDIS_AUTH_SECRET_ID"}, fnConsumer: {"PAYOUT_SIGNING_SECRET_ID", "REDIS_AUTH_SECRET_ID"},
			fnOperator: {"REDIS_AUTH_SECRET_ID"},
		}},
		{"options", f.opt, f.optMap, map[string][]string{
			fnEnqueue: {"PAYMENTS_WEBHOOK_SECRET_ID", "PAYOUT_WEBHOOK_SECRET_ID", "REDIS_AUTH_SECRET_ID"}, fnSeckill: {"REDIS_AUTH_SECRET_ID"},
			fnPoller: {"REDIS_AUTH_SECRET_ID"},
			fnConsumer: {"FINANCE_SIGNING_SECRET_ID", "ORDERS_SIGNING_SECRET_ID", "PAYOUT_SIGNING_SECRET_ID",
				"REDIS_AUTH_SECRET_ID"},
			fnOperator: {"REDIS_AUTH_SECRET_ID"},
		}},
		{"complete ARNs", f.acct, f.acctMap, nil},
	} {
		t.Run(st.name, func(t *testing.T) {
			fns := resources(st.tpl, "AWS::Lambda::Function")
			env := map[string]map[string]any{}
			stmts := map[string][]statement{}
			for _, name := range functionNames {
				vars := propsOf(fns[logicalID(st.stack, st.stack.Functions[name])])["Environment"].(map[string]any)["Variables"].(map[string]any)
				env[name] = map[string]any{}
				for k, v := range vars {
					if strings.HasSuffix(k, "_SECRET_ARN") {
						t.Errorf("%s: %s: secrets are passed as *_SECRET_ID now", name, k)
					}
					if strings.HasSuffix(k, "_SECRET_ID") {
						env[name][k] = v
					}
				}
				if w := st.want[name]; w != nil && !slices.Equal(sortedKeys(keysOf(env[name])), w) {
					t.Errorf("%s reads secrets %v, want %v", name, sortedKeys(keysOf(env[name])), w)
				}
				stmts[name] = roleStatements(t, st.tpl, logicalID(st.stack, st.stack.Functions[name].Role()))
			}
			suffixes := []string{"AbCdEf", "secret", randomSuffix()}
			for _, name := range functionNames {
				for k, v := range env[name] {
					id := render(st.tpl, v)
					for _, arn := range evaluatedARNs(id, suffixes) {
						if !allows(st.tpl, stmts[name], "secretsmanager:GetSecretValue", arn) {
							t.Errorf("%s cannot read %s=%s: GetSecretValue is evaluated on %s", name, k, id, arn)
						}
						for _, other := range functionNames {
							if other == name || slices.ContainsFunc(valuesOf(env[other]), func(o any) bool { return render(st.tpl, o) == id }) {
								continue
							}
							if allows(st.tpl, stmts[other], "secretsmanager:GetSecretValue", arn) {
								t.Errorf("%s can read %s's secret %s (%s)", other, name, k, arn)
							}
						}
					}
				}
			}
		})
	}
	// The complete ARNs are granted as they are, and passed as they are.
	consumer := propsOf(resources(f.acctMap, "AWS::Lambda::Function")[logicalID(f.acct, f.acct.Functions[fnConsumer])])
	if got := consumer["Environment"].(map[string]any)["Variables"].(map[string]any)["PAYOUT_SIGNING_SECRET_ID"]; got != acctSettings.PayoutSecretName {
		t.Errorf("PAYOUT_SIGNING_SECRET_ID %v, want %s", got, acctSettings.PayoutSecretName)
	}
	for fn, v := range map[string]struct{ name, want string }{
		fnConsumer: {"ORDERS_SIGNING_SECRET_ID", acctSettings.OrdersSecretName},
		fnEnqueue:  {"PAYMENTS_WEBHOOK_SECRET_ID", acctSettings.PaymentsSecretName},
	} {
		vars := propsOf(resources(f.acctMap, "AWS::Lambda::Function")[logicalID(f.acct, f.acct.Functions[fn])])["Environment"].(map[string]any)["Variables"].(map[string]any)
		if got := vars[v.name]; got != v.want {
			t.Errorf("%s %s %v, want %s", fn, v.name, got, v.want)
		}
	}
}

func keysOf(m map[string]any) map[string]bool {
	out := map[string]bool{}
	for k := range m {
		out[k] = true
	}
	return out
}

func valuesOf(m map[string]any) []any {
	var out []any
	for _, v := range m {
		out = append(out, v)
	}
	return out
}

// alarmsByID are the template's alarms by logical id.
func alarmsByID(tpl map[string]any) map[string]map[string]any {
	out := map[string]map[string]any{}
	for id, r := range resources(tpl, "AWS::CloudWatch::Alarm") {
		out[id] = propsOf(r)
	}
	return out
}

// alarmIDs: an alarm's logical id is its construct id (a top-level
// construct) followed by the CDK's hash.
func alarmProps(t *testing.T, tpl map[string]any, id string) map[string]any {
	t.Helper()
	for lid, p := range alarmsByID(tpl) {
		if regexp.MustCompile("^" + id + "[0-9A-F]{8}$").MatchString(lid) {
			return p
		}
	}
	t.Fatalf("no alarm %s", id)
	return nil
}

func TestNewAlarms(t *testing.T) {
	f := stacks(t)
	tpl := f.defMap
	metric := func(p map[string]any) string {
		return mustJSON(map[string]any{"ns": p["Namespace"], "name": p["MetricName"], "stat": p["Statistic"], "dims": p["Dimensions"]})
	}
	tests := []struct {
		id                 string
		namespace, name    string
		stat               string
		dims               []any
		threshold          float64
		periods, datapoint float64
		period             float64
		missing            string
	}{
		{"PollerFailuresAlarm", "Hourglass", metrics.PollerFailures, "Sum", nil, 0, 1, 0, 60, "notBreaching"},
		{"ReconcilerRepairsAlarm", "Hourglass", metrics.Reconciled, "Sum", nil, 0, 1, 0, 60, "notBreaching"},
		{"ApiServerErrorsAlarm", "AWS/ApiGateway", "5xx", "Sum",
			[]any{props{"Name": "ApiId", "Value": ref(logicalID(f.def, f.def.Api))}}, 0, 5, 3, 60, "notBreaching"},
		{"FinanceDeliveryFailuresAlarm", "AWS/SNS", "NumberOfNotificationsFailed", "Sum",
			[]any{props{"Name": "TopicName", "Value": getAtt(logicalID(f.def, f.def.FinanceTopic), "TopicName")}}, 0, 1, 0, 60, "notBreaching"},
		{"DeadLetterQueueAgeAlarm", "AWS/SQS", "ApproximateAgeOfOldestMessage", "Maximum",
			[]any{props{"Name": "QueueName", "Value": getAtt(logicalID(f.def, f.def.DeadLetterQueue), "QueueName")}}, 3 * 24 * 3600, 1, 0, 300, "notBreaching"},
		{"FinanceDeadLetterQueueAlarm", "AWS/SQS", "ApproximateNumberOfMessagesVisible", "Maximum",
			[]any{props{"Name": "QueueName", "Value": getAtt(logicalID(f.def, f.def.FinanceDeadLetterQueue), "QueueName")}}, 0, 1, 0, 60, "notBreaching"},
		{"PayoutsUnresolvedAlarm", "Hourglass", metrics.PayoutsUnresolved, "Sum", nil, 0, 1, 0, 60, "notBreaching"},
		// Order events undelivered, and expiries of unpaid orders that fail.
		{"OrderEventDeliveryFailuresAlarm", "AWS/SNS", "NumberOfNotificationsFailed", "Sum",
			[]any{props{"Name": "TopicName", "Value": getAtt(logicalID(f.def, f.def.OrdersTopic), "TopicName")}}, 0, 1, 0, 60, "notBreaching"},
		{"OrdersDeadLetterQueueAlarm", "AWS/SQS", "ApproximateNumberOfMessagesVisible", "Maximum",
			[]any{props{"Name": "QueueName", "Value": getAtt(logicalID(f.def, f.def.OrdersDeadLetterQueue), "QueueName")}}, 0, 1, 0, 60, "notBreaching"},
		{"OrderExpiryFailuresAlarm", "Hourglass", metrics.OrderExpiryFailures, "Sum", nil, 0, 1, 0, 60, "notBreaching"},
		// No invocations, no data: the heartbeat's silence is the alarm.
		{"PollerNotRunningAlarm", "AWS/Lambda", "Invocations", "Sum",
			[]any{props{"Name": "FunctionName", "Value": ref(logicalID(f.def, f.def.Functions[fnPoller]))}}, 1, 1, 0, 300, "breaching"},
	}
	for _, tt := range tests {
		t.Run(tt.id, func(t *testing.T) {
			p := alarmProps(t, tpl, tt.id)
			var dims any
			if tt.dims != nil {
				dims = tt.dims
			}
			want := map[string]any{"Namespace": tt.namespace, "MetricName": tt.name, "Statistic": tt.stat, "Dimensions": dims}
			if got, w := metric(p), metric(want); got != w {
				t.Errorf("metric %s, want %s", got, w)
			}
			cmpOp := "GreaterThanThreshold"
			if tt.id == "PollerNotRunningAlarm" {
				cmpOp = "LessThanThreshold"
			}
			if p["ComparisonOperator"] != cmpOp || p["Threshold"] != tt.threshold || p["EvaluationPeriods"] != tt.periods ||
				p["Period"] != tt.period || p["TreatMissingData"] != tt.missing {
				t.Errorf("alarm %s %v %v over %v x %v s, missing data %v; want %s %v over %v x %v s, %s",
					tt.id, p["ComparisonOperator"], p["Threshold"], p["EvaluationPeriods"], p["Period"], p["TreatMissingData"],
					cmpOp, tt.threshold, tt.periods, tt.period, tt.missing)
			}
			if dp, _ := p["DatapointsToAlarm"].(float64); dp != tt.datapoint {
				t.Errorf("DatapointsToAlarm %v, want %v", p["DatapointsToAlarm"], tt.datapoint)
			}
		})
	}
	// The DLQ's age alarm fires well before SQS drops the message: 14 days
	// from its first enqueue, of which the work queue keeps at most 4.
	if deadLetterAgeSeconds >= (14-4)*24*3600/2 {
		t.Errorf("dead-letter age threshold %d s leaves too little of the retention", deadLetterAgeSeconds)
	}
}

// TestEveryAlarmHasARunbookEntry: every alarm's description ends in the
// docs/operations.md section an on-call reads, and that section exists.
func TestEveryAlarmHasARunbookEntry(t *testing.T) {
	f, pf := stacks(t), profileStacks(t)
	doc, err := os.ReadFile(filepath.Join("..", "docs", "operations.md"))
	if err != nil {
		t.Fatal(err)
	}
	anchors := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^### (.+?)\s*$`).FindAllStringSubmatch(string(doc), -1) {
		anchors[strings.ToLower(m[1])] = true // GitHub's anchor of a one-word heading
	}
	suffix := regexp.MustCompile(`Runbook: docs/operations\.md#([a-z0-9-]+)$`)
	for _, tpl := range []map[string]any{f.defMap, f.optMap, f.acctMap, pf.slsMap} {
		for id, p := range alarmsByID(tpl) {
			desc, _ := p["AlarmDescription"].(string)
			m := suffix.FindStringSubmatch(desc)
			if m == nil {
				t.Errorf("alarm %s: description %q does not end in a runbook link", id, desc)
				continue
			}
			if !anchors[m[1]] {
				t.Errorf("alarm %s: docs/operations.md has no \"### \" heading for #%s", id, m[1])
			}
			want := strings.ToLower(regexp.MustCompile(`[0-9A-F]{8}$`).ReplaceAllString(id, ""))
			switch {
			case strings.HasPrefix(want, "redismemoryshard"):
				want = "redismemoryalarm"
			case slices.Contains([]string{"enqueueerrorsalarm", "seckillerrorsalarm", "pollererrorsalarm", "consumererrorsalarm", "operatorerrorsalarm"}, want):
				want = "functionerrorsalarm"
			}
			if m[1] != want {
				t.Errorf("alarm %s links #%s, want #%s", id, m[1], want)
			}
		}
	}
}

// TestDurableSubscribers: finance's topic and the orders topic each have a
// durable subscriber queue (raw delivery, retained, encrypted) and a
// dead-letter queue that is the queue's own and every subscription's
// redrive target.
func TestDurableSubscribers(t *testing.T) {
	f := stacks(t)
	for _, p := range []struct {
		name             string
		parts            func(*HourglassStack) (queue, dlq, topic constructs.IConstruct)
		defSubs, optSubs int // the options stack subscribes finance's e-mail too
	}{
		{"Finance", func(s *HourglassStack) (constructs.IConstruct, constructs.IConstruct, constructs.IConstruct) {
			return s.FinanceQueue, s.FinanceDeadLetterQueue, s.FinanceTopic
		}, 1, 2},
		{"Orders", func(s *HourglassStack) (constructs.IConstruct, constructs.IConstruct, constructs.IConstruct) {
			return s.OrdersQueue, s.OrdersDeadLetterQueue, s.OrdersTopic
		}, 1, 1},
	} {
		for _, st := range []struct {
			name  string
			stack *HourglassStack
			tpl   assertions.Template
			m     map[string]any
			subs  int
		}{{"default", f.def, f.defTpl, f.defMap, p.defSubs}, {"options", f.opt, f.optTpl, f.optMap, p.optSubs}} {
			t.Run(p.name+"/"+st.name, func(t *testing.T) {
				q, dlq, topic := p.parts(st.stack)
				durableSubscriber(t, st.stack, st.tpl, st.m, q, dlq, topic, st.subs, p.name)
			})
		}
	}
}

// durableSubscriber checks the durable path of one topic (name: the prefix
// of its outputs).
func durableSubscriber(t *testing.T, s *HourglassStack, tpl assertions.Template, m map[string]any,
	queue, dlq, topicC constructs.IConstruct, want int, name string) {
	t.Helper()
	key := getAtt(logicalID(s, s.DataKey), "Arn")
	fq, fdlq := logicalID(s, queue), logicalID(s, dlq)
	topic := ref(logicalID(s, topicC))
	queues := resources(m, "AWS::SQS::Queue")
	if got := mustJSON(propsOf(queues[fq])); got != mustJSON(props{
		"KmsMasterKeyId":         key,
		"MessageRetentionPeriod": 14 * 24 * 3600,
		"RedrivePolicy":          props{"deadLetterTargetArn": getAtt(fdlq, "Arn"), "maxReceiveCount": 5},
	}) {
		t.Errorf("%s queue %s", name, got)
	}
	// allowAll: a dead-letter queue says it is one (guard.go, CT.SQS.PR.1).
	if got := mustJSON(propsOf(queues[fdlq])); got != mustJSON(props{"KmsMasterKeyId": key, "MessageRetentionPeriod": 14 * 24 * 3600,
		"RedriveAllowPolicy": props{"redrivePermission": "allowAll"}}) {
		t.Errorf("%s dead-letter queue %s", name, got)
	}
	// Raw delivery into the queue, and every subscription
	// redrives what it cannot deliver.
	subs := resources(m, "AWS::SNS::Subscription")
	n := 0
	for id, r := range subs {
		p := propsOf(r)
		if mustJSON(p["TopicArn"]) != mustJSON(topic) {
			continue
		}
		n++
		if mustJSON(p["RedrivePolicy"]) != mustJSON(props{"deadLetterTargetArn": getAtt(fdlq, "Arn")}) {
			t.Errorf("subscription %s (%v) redrives to %s, want the %s dead-letter queue", id, p["Protocol"], mustJSON(p["RedrivePolicy"]), name)
		}
	}
	if n != want {
		t.Errorf("%d %s subscriptions, want %d", n, name, want)
	}
	hasProps(t, tpl, "AWS::SNS::Subscription", props{
		"Protocol": "sqs", "TopicArn": topic, "Endpoint": getAtt(fq, "Arn"), "RawMessageDelivery": true,
	})
	// SNS may send to both queues, from its topic only, and
	// use the data key for it.
	for _, q := range []string{fq, fdlq} {
		hasProps(t, tpl, "AWS::SQS::QueuePolicy", props{
			"Queues": arrayWith(ref(q)),
			"PolicyDocument": like(props{"Statement": arrayWith(like(props{
				"Effect": "Allow", "Action": "sqs:SendMessage", "Principal": props{"Service": "sns.amazonaws.com"},
				"Condition": props{"ArnEquals": props{"aws:SourceArn": topic}},
			}))}),
		})
		hasProps(t, tpl, "AWS::SQS::QueuePolicy", props{
			"Queues": arrayWith(ref(q)),
			"PolicyDocument": like(props{"Statement": arrayWith(like(props{
				"Effect": "Deny", "Principal": props{"AWS": "*"}, "Condition": props{"Bool": props{"aws:SecureTransport": "false"}},
			}))}),
		})
	}
	hasProps(t, tpl, "AWS::KMS::Key", props{
		"KeyPolicy": like(props{"Statement": arrayWith(like(props{
			"Sid": "SnsToSubscriberQueues", "Effect": "Allow", "Principal": props{"Service": "sns.amazonaws.com"},
			"Action": []any{"kms:Decrypt", "kms:GenerateDataKey"}, "Resource": "*",
			"Condition": props{"StringEquals": props{"aws:SourceAccount": ref("AWS::AccountId")}},
		}))}),
	})
	for _, out := range []string{name + "QueueUrl", name + "DeadLetterQueueUrl", name + "TopicArn"} {
		check(t, "output "+out, func() { tpl.HasOutput(jsii.String(out), assertions.Match_AnyValue()) })
	}
}

// TestWebhooksOfTheConsumer: finance's and the order events' webhooks are
// the consumer's alone, with their signing secrets, and their own ports.
func TestWebhooksOfTheConsumer(t *testing.T) {
	f := stacks(t)
	// Finance's webhook: the consumer's URL and signing secret, and a port
	// of its own opened when it is neither the provider's nor 443.
	env := func(st *HourglassStack, m map[string]any) map[string]any {
		return propsOf(resources(m, "AWS::Lambda::Function")[logicalID(st, st.Functions[fnConsumer])])["Environment"].(map[string]any)["Variables"].(map[string]any)
	}
	if e := env(f.def, f.defMap); e["FINANCE_WEBHOOK_URL"] != nil || e["FINANCE_SIGNING_SECRET_ID"] != nil {
		t.Errorf("default consumer has a finance webhook: %v %v", e["FINANCE_WEBHOOK_URL"], e["FINANCE_SIGNING_SECRET_ID"])
	}
	if e := env(f.opt, f.optMap); e["FINANCE_WEBHOOK_URL"] != "https://finance.example.org/v1/payouts" || e["FINANCE_SIGNING_SECRET_ID"] != "finance/webhook-abcdef" {
		t.Errorf("finance webhook %v, secret %v", e["FINANCE_WEBHOOK_URL"], e["FINANCE_SIGNING_SECRET_ID"])
	}
	// The order events go to the topic always (the consumer runs their
	// outbox), and to the webhook when one is set.
	for _, st := range []struct {
		stack       *HourglassStack
		m           map[string]any
		url, secret any
	}{
		{f.def, f.defMap, nil, nil},
		{f.opt, f.optMap, "https://orders.example.org/v1/events", "orders/webhook"},
	} {
		e := env(st.stack, st.m)
		if e["ORDERS_WEBHOOK_URL"] != st.url || e["ORDERS_SIGNING_SECRET_ID"] != st.secret {
			t.Errorf("orders webhook %v, secret %v; want %v, %v", e["ORDERS_WEBHOOK_URL"], e["ORDERS_SIGNING_SECRET_ID"], st.url, st.secret)
		}
		if mustJSON(e["ORDERS_TOPIC_ARN"]) != mustJSON(ref(logicalID(st.stack, st.stack.OrdersTopic))) {
			t.Errorf("ORDERS_TOPIC_ARN %v, want the orders topic", e["ORDERS_TOPIC_ARN"])
		}
		for _, fn := range []string{fnEnqueue, fnSeckill, fnPoller} {
			vars := propsOf(resources(st.m, "AWS::Lambda::Function")[logicalID(st.stack, st.stack.Functions[fn])])["Environment"].(map[string]any)["Variables"].(map[string]any)
			for _, v := range []string{"ORDERS_TOPIC_ARN", "ORDERS_WEBHOOK_URL", "ORDERS_SIGNING_SECRET_ID"} {
				if vars[v] != nil {
					t.Errorf("%s has %s: only the consumer publishes order events", fn, v)
				}
			}
		}
	}
	// The consumer's security group opens the provider's 8443, finance's
	// 9443 and the order events' 7443 (every port: TestSecurityGroups).
	hasProps(t, f.acctTpl, "AWS::EC2::SecurityGroup", props{
		"GroupDescription": assertions.Match_StringLikeRegexp(jsii.String("^Hourglass consumer function")),
		"SecurityGroupEgress": arrayWith(
			like(props{"CidrIp": "0.0.0.0/0", "IpProtocol": "tcp", "FromPort": 9443, "ToPort": 9443, "Description": "Finance webhook over TLS"}),
			like(props{"CidrIp": "0.0.0.0/0", "IpProtocol": "tcp", "FromPort": 7443, "ToPort": 7443, "Description": "Order events webhook over TLS"}),
		),
	})
}

// TestQueuesAreRetained: no queue goes with the stack, and the dead-letter
// queues keep messages longer than the work queue.
func TestQueuesAreRetained(t *testing.T) {
	f := stacks(t)
	count(t, f.defTpl, "AWS::SQS::Queue", 6)
	for id, r := range resources(f.defMap, "AWS::SQS::Queue") {
		if r["DeletionPolicy"] != "Retain" || r["UpdateReplacePolicy"] != "Retain" {
			t.Errorf("queue %s: DeletionPolicy %v, UpdateReplacePolicy %v; want Retain", id, r["DeletionPolicy"], r["UpdateReplacePolicy"])
		}
		p := propsOf(r)
		if p["KmsMasterKeyId"] == nil {
			t.Errorf("queue %s is not encrypted with the data key", id)
		}
	}
	retention := func(q string) any {
		return propsOf(resources(f.defMap, "AWS::SQS::Queue")[q])["MessageRetentionPeriod"]
	}
	if got := retention(logicalID(f.def, f.def.WorkQueue)); got != float64(4*24*3600) {
		t.Errorf("work queue keeps messages %v s, want 4 days", got)
	}
	if got := retention(logicalID(f.def, f.def.DeadLetterQueue)); got != float64(14*24*3600) {
		t.Errorf("dead-letter queue keeps messages %v s, want 14 days", got)
	}
}

func TestRedisGroupID(t *testing.T) {
	valid := regexp.MustCompile(`^[a-z][a-z0-9]*(-[a-z0-9]+)*$`)
	tests := []struct{ stack, want string }{
		{"Hourglass", "hourglass"},
		{"HourglassOptions", "hourglassoptions"},
		{"hourglass-staging-", ""},
		// Only lower-cased, like the ids deployed stacks have (changing
		// an id replaces the cluster): ElastiCache ids ignore case anyway.
		{"Hourglass-Staging", "hourglass-staging"},
		{acctStackName, ""},
		{"A--B", ""},
		{"a-", ""},
		{strings.Repeat("h", 40), strings.Repeat("h", 40)},
		{strings.Repeat("h", 41), ""},
		{strings.Repeat("h", 40) + "-", ""},
		{strings.Repeat("h", 31) + "-" + strings.Repeat("x", 20), ""},
	}
	seen := map[string]string{}
	for _, tt := range tests {
		got := redisGroupID(tt.stack)
		if len(got) < 1 || len(got) > 40 || !valid.MatchString(got) {
			t.Errorf("redisGroupID(%q) = %q: not a valid ElastiCache id", tt.stack, got)
		}
		if tt.want != "" && got != tt.want {
			t.Errorf("redisGroupID(%q) = %q, want %q", tt.stack, got, tt.want)
		}
		if other, ok := seen[got]; ok {
			t.Errorf("stacks %q and %q share the id %q", other, tt.stack, got)
		}
		seen[got] = tt.stack
	}
	// In the template: one app, three stacks, three groups.
	f := stacks(t)
	ids := map[string]bool{}
	for _, m := range []map[string]any{f.defMap, f.optMap, f.acctMap} {
		for _, r := range resources(m, "AWS::ElastiCache::ReplicationGroup") {
			id := propsOf(r)["ReplicationGroupId"].(string)
			if !valid.MatchString(id) || len(id) > 40 {
				t.Errorf("ReplicationGroupId %q is not valid", id)
			}
			ids[id] = true
		}
	}
	if len(ids) != 3 {
		t.Errorf("replication group ids %v, want three distinct", sortedKeys(ids))
	}
	// The alarms name the nodes of the acct stack's group.
	want := redisGroupID(acctStackName) + "-0001-001"
	if !strings.Contains(mustJSON(f.acctMap["Resources"]), `"`+want+`"`) {
		t.Errorf("no alarm names node %s", want)
	}
}

// TestReservedConcurrency: the poller's reservation, and the caps of the
// two API functions (a flash sale must not take the concurrency the poller
// and the consumer need), are context values, off by default.
func TestReservedConcurrency(t *testing.T) {
	f := stacks(t)
	for _, st := range []struct {
		stack *HourglassStack
		m     map[string]any
		want  map[string]any
	}{{f.def, f.defMap, nil}, {f.opt, f.optMap, map[string]any{fnPoller: 2.0, fnEnqueue: 40.0, fnSeckill: 200.0}}} {
		byID := map[string]string{}
		for _, name := range functionNames {
			byID[logicalID(st.stack, st.stack.Functions[name])] = name
		}
		for id, r := range resources(st.m, "AWS::Lambda::Function") {
			if got, want := propsOf(r)["ReservedConcurrentExecutions"], st.want[byID[id]]; got != want {
				t.Errorf("%s %s reserves %v, want %v", *st.stack.Stack.StackName(), id, got, want)
			}
		}
	}
	for key, field := range map[string]func(Settings) int{
		ctxPollerReserved:  func(s Settings) int { return s.PollerReservedConcurrency },
		ctxEnqueueReserved: func(s Settings) int { return s.EnqueueReservedConcurrency },
		ctxSeckillReserved: func(s Settings) int { return s.SeckillReservedConcurrency },
	} {
		for _, tt := range []struct {
			v       any
			want    int
			wantErr bool
		}{{nil, 0, false}, {0.0, 0, false}, {"1", 1, false}, {1000.0, 1000, false}, {"1001", 0, true}, {-1.0, 0, true}, {"two", 0, true}} {
			s, err := SettingsFrom(func(k string) any {
				if k == key {
					return tt.v
				}
				return nil
			})
			if (err != nil) != tt.wantErr || (err == nil && field(s) != tt.want) {
				t.Errorf("%s %v: %d, %v; want %d (error %v)", key, tt.v, field(s), err, tt.want, tt.wantErr)
			}
		}
	}
}

// TestConsumerTimeoutCoversAnAttempt: the consumer's timeout leaves the
// documented worst case of a payout attempt a margin, with the provider
// call's bound set in the function as the stack computed it.
func TestConsumerTimeoutCoversAnAttempt(t *testing.T) {
	f := stacks(t)
	for _, st := range []struct {
		stack *HourglassStack
		m     map[string]any
	}{{f.def, f.defMap}, {f.opt, f.optMap}} {
		p := propsOf(resources(st.m, "AWS::Lambda::Function")[logicalID(st.stack, st.stack.Functions[fnConsumer])])
		vars := p["Environment"].(map[string]any)["Variables"].(map[string]any)
		call, err := time.ParseDuration(fmt.Sprint(vars["PAYOUT_TIMEOUT"]))
		if err != nil {
			t.Fatalf("PAYOUT_TIMEOUT %v: %v", vars["PAYOUT_TIMEOUT"], err)
		}
		worst := 2*call + 5*time.Second
		timeout := time.Duration(p["Timeout"].(float64)) * time.Second
		if margin := timeout - worst; margin < 15*time.Second {
			t.Errorf("consumer timeout %s leaves %s after an attempt's worst case (%s), want at least 15 s", timeout, margin, worst)
		}
	}
}

// TestNatAddressesAreOutputs: each NAT gateway's public IP is an output,
// for the payout provider's allowlist.
func TestNatAddressesAreOutputs(t *testing.T) {
	f := stacks(t)
	for _, st := range []struct {
		stack *HourglassStack
		m     map[string]any
	}{{f.def, f.defMap}, {f.opt, f.optMap}} {
		eips := resources(st.m, "AWS::EC2::EIP")
		outs := st.m["Outputs"].(map[string]any)
		n := 0
		for name, o := range outs {
			if !strings.HasPrefix(name, "NatPublicIp") {
				continue
			}
			n++
			v := o.(map[string]any)["Value"].(map[string]any)["Fn::GetAtt"].([]any)
			if _, ok := eips[v[0].(string)]; !ok || v[1] != "PublicIp" {
				t.Errorf("%s is %v, not a NAT gateway's address", name, v)
			}
		}
		if n != len(eips) || n != st.stack.settings.Profile.NatGateways {
			t.Errorf("%s: %d NAT address outputs, %d addresses, %d NAT gateways", *st.stack.Stack.StackName(), n, len(eips), st.stack.settings.Profile.NatGateways)
		}
	}
}

func TestJWTAudienceIsRequired(t *testing.T) {
	if !slices.Contains(DefaultSettings().Placeholders(), ctxJWTAudience) {
		t.Errorf("the default jwtAudience is not a placeholder: %v", DefaultSettings().Placeholders())
	}
	f := stacks(t)
	warnings := assertions.Annotations_FromStack(f.def.Stack).FindWarning(jsii.String("*"),
		assertions.Match_StringLikeRegexp(jsii.String("context jwtAudience is a placeholder")))
	if len(*warnings) != 1 {
		t.Errorf("%d placeholder warnings for jwtAudience, want 1", len(*warnings))
	}
	if _, err := SettingsFrom(func(key string) any {
		if key == ctxJWTAudience {
			return " "
		}
		return nil
	}); err == nil || !strings.Contains(err.Error(), ctxJWTAudience) {
		t.Errorf("an empty jwtAudience: %v", err)
	}
}

func TestAdminRoleArns(t *testing.T) {
	f := stacks(t)
	adminFns := map[string]bool{fnEnqueue: true, fnSeckill: true, fnOperator: true}
	for _, st := range []struct {
		stack *HourglassStack
		m     map[string]any
		want  string
	}{
		{f.def, f.defMap, ""},
		{f.opt, f.optMap, "arn:aws:iam::123456789012:role/ops/hourglass-operator"},
		{f.acct, f.acctMap, "arn:aws:iam::111122223333:role/operator,arn:aws-cn:iam::111122223333:role/team/break-glass"},
	} {
		for _, name := range functionNames {
			vars := propsOf(resources(st.m, "AWS::Lambda::Function")[logicalID(st.stack, st.stack.Functions[name])])["Environment"].(map[string]any)["Variables"].(map[string]any)
			got, ok := vars["HOURGLASS_ADMIN_ROLE_ARNS"]
			if ok != adminFns[name] || (ok && got != st.want) {
				t.Errorf("%s %s: HOURGLASS_ADMIN_ROLE_ARNS %v (set %v), want %q on the admin functions only",
					*st.stack.Stack.StackName(), name, got, ok, st.want)
			}
		}
	}
	if !slices.Equal(sortedKeys(adminFunctions()), sortedKeys(adminFns)) {
		t.Errorf("admin routes are served by %v", sortedKeys(adminFunctions()))
	}
	warn := func(st *HourglassStack) int {
		return len(*assertions.Annotations_FromStack(st.Stack).FindWarning(jsii.String("*"),
			assertions.Match_StringLikeRegexp(jsii.String("adminRoleArns is empty"))))
	}
	if warn(f.def) != 1 || warn(f.opt) != 0 {
		t.Errorf("admin-role warnings: %d without roles, %d with; want 1 and 0", warn(f.def), warn(f.opt))
	}
	for _, tt := range []struct {
		v       string
		want    []string
		wantErr bool
	}{
		{"", nil, false},
		{" arn:aws:iam::123456789012:role/a , arn:aws-us-gov:iam::123456789012:role/p/q/b,", []string{
			"arn:aws:iam::123456789012:role/a", "arn:aws-us-gov:iam::123456789012:role/p/q/b"}, false},
		{"arn:aws:iam::123456789012:user/alice", nil, true},
		{"arn:aws:iam::12345:role/a", nil, true},
		{"arn:aws:sts::123456789012:assumed-role/a/session", nil, true},
		{"operators", nil, true},
	} {
		s, err := SettingsFrom(func(key string) any {
			if key == ctxAdminRoleARNs {
				return tt.v
			}
			return nil
		})
		if (err != nil) != tt.wantErr || (err == nil && !slices.Equal(s.AdminRoleARNs, tt.want)) {
			t.Errorf("adminRoleArns %q: %v, %v; want %v (error %v)", tt.v, s.AdminRoleARNs, err, tt.want, tt.wantErr)
		}
	}
}

func TestSecretSettings(t *testing.T) {
	for _, tt := range []struct {
		v  string
		ok bool
	}{
		{"hourglass/a-secret-of-its-own", true},
		{"arn:aws:secretsmanager:eu-west-1:123456789012:secret:prod/payout-AbC123", true},
		{"arn:aws-cn:secretsmanager:cn-north-1:123456789012:secret:payout-AbC123", true},
		// A partial ARN: Secrets Manager might read it either way.
		{"arn:aws:secretsmanager:eu-west-1:123456789012:secret:prod/payout", false},
		{"arn:aws:secretsmanager:eu-west-1:1234:secret:prod/payout-AbC123", false},
		{"bad name", false},
	} {
		for _, key := range []string{ctxPayoutSecretName, ctxWebhookSecretName, ctxFinanceSecretName} {
			_, err := SettingsFrom(func(k string) any {
				if k == key {
					return tt.v
				}
				return nil
			})
			if (err == nil) != tt.ok {
				t.Errorf("%s=%q: error %v, want ok %v", key, tt.v, err, tt.ok)
			}
		}
	}
	if _, err := SettingsFrom(func(k string) any {
		if k == ctxFinanceWebhookURL {
			return "http://finance.example.org/hook"
		}
		return nil
	}); err == nil || !strings.Contains(err.Error(), ctxFinanceWebhookURL) {
		t.Errorf("a clear-text finance webhook: %v", err)
	}
	// One secret per channel: the same secret for two channels is refused,
	// finance's and the order events' only when their webhooks use them.
	for _, tt := range []struct {
		ctx  map[string]any
		want string // "" for no error
	}{
		{map[string]any{ctxWebhookSecretName: "hourglass/payout-signing-secret"}, ctxWebhookSecretName},
		{map[string]any{ctxPaymentsSecretName: "hourglass/payout-webhook"}, ctxPaymentsSecretName},
		{map[string]any{ctxFinanceSecretName: "hourglass/payments-webhook"}, ""},
		{map[string]any{ctxFinanceSecretName: "hourglass/payments-webhook", ctxFinanceWebhookURL: "https://f.example.org/h"}, ctxFinanceSecretName},
		{map[string]any{ctxOrdersSecretName: "shared", ctxFinanceSecretName: "shared",
			ctxOrdersWebhookURL: "https://o.example.org/h", ctxFinanceWebhookURL: "https://f.example.org/h"}, ctxOrdersSecretName},
	} {
		_, err := SettingsFrom(func(k string) any { return tt.ctx[k] })
		if (err == nil) != (tt.want == "") || (err != nil && !strings.Contains(err.Error(), tt.want+": names the same secret")) {
			t.Errorf("%v: %v, want an error on %q", tt.ctx, err, tt.want)
		}
	}
}

func TestTracingAndLogLevel(t *testing.T) {
	f := stacks(t)
	for _, name := range functionNames {
		fn := f.def.Functions[name]
		p := propsOf(resources(f.defMap, "AWS::Lambda::Function")[logicalID(f.def, fn)])
		if got := mustJSON(p["TracingConfig"]); got != `{"Mode":"Active"}` {
			t.Errorf("%s tracing %s, want Active", name, got)
		}
		lc := p["LoggingConfig"].(map[string]any)
		if lc["ApplicationLogLevel"] != "INFO" || lc["SystemLogLevel"] != "INFO" {
			t.Errorf("%s log levels %v/%v, want INFO", name, lc["ApplicationLogLevel"], lc["SystemLogLevel"])
		}
		stmts := roleStatements(t, f.defMap, logicalID(f.def, fn.Role()))
		for _, a := range xrayActions {
			if !allows(f.defMap, stmts, a, "*") {
				t.Errorf("%s cannot %s", name, a)
			}
		}
	}
}

// TestCdkJSONSetsTheRecommendedFeatureFlags: cdk.json has every flag `cdk
// init` writes for the pinned aws-cdk-lib, read from the jsii bundle of
// github.com/aws/aws-cdk-go/awscdk/v2 in the module cache.
func TestCdkJSONSetsTheRecommendedFeatureFlags(t *testing.T) {
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}} {{.Version}}", "github.com/aws/aws-cdk-go/awscdk/v2").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	dir, version, _ := strings.Cut(strings.TrimSpace(string(out)), " ")
	flags, err := recommendedFlags(filepath.Join(dir, "jsii", "aws-cdk-lib-"+strings.TrimPrefix(version, "v")+".tgz"))
	if err != nil {
		t.Fatal(err)
	}
	if len(flags) < 50 {
		t.Fatalf("only %d recommended flags in the bundle", len(flags))
	}
	ctx, err := fileContext("cdk.json")
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range flags {
		got, ok := ctx[k]
		if !ok {
			t.Errorf("cdk.json lacks %s (recommended: %s)", k, mustJSON(v))
		} else if mustJSON(got) != mustJSON(v) {
			t.Errorf("cdk.json sets %s to %s, recommended %s", k, mustJSON(got), mustJSON(v))
		}
	}
}

// recommendedFlags reads package/recommended-feature-flags.json from an
// aws-cdk-lib npm tarball.
func recommendedFlags(tgz string) (map[string]any, error) {
	f, err := os.Open(tgz)
	if err != nil {
		return nil, err
	}
	defer func() { _ = f.Close() }()
	gz, err := gzip.NewReader(f)
	if err != nil {
		return nil, err
	}
	tr := tar.NewReader(gz)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil, fmt.Errorf("%s has no recommended-feature-flags.json", tgz)
		}
		if err != nil {
			return nil, err
		}
		if h.Name == "package/recommended-feature-flags.json" {
			var flags map[string]any
			if err := json.NewDecoder(tr).Decode(&flags); err != nil {
				return nil, fmt.Errorf("%s: %w", h.Name, err)
			}
			return flags, nil
		}
	}
}
