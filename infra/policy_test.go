package main

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/aws/constructs-go/constructs/v10"
)

// A caller of a resource: an AWS service acting for a resource (its
// request carries aws:SourceAccount and aws:SourceArn), or the role of
// one of the stack's functions.
type caller struct {
	name    string
	service string            // a service principal, e.g. cloudwatch.amazonaws.com
	role    string            // a role's logical id
	arn     string            // a role outside the stack, by ARN
	context map[string]string // the request's condition keys
}

// A statement of a resource policy (a topic's, a queue's, a key's).
type resourceStatement struct {
	sid, effect string
	principal   any
	actions     []string
	resources   []any
	condition   map[string]any
}

// resourcePolicy is the policy attached to the resource with logical id
// id: a key's own, or the AWS::SNS::TopicPolicy or AWS::SQS::QueuePolicy
// naming it.
func resourcePolicy(t *testing.T, tpl map[string]any, id string) []resourceStatement {
	t.Helper()
	var docs []any
	if key, ok := resources(tpl, "AWS::KMS::Key")[id]; ok {
		docs = append(docs, propsOf(key)["KeyPolicy"])
	}
	for typ, list := range map[string]string{"AWS::SNS::TopicPolicy": "Topics", "AWS::SQS::QueuePolicy": "Queues"} {
		for _, pol := range resources(tpl, typ) {
			ids, _ := named(propsOf(pol)[list])
			if slices.Contains(ids, id) {
				docs = append(docs, propsOf(pol)["PolicyDocument"])
			}
		}
	}
	var out []resourceStatement
	for _, doc := range docs {
		for _, s := range asList(doc.(map[string]any)["Statement"]) {
			sm := s.(map[string]any)
			for _, unsupported := range []string{"NotPrincipal", "NotAction", "NotResource"} {
				if _, ok := sm[unsupported]; ok {
					t.Fatalf("%s: a statement with %s: teach the evaluator", id, unsupported)
				}
			}
			st := resourceStatement{effect: sm["Effect"].(string), principal: sm["Principal"], resources: asList(sm["Resource"])}
			st.sid, _ = sm["Sid"].(string)
			st.condition, _ = sm["Condition"].(map[string]any)
			for _, a := range asList(sm["Action"]) {
				st.actions = append(st.actions, a.(string))
			}
			out = append(out, st)
		}
	}
	return out
}

// actionMatch: IAM compares actions ignoring case, with wildcards.
func actionMatch(patterns []string, action string) bool {
	return slices.ContainsFunc(patterns, func(p string) bool { return iamMatch(strings.ToLower(p), strings.ToLower(action)) })
}

// principalMatch reports whether a statement's principal names c itself
// (direct), or c's account, which lets the account's IAM policies decide.
func principalMatch(tpl map[string]any, p any, c caller) (direct, account bool) {
	if p == "*" {
		return true, false
	}
	pm, _ := p.(map[string]any)
	for _, s := range asList(pm["Service"]) {
		if c.service != "" && render(tpl, s) == c.service {
			direct = true
		}
	}
	for _, a := range asList(pm["AWS"]) {
		switch name := render(tpl, a); {
		case name == "*":
			direct = true
		case c.role != "" && name == arnOf("AWS::IAM::Role", c.role), c.arn != "" && name == c.arn:
			direct = true
		case c.role != "" && (name == testAccount || name == fmt.Sprintf("arn:%s:iam::%s:root", testPartition, testAccount)):
			account = true
		}
	}
	return direct, account
}

// conditionsHold evaluates a statement's Condition block against the
// request's keys. An operator the evaluator does not know fails the test.
func conditionsHold(t *testing.T, tpl map[string]any, cond map[string]any, ctx map[string]string) bool {
	t.Helper()
	for op, block := range cond {
		base, ifExists := strings.CutSuffix(op, "IfExists")
		for key, want := range block.(map[string]any) {
			got, ok := ctx[key]
			if !ok {
				if ifExists {
					continue
				}
				return false
			}
			var match func(w string) bool
			switch base {
			case "StringEquals", "Bool":
				match = func(w string) bool { return w == got }
			case "StringLike", "ArnLike", "ArnEquals":
				match = func(w string) bool { return iamMatch(w, got) }
			default:
				t.Fatalf("condition operator %s: teach the evaluator", op)
			}
			if !slices.ContainsFunc(asList(want), func(w any) bool { return match(render(tpl, w)) }) {
				return false
			}
		}
	}
	return true
}

