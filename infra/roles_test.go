package main

import (
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/aws/constructs-go/constructs/v10"
)

// statement is one IAM policy statement, normalized.
type statement struct {
	effect    string
	actions   []string
	resources []any
	// inline names the role's inline policy holding it ("" for the
	// role's attached AWS::IAM::Policy).
	inline string
}

// roleStatements gathers every statement granted to a role: its inline
// policies and each AWS::IAM::Policy attached to it.
func roleStatements(t *testing.T, tpl map[string]any, roleID string) []statement {
	t.Helper()
	role, ok := resources(tpl, "AWS::IAM::Role")[roleID]
	if !ok {
		t.Fatalf("no role %s", roleID)
	}
	var out []statement
	if pols, ok := propsOf(role)["Policies"].([]any); ok {
		for _, p := range pols {
			pm := p.(map[string]any)
			out = append(out, statements(pm["PolicyDocument"], pm["PolicyName"].(string))...)
		}
	}
	for _, pol := range resources(tpl, "AWS::IAM::Policy") {
		for _, r := range propsOf(pol)["Roles"].([]any) {
			if mustJSON(r) == mustJSON(ref(roleID)) {
				out = append(out, statements(propsOf(pol)["PolicyDocument"], "")...)
			}
		}
	}
	return out
}

func statements(doc any, inline string) []statement {
	var out []statement
	for _, s := range asList(doc.(map[string]any)["Statement"]) {
		sm := s.(map[string]any)
		st := statement{effect: sm["Effect"].(string), resources: asList(sm["Resource"]), inline: inline}
		for _, a := range asList(sm["Action"]) {
			st.actions = append(st.actions, a.(string))
		}
		out = append(out, st)
	}
	return out
}

func asList(v any) []any {
	if l, ok := v.([]any); ok {
		return l
	}
	if v == nil {
		return nil
	}
	return []any{v}
}

// named is what a resource entry of a policy names: the logical ids it
// refers to (pseudo parameters aside) and its literal text.
func named(v any) (ids []string, literal string) {
	var walk func(any)
	walk = func(v any) {
		switch x := v.(type) {
		case string:
			literal += x
		case []any:
			for _, e := range x {
				walk(e)
			}
		case map[string]any:
			if r, ok := x["Ref"].(string); ok {
				if !strings.HasPrefix(r, "AWS::") {
					ids = append(ids, r)
				}
				return
			}
			if ga, ok := x["Fn::GetAtt"].([]any); ok {
				ids = append(ids, ga[0].(string))
				return
			}
			if j, ok := x["Fn::Join"].([]any); ok {
				walk(j[1])
				return
			}
			for _, e := range x {
				walk(e)
			}
		}
	}
	walk(v)
	return ids, literal
}