// permitted evaluates one request the way AWS does within one account:
// an explicit Deny in any policy wins; a resource policy naming the caller
// grants it; a role is otherwise granted by its own policies, except on a
// KMS key, whose policy must also name the account (delegate to IAM).
// A service acting for a resource has no policies of its own here: only
// the resource policy can let it in.
func permitted(t *testing.T, tpl map[string]any, c caller, action, arn, resourceID string) bool {
	t.Helper()
	_, isKey := resources(tpl, "AWS::KMS::Key")[resourceID]
	var direct, account bool
	for _, st := range resourcePolicy(t, tpl, resourceID) {
		if !actionMatch(st.actions, action) || !conditionsHold(t, tpl, st.condition, c.context) {
			continue
		}
		if !slices.ContainsFunc(st.resources, func(r any) bool { return (isKey && r == "*") || iamMatch(render(tpl, r), arn) }) {
			continue
		}
		d, a := principalMatch(tpl, st.principal, c)
		switch {
		case !d && !a:
			continue
		case st.effect == "Deny":
			return false
		case d:
			direct = true
		default:
			account = true
		}
	}
	if c.role == "" {
		// A service, or a role whose own policies are not ours to know:
		// what this stack grants is what its resource policies grant.
		return direct
	}
	own := roleStatements(t, tpl, c.role)
	for _, s := range own {
		if s.effect == "Deny" && actionMatch(s.actions, action) {
			t.Fatalf("role %s denies %s: teach the evaluator", c.role, action)
		}
	}
	if direct {
		return true
	}
	return allows(tpl, own, action, arn) && (!isKey || account)
}

// encryptionKey is the logical id of the key a topic or queue encrypts with.
func encryptionKey(t *testing.T, tpl map[string]any, id string) string {
	t.Helper()
	res := tpl["Resources"].(map[string]any)[id].(map[string]any)
	ids, _ := named(propsOf(res)["KmsMasterKeyId"])
	if len(ids) != 1 {
		t.Fatalf("%s: encryption key %v", id, propsOf(res)["KmsMasterKeyId"])
	}
	return ids[0]
}

// delivers: c may send to a topic or queue and, since both are encrypted,
// have the key make and read the message's data key.
func delivers(t *testing.T, tpl map[string]any, c caller, action, id string) (bool, string) {
	t.Helper()
	typ := tpl["Resources"].(map[string]any)[id].(map[string]any)["Type"].(string)
	if !permitted(t, tpl, c, action, arnOf(typ, id), id) {
		return false, action + " refused"
	}
	key := encryptionKey(t, tpl, id)
	for _, a := range []string{"kms:GenerateDataKey", "kms:Decrypt"} {
		if !permitted(t, tpl, c, a, arnOf("AWS::KMS::Key", key), key) {
			return false, a + " on " + key + " refused"
		}
	}
	return true, "allowed"
}

// TestEveryPublisherCanPublish evaluates, on every stack, the topic and
// queue policies and the key policies behind them for each principal that
// must send (CloudWatch's alarm actions, the consumer, the poller, SNS
// delivering to the durable subscribers) and for ones that must not.
func TestEveryPublisherCanPublish(t *testing.T) {
	const otherAccount = "210987654321"
	for _, st := range everyStack(t) {
		t.Run(st.name, func(t *testing.T) {
			id := func(c constructs.IConstruct) string { return logicalID(st.stack, c) }
			tls := func(ctx map[string]string) map[string]string {
				ctx["aws:SecureTransport"] = "true"
				return ctx
			}
			role := func(fn string) caller {
				return caller{name: fn, role: id(st.stack.Functions[fn].Role()), context: tls(map[string]string{})}
			}
			alarms := caller{name: "this account's alarms", service: "cloudwatch.amazonaws.com", context: tls(map[string]string{
				"aws:SourceAccount": testAccount,
				"aws:SourceArn":     fmt.Sprintf("arn:aws:cloudwatch:%s:%s:alarm:%s-WithdrawalsDueLagAlarm-1A2B3C", testRegion, testAccount, *st.stack.Stack.StackName()),
			})}
			foreignAlarms := caller{name: "another account's alarms", service: "cloudwatch.amazonaws.com", context: tls(map[string]string{
				"aws:SourceAccount": otherAccount,
				"aws:SourceArn":     fmt.Sprintf("arn:aws:cloudwatch:%s:%s:alarm:anything", testRegion, otherAccount),
			})}
			snsFrom := func(topic string) caller {
				return caller{name: "SNS for " + topic, service: "sns.amazonaws.com", context: tls(map[string]string{
					"aws:SourceAccount": testAccount, "aws:SourceArn": arnOf("AWS::SNS::Topic", topic),
				})}
			}
			plain := role(fnConsumer)
			plain.name, plain.context = "consumer without TLS", map[string]string{"aws:SecureTransport": "false"}

			alarmTopic, finance, orders := id(st.stack.AlarmTopic), id(st.stack.FinanceTopic), id(st.stack.OrdersTopic)
			tests := []struct {
				resource string
				action   string
				must     []caller
				mustNot  []caller
			}{
				{alarmTopic, "sns:Publish", []caller{alarms}, []caller{foreignAlarms, role(fnConsumer), role(fnPoller)}},
				{finance, "sns:Publish", []caller{role(fnConsumer)},
					[]caller{role(fnPoller), role(fnEnqueue), role(fnSeckill), plain, alarms}},
				{orders, "sns:Publish", []caller{role(fnConsumer)},
					[]caller{role(fnPoller), role(fnEnqueue), role(fnSeckill), plain, alarms}},
				{id(st.stack.FinanceQueue), "sqs:SendMessage", []caller{snsFrom(finance)}, []caller{snsFrom(orders), role(fnEnqueue)}},
				{id(st.stack.OrdersQueue), "sqs:SendMessage", []caller{snsFrom(orders)}, []caller{snsFrom(finance), role(fnSeckill)}},
				{id(st.stack.WorkQueue), "sqs:SendMessage", []caller{role(fnPoller)},
					[]caller{role(fnEnqueue), role(fnSeckill), snsFrom(finance)}},
			}
			for _, tt := range tests {
				for _, c := range tt.must {
					if ok, why := delivers(t, st.tpl, c, tt.action, tt.resource); !ok {
						t.Errorf("%s cannot %s to %s: %s", c.name, tt.action, tt.resource, why)
					}
				}
				for _, c := range tt.mustNot {
					if ok, _ := delivers(t, st.tpl, c, tt.action, tt.resource); ok {
						t.Errorf("%s can %s to %s", c.name, tt.action, tt.resource)
					}
				}
			}
		})
	}
}

// TestReadersOfTheSubscriberQueues: the roles named by financeReaderArns
// and ordersReaderArns can take, delete and decrypt their own queue's
// messages (the key through SQS only), and nothing else.
func TestReadersOfTheSubscriberQueues(t *testing.T) {
	via := func(arn, service string) caller {
		ctx := map[string]string{"aws:SecureTransport": "true"}
		if service != "" {
			ctx["kms:ViaService"] = service
		}
		return caller{name: arn + " via " + service, arn: arn, context: ctx}
	}
	sqsService := "sqs." + testRegion + ".amazonaws.com"
	finance, orders := optSettings.FinanceReaderARNs[0], optSettings.OrdersReaderARNs[0]
	for _, s := range everyStack(t) {
		t.Run(s.name, func(t *testing.T) {
			st, tpl := s.stack, s.tpl
			if len(st.settings.FinanceReaderARNs) == 0 {
				// Without readers named (the default and dev stacks), no
				// one outside the stack is let in.
				for _, q := range []string{logicalID(st, st.FinanceQueue), logicalID(st, st.OrdersQueue)} {
					for _, reader := range []string{finance, orders} {
						if permitted(t, tpl, via(reader, ""), "sqs:ReceiveMessage", arnOf("AWS::SQS::Queue", q), q) {
							t.Errorf("%s lets %s read %s", s.name, reader, q)
						}
					}
				}
				return
			}
			dataKey := logicalID(st, st.DataKey)
			for _, tt := range []struct {
				reader, queue, other string
			}{
				{st.settings.FinanceReaderARNs[0], logicalID(st, st.FinanceQueue), logicalID(st, st.OrdersQueue)},
				{st.settings.OrdersReaderARNs[0], logicalID(st, st.OrdersQueue), logicalID(st, st.FinanceQueue)},
			} {
				for _, a := range readerActions {
					if !permitted(t, tpl, via(tt.reader, ""), a, arnOf("AWS::SQS::Queue", tt.queue), tt.queue) {
						t.Errorf("%s cannot %s on %s", tt.reader, a, tt.queue)
					}
					if permitted(t, tpl, via(tt.reader, ""), a, arnOf("AWS::SQS::Queue", tt.other), tt.other) {
						t.Errorf("%s can %s on %s, not its queue", tt.reader, a, tt.other)
					}
				}
				if permitted(t, tpl, via(tt.reader, ""), "sqs:SendMessage", arnOf("AWS::SQS::Queue", tt.queue), tt.queue) {
					t.Errorf("%s can send to %s", tt.reader, tt.queue)
				}
				keyARN := arnOf("AWS::KMS::Key", dataKey)
				if !permitted(t, tpl, via(tt.reader, sqsService), "kms:Decrypt", keyARN, dataKey) {
					t.Errorf("%s cannot decrypt its messages through SQS", tt.reader)
				}
				for _, c := range []caller{via(tt.reader, ""), via(tt.reader, "sns."+testRegion+".amazonaws.com")} {
					if permitted(t, tpl, c, "kms:Decrypt", keyARN, dataKey) {
						t.Errorf("%s can use the data key directly", c.name)
					}
				}
				if permitted(t, tpl, via(tt.reader, sqsService), "kms:GenerateDataKey", keyARN, dataKey) {
					t.Errorf("%s can encrypt with the data key", tt.reader)
				}
			}
		})
	}
}