// TestRolesReachOnlyTheirOwnResources: each function's role names exactly
// the resources its function uses, and "*" only for the VPC network
// interfaces.
func TestRolesReachOnlyTheirOwnResources(t *testing.T) {
	f := stacks(t)
	st := f.def
	id := func(c constructs.IConstruct) string { return logicalID(st, c) }
	payoutSecret := ":secret:hourglass/payout-signing-secret-??????"
	// Passed by name (PAYOUT_WEBHOOK_SECRET_ID): Secrets Manager resolves
	// the name to the full ARN, which this pattern matches.
	webhookSecret := ":secret:hourglass/payout-webhook-??????"
	paymentsSecret := ":secret:hourglass/payments-webhook-??????"
	never := []string{"dynamodb:Scan", "dynamodb:CreateTable", "dynamodb:DeleteTable", "dynamodb:BatchWriteItem"}
	tests := []struct {
		fn   string
		want []string // logical ids, besides the function's own log group
		// actions that must appear, on the resources they must name
		must map[string][]string
		// actions that must not appear at all
		never []string
		// literal resources (ARNs built from names)
		literals []string
	}{
		{
			fn: fnEnqueue,
			// The orders table: a payment confirmation settles an order.
			want: []string{id(st.Withdrawals), id(st.Idempotency), id(st.Orders), id(st.RedisSecrets[fnEnqueue])},
			must: map[string][]string{
				"dynamodb:PutItem":              {id(st.Withdrawals), id(st.Idempotency)},
				"dynamodb:UpdateItem":           {id(st.Orders)},
				"dynamodb:Query":                {id(st.Withdrawals)},
				"secretsmanager:GetSecretValue": {id(st.RedisSecrets[fnEnqueue])},
			},
			never:    append([]string{"sqs:SendMessage", "sqs:ReceiveMessage", "sns:Publish", "kms:Decrypt"}, never...),
			literals: []string{webhookSecret, paymentsSecret},
		},
		{
			fn:    fnSeckill,
			want:  []string{id(st.RedisSecrets[fnSeckill])},
			must:  map[string][]string{"secretsmanager:GetSecretValue": {id(st.RedisSecrets[fnSeckill])}},
			never: append([]string{"sqs:SendMessage", "sqs:ReceiveMessage", "sns:Publish", "kms:Decrypt", "dynamodb:GetItem"}, never...),
		},
		{
			fn:   fnPoller,
			want: []string{id(st.Withdrawals), id(st.Orders), id(st.RedisSecrets[fnPoller]), id(st.WorkQueue), id(st.DataKey)},
			must: map[string][]string{
				"sqs:SendMessage": {id(st.WorkQueue)}, "kms:GenerateDataKey": {id(st.DataKey)},
				"dynamodb:Query": {id(st.Withdrawals)}, "secretsmanager:GetSecretValue": {id(st.RedisSecrets[fnPoller])},
			},
			never: append([]string{"sqs:ReceiveMessage", "sqs:DeleteMessage", "sns:Publish"}, never...),
		},
		{
			fn: fnConsumer,
			want: []string{id(st.Withdrawals), id(st.Orders), id(st.RedisSecrets[fnConsumer]), id(st.WorkQueue), id(st.DataKey),
				id(st.FinanceTopic), id(st.OrdersTopic)},
			must: map[string][]string{
				"sns:Publish": {id(st.FinanceTopic), id(st.OrdersTopic)}, "sqs:ReceiveMessage": {id(st.WorkQueue)}, "sqs:DeleteMessage": {id(st.WorkQueue)},
				"kms:Decrypt": {id(st.DataKey)}, "dynamodb:UpdateItem": {id(st.Withdrawals)}, "dynamodb:PutItem": {id(st.Orders)},
			},
			never:    append([]string{"sqs:SendMessage"}, never...),
			literals: []string{payoutSecret},
		},
		{
			// The operator commands: the ledger's withdrawals and orders
			// (payouts resolve, reconcile) and Redis; no queue, topic or key.
			fn:   fnOperator,
			want: []string{id(st.Withdrawals), id(st.Orders), id(st.RedisSecrets[fnOperator])},
			must: map[string][]string{
				"dynamodb:Query": {id(st.Withdrawals)}, "dynamodb:UpdateItem": {id(st.Withdrawals)},
				"secretsmanager:GetSecretValue": {id(st.RedisSecrets[fnOperator])},
			},
			never: append([]string{"sqs:SendMessage", "sqs:ReceiveMessage", "sns:Publish", "kms:Decrypt", "kms:GenerateDataKey"}, never...),
		},
	}
	for _, tt := range tests {
		t.Run(tt.fn, func(t *testing.T) {
			fn := st.Functions[tt.fn]
			role := id(fn.Role())
			if arns, ok := propsOf(resources(f.defMap, "AWS::IAM::Role")[role])["ManagedPolicyArns"]; ok {
				t.Errorf("role has managed policies %s", mustJSON(arns))
			}
			stmts := roleStatements(t, f.defMap, role)
			logs := id(st.LogGroups[tt.fn])
			want := append([]string{logs}, tt.want...)
			got := map[string]bool{}
			var literals []string
			byAction := map[string][]string{}
			for _, s := range stmts {
				if s.effect != "Allow" {
					continue
				}
				for _, r := range s.resources {
					if r == "*" {
						eni := s.inline == "vpc-network-interfaces" && sameSet(s.actions, eniActions)
						xray := s.inline == "" && sameSet(s.actions, xrayActions)
						if !eni && !xray {
							t.Errorf("Resource * on %v (policy %q): only the VPC network-interface and X-Ray actions may name *", s.actions, s.inline)
						}
						continue
					}
					ids, lit := named(r)
					for _, i := range ids {
						got[i] = true
						for _, a := range s.actions {
							byAction[a] = append(byAction[a], i)
						}
					}
					if len(ids) == 0 || strings.Contains(lit, ":secret:") {
						literals = append(literals, lit)
					}
				}
			}
			if g, w := sortedKeys(got), sorted(want); !slices.Equal(g, w) {
				t.Errorf("role reaches %v\nwant exactly %v", g, w)
			}
			for _, l := range tt.literals {
				if !slices.ContainsFunc(literals, func(s string) bool { return strings.HasSuffix(s, l) }) {
					t.Errorf("no grant on %s among %v", l, literals)
				}
			}
			for _, l := range literals {
				if !slices.ContainsFunc(tt.literals, func(s string) bool { return strings.HasSuffix(l, s) }) {
					t.Errorf("unexpected literal resource %q", l)
				}
			}
			for action, res := range tt.must {
				for _, r := range res {
					if !slices.Contains(byAction[action], r) {
						t.Errorf("%s not granted on %s (granted on %v)", action, r, byAction[action])
					}
				}
			}
			// A role that uses a ledger table may do some of what the
			// ledger's client can (its own, TestLedgerCallsAreGranted),
			// and nothing else.
			for _, s := range stmts {
				for _, a := range s.actions {
					if strings.HasPrefix(a, "dynamodb:") && !slices.Contains(ledgerActions, a) {
						t.Errorf("DynamoDB action %s is none of the ledger client's %v", a, ledgerActions)
					}
				}
				for _, r := range s.resources {
					if ids, lit := named(r); strings.Contains(lit, "/index/") &&
						(len(ids) != 1 || ids[0] != id(st.Withdrawals) || !slices.Contains([]string{"/index/by_user", "/index/by_state"}, lit)) {
						t.Errorf("index grant %s: want the withdrawals table's by_user and by_state by name", mustJSON(r))
					}
				}
			}
			for _, action := range tt.never {
				if _, ok := byAction[action]; ok {
					t.Errorf("%s granted (on %v); the function does not need it", action, byAction[action])
				}
			}
			if !slices.Contains(byAction["logs:PutLogEvents"], logs) {
				t.Errorf("cannot write to its log group %s", logs)
			}
		})
	}
}

// TestNoWildcardActions: no identity policy in the stack allows "*" or a
// whole service ("sqs:*"), and the functions' roles allow no action
// wildcard at all.
func TestNoWildcardActions(t *testing.T) {
	f := stacks(t)
	fnRoles := map[string]bool{}
	for _, fn := range f.def.Functions {
		fnRoles[logicalID(f.def, fn.Role())] = true
	}
	for roleID := range resources(f.defMap, "AWS::IAM::Role") {
		for _, s := range roleStatements(t, f.defMap, roleID) {
			if s.effect != "Allow" {
				continue
			}
			for _, a := range s.actions {
				if a == "*" || strings.HasSuffix(a, ":*") || (fnRoles[roleID] && strings.Contains(a, "*")) {
					t.Errorf("role %s allows %s", roleID, a)
				}
			}
		}
	}
}

func sameSet(a, b []string) bool { return slices.Equal(sorted(a), sorted(b)) }

func sorted(s []string) []string {
	c := slices.Clone(s)
	sort.Strings(c)
	return slices.Compact(c)
}

func sortedKeys(m map[string]bool) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return sorted(out)
}
