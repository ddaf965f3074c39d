package main

import (
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// webhookStack is one synthesized stack the webhook tests look at, with
// the allowlist it was given.
type webhookStack struct {
	name  string
	st    *HourglassStack
	tpl   map[string]any
	cidrs []string
}

// webhookStacks: the default stack, dev, and the two with every option
// (one allowlisting IPv4 and IPv6 ranges, one a single IPv4 range).
func webhookStacks(t *testing.T) []webhookStack {
	t.Helper()
	f, p := stacks(t), profileStacks(t)
	return []webhookStack{
		{"default", f.def, f.defMap, nil},
		{"dev", p.dev, p.devMap, nil},
		{"options", f.opt, f.optMap, optSettings.WebhookSourceCIDRs},
		{"account", f.acct, f.acctMap, acctSettings.WebhookSourceCIDRs},
	}
}

// only is the one resource of typ in tpl, by logical id.
func only(t *testing.T, tpl map[string]any, typ string) (string, map[string]any) {
	t.Helper()
	rs := resources(tpl, typ)
	if len(rs) != 1 {
		t.Fatalf("%d %s, want 1", len(rs), typ)
	}
	for id, r := range rs {
		return id, propsOf(r)
	}
	return "", nil
}

// restPath is the path of an AWS::ApiGateway::Resource, from the root.
func restPath(tpl map[string]any, id string) string {
	res := resources(tpl, "AWS::ApiGateway::Resource")
	var parts []string
	for {
		r, ok := res[id]
		if !ok {
			break
		}
		p := propsOf(r)
		parts = append([]string{p["PathPart"].(string)}, parts...)
		parent, _ := p["ParentId"].(map[string]any)
		id, _ = parent["Ref"].(string)
	}
	return "/" + strings.Join(parts, "/")
}

// TestWebhooksOnlyBehindTheFirewall: the providers' routes are on the
// REST API only, each a POST that needs the signature header, proxied to
// the enqueue function's live alias, which only this API's methods may
// invoke; the HTTP API has no way in to them.
func TestWebhooksOnlyBehindTheFirewall(t *testing.T) {
	for _, ws := range webhookStacks(t) {
		t.Run(ws.name, func(t *testing.T) {
			for _, r := range resources(ws.tpl, "AWS::ApiGatewayV2::Route") {
				if key := propsOf(r)["RouteKey"].(string); strings.Contains(key, "/webhooks/") {
					t.Errorf("the HTTP API serves %s", key)
				}
			}
			apiID, api := only(t, ws.tpl, "AWS::ApiGateway::RestApi")
			stageID, _ := only(t, ws.tpl, "AWS::ApiGateway::Stage")
			if got := mustJSON(api["EndpointConfiguration"]); got != `{"Types":["REGIONAL"]}` {
				t.Errorf("endpoint %s, want regional", got)
			}
			alias := logicalID(ws.st, ws.st.Aliases[fnEnqueue])
			var paths []string
			for _, m := range resources(ws.tpl, "AWS::ApiGateway::Method") {
				p := propsOf(m)
				if p["HttpMethod"] == "OPTIONS" {
					continue
				}
				path := restPath(ws.tpl, p["ResourceId"].(map[string]any)["Ref"].(string))
				paths = append(paths, p["HttpMethod"].(string)+" "+path)
				integ := p["Integration"].(map[string]any)
				if integ["Type"] != "AWS_PROXY" || integ["IntegrationHttpMethod"] != "POST" ||
					!strings.Contains(mustJSON(integ["Uri"]), mustJSON(ref(alias))) {
					t.Errorf("%s: integration %s, want a Lambda proxy to the enqueue alias %s", path, mustJSON(integ), alias)
				}
				if p["AuthorizationType"] != "NONE" || mustJSON(p["RequestParameters"]) != `{"method.request.header.X-Hourglass-Signature":true}` ||
					p["RequestValidatorId"] == nil {
					t.Errorf("%s: %s, want no authorizer and the signature header required", path, mustJSON(p))
				}
			}
			slices.Sort(paths)
			if want := []string{"POST /v1/webhooks/payments", "POST /v1/webhooks/payouts"}; !slices.Equal(paths, want) {
				t.Errorf("REST API methods %v, want %v", paths, want)
			}
			// Each permission names the alias and a SourceArn of this API.
			n := 0
			for _, perm := range resources(ws.tpl, "AWS::Lambda::Permission") {
				p := propsOf(perm)
				src := mustJSON(p["SourceArn"])
				if !strings.Contains(src, mustJSON(ref(apiID))) {
					continue
				}
				n++
				if mustJSON(p["FunctionName"]) != mustJSON(ref(alias)) || p["Principal"] != "apigateway.amazonaws.com" ||
					!strings.Contains(src, mustJSON(ref(stageID))+`,"/POST/v1/webhooks/pay`) {
					t.Errorf("permission %s, want the enqueue alias for this API's webhooks stage only", mustJSON(p))
				}
			}
			if n != len(webhookRoutes) {
				t.Errorf("%d invoke permissions for the REST API, want %d (no test-invoke)", n, len(webhookRoutes))
			}
			if _, ok := ws.tpl["Outputs"].(map[string]any)["WebhooksUrl"]; !ok {
				t.Error("no WebhooksUrl output")
			}
		})
	}
}

// TestWebhooksStage: the stage has a budget of its own per route, access
// logs like the HTTP API's, and errors logged without bodies.
func TestWebhooksStage(t *testing.T) {
	for _, ws := range webhookStacks(t) {
		t.Run(ws.name, func(t *testing.T) {
			_, stage := only(t, ws.tpl, "AWS::ApiGateway::Stage")
			if stage["StageName"] != webhooksStage || stage["TracingEnabled"] != true {
				t.Errorf("stage %v, want %s", stage["StageName"], webhooksStage)
			}
			logs := onlyID(t, ws.tpl, "AWS::Logs::LogGroup", "WebhooksAccessLogs")
			als := stage["AccessLogSetting"].(map[string]any)
			if !strings.Contains(mustJSON(als["DestinationArn"]), `"`+logs+`"`) || !strings.Contains(als["Format"].(string), `"requestId":"$context.requestId"`) {
				t.Errorf("access logs %s", mustJSON(als))
			}
			want := map[string]any{}
			for _, r := range webhookRoutes {
				want["POST /"+strings.ReplaceAll(r.path, "/", "~1")] = []float64{r.throttle.rate, r.throttle.burst}
			}
			got := map[string]any{}
			for _, m := range stage["MethodSettings"].([]any) {
				ms := m.(map[string]any)
				if ms["LoggingLevel"] != "ERROR" || ms["DataTraceEnabled"] != false || ms["MetricsEnabled"] != true {
					t.Errorf("method settings %s log more than errors", mustJSON(ms))
				}
				if ms["ResourcePath"] == "/*" {
					continue
				}
				got[ms["HttpMethod"].(string)+" "+ms["ResourcePath"].(string)] = []float64{ms["ThrottlingRateLimit"].(float64), ms["ThrottlingBurstLimit"].(float64)}
			}
			if d := cmp.Diff(want, got); d != "" {
				t.Errorf("route throttles (-want +got):\n%s", d)
			}
		})
	}
}

// wafIPSets are the addresses of each IP set, by logical id.
func wafIPSets(tpl map[string]any) map[string][]string {
	out := map[string][]string{}
	for id, r := range resources(tpl, "AWS::WAFv2::IPSet") {
		for _, a := range propsOf(r)["Addresses"].([]any) {
			out[id] = append(out[id], a.(string))
		}
	}
	return out
}

// wafMatches evaluates a WAF statement for a request from ip that is
// within every rate limit.
func wafMatches(t *testing.T, sets map[string][]string, st map[string]any, ip netip.Addr) bool {
	t.Helper()
	switch {
	case st["RateBasedStatement"] != nil:
		return false
	case st["OrStatement"] != nil:
		for _, s := range st["OrStatement"].(map[string]any)["Statements"].([]any) {
			if wafMatches(t, sets, s.(map[string]any), ip) {
				return true
			}
		}
		return false
	case st["IPSetReferenceStatement"] != nil:
		arn := st["IPSetReferenceStatement"].(map[string]any)["Arn"].(map[string]any)["Fn::GetAtt"].([]any)
		for _, c := range sets[arn[0].(string)] {
			if netip.MustParsePrefix(c).Contains(ip) {
				return true
			}
		}
		return false
	}
	t.Fatalf("a WAF statement the test cannot evaluate: %s", mustJSON(st))
	return false
}

// wafAdmits: whether the web ACL lets a request from ip through, when it
// is within the rate limit.
func wafAdmits(t *testing.T, tpl map[string]any, acl map[string]any, ip netip.Addr) bool {
	t.Helper()
	sets := wafIPSets(tpl)
	rules := acl["Rules"].([]any)
	slices.SortFunc(rules, func(a, b any) int {
		return int(a.(map[string]any)["Priority"].(float64) - b.(map[string]any)["Priority"].(float64))
	})
	for _, r := range rules {
		rule := r.(map[string]any)
		if wafMatches(t, sets, rule["Statement"].(map[string]any), ip) {
			_, allow := rule["Action"].(map[string]any)["Allow"]
			return allow
		}
	}
	_, allow := acl["DefaultAction"].(map[string]any)["Allow"]
	return allow
}

// resourcePolicyAdmits evaluates the REST API's resource policy for an
// anonymous caller invoking it from ip: an explicit deny wins, else an
// allow is needed. No policy leaves it to the API (public).
func resourcePolicyAdmits(t *testing.T, api map[string]any, ip netip.Addr) bool {
	t.Helper()
	pol, ok := api["Policy"].(map[string]any)
	if !ok {
		return true
	}
	allowed := false
	for _, s := range pol["Statement"].([]any) {
		st := s.(map[string]any)
		if st["Principal"] != "*" && mustJSON(st["Principal"]) != `{"AWS":"*"}` {
			t.Fatalf("a statement for %s: teach the evaluator", mustJSON(st["Principal"]))
		}
		if st["Action"] != "execute-api:Invoke" || st["Resource"] != "execute-api:/*" {
			t.Fatalf("a statement on %v %v: teach the evaluator", st["Action"], st["Resource"])
		}
		holds := true
		for op, keys := range mapOf(st["Condition"]) {
			for key, v := range keys.(map[string]any) {
				if key != "aws:SourceIp" {
					t.Fatalf("condition %s %s: teach the evaluator", op, key)
				}
				in := false
				for _, c := range toStrings(v) {
					in = in || netip.MustParsePrefix(c).Contains(ip)
				}
				switch op {
				case "IpAddress":
					holds = holds && in
				case "NotIpAddress":
					holds = holds && !in
				default:
					t.Fatalf("condition %s: teach the evaluator", op)
				}
			}
		}
		if !holds {
			continue
		}
		if st["Effect"] == "Deny" {
			return false
		}
		allowed = true
	}
	return allowed
}

func mapOf(v any) map[string]any {
	m, _ := v.(map[string]any)
	return m
}

func toStrings(v any) []string {
	if s, ok := v.(string); ok {
		return []string{s}
	}
	var out []string
	for _, x := range v.([]any) {
		out = append(out, x.(string))
	}
	return out
}

// TestWebhooksFirewall: a regional web ACL on the REST API's stage limits
// each source address per minute; with webhookSourceCidrs (and only then)
// it, and the API's resource policy, admit those ranges and no one else.
func TestWebhooksFirewall(t *testing.T) {
	addresses := []string{"203.0.113.9", "198.51.100.7", "198.51.100.8", "192.0.2.200", "192.0.2.1", "2001:db8:1::5", "2001:db8:2::5", "10.0.0.1"}
	for _, ws := range webhookStacks(t) {
		t.Run(ws.name, func(t *testing.T) {
			aclID, acl := only(t, ws.tpl, "AWS::WAFv2::WebACL")
			if acl["Scope"] != "REGIONAL" || mapOf(acl["VisibilityConfig"])["CloudWatchMetricsEnabled"] != true {
				t.Errorf("web ACL %s, want regional with metrics", mustJSON(acl))
			}
			_, assoc := only(t, ws.tpl, "AWS::WAFv2::WebACLAssociation")
			stageID, _ := only(t, ws.tpl, "AWS::ApiGateway::Stage")
			apiID, api := only(t, ws.tpl, "AWS::ApiGateway::RestApi")
			res := mustJSON(assoc["ResourceArn"])
			if mustJSON(assoc["WebACLArn"]) != mustJSON(getAtt(aclID, "Arn")) ||
				!strings.Contains(res, mustJSON(ref(apiID))) || !strings.Contains(res, mustJSON(ref(stageID))) || !strings.Contains(res, "/stages/") {
				t.Errorf("association %s, want the web ACL on stage %s of %s", mustJSON(assoc), stageID, apiID)
			}
			var rate map[string]any
			for _, r := range acl["Rules"].([]any) {
				if st := mapOf(mapOf(r)["Statement"])["RateBasedStatement"]; st != nil {
					rate = mapOf(r)
				}
			}
			if rate == nil || rate["Priority"] != 0.0 || mapOf(rate["Action"])["Block"] == nil {
				t.Fatalf("no blocking rate rule first: %s", mustJSON(acl["Rules"]))
			}
			if got := mustJSON(rate["Statement"]); got != mustJSON(props{"RateBasedStatement": props{
				"AggregateKeyType": "IP", "Limit": webhookSourceLimit, "EvaluationWindowSec": 60}}) {
				t.Errorf("rate rule %s", got)
			}
			if given := len(ws.cidrs) > 0; given != (len(resources(ws.tpl, "AWS::WAFv2::IPSet")) > 0) || given != (api["Policy"] != nil) ||
				given != (mapOf(acl["DefaultAction"])["Block"] != nil) {
				t.Errorf("allowlist given %t: IP sets %v, resource policy %s, default action %s", given,
					wafIPSets(ws.tpl), mustJSON(api["Policy"]), mustJSON(acl["DefaultAction"]))
			}
			for _, a := range addresses {
				ip := netip.MustParseAddr(a)
				want := len(ws.cidrs) == 0 || slices.ContainsFunc(ws.cidrs, func(c string) bool { return netip.MustParsePrefix(c).Contains(ip) })
				if got := wafAdmits(t, ws.tpl, acl, ip); got != want {
					t.Errorf("WAF admits %s: %t, want %t", a, got, want)
				}
				if got := resourcePolicyAdmits(t, api, ip); got != want {
					t.Errorf("resource policy admits %s: %t, want %t", a, got, want)
				}
			}
		})
	}
}

// TestWebhooksAlarm: the webhooks' 5xx page, and roll a bad enqueue
// release back.
func TestWebhooksAlarm(t *testing.T) {
	f := stacks(t)
	p := alarmProps(t, f.defMap, "WebhooksServerErrorsAlarm")
	_, api := only(t, f.defMap, "AWS::ApiGateway::RestApi")
	if p["Namespace"] != "AWS/ApiGateway" || p["MetricName"] != "5XXError" || p["Statistic"] != "Sum" ||
		mustJSON(p["Dimensions"]) != mustJSON([]any{props{"Name": "ApiName", "Value": api["Name"]}}) ||
		p["EvaluationPeriods"] != float64(apiServerErrorPeriods) || p["DatapointsToAlarm"] != float64(apiServerErrorDatapoints) {
		t.Errorf("WebhooksServerErrorsAlarm %s", mustJSON(p))
	}
	if !slices.Contains(canaried[fnEnqueue], "WebhooksServerErrorsAlarm") {
		t.Error("a release of enqueue does not roll back on the webhooks' 5xx")
	}
}

func TestWebhookSourceCIDRsSetting(t *testing.T) {
	get := func(v any) func(string) any {
		return func(key string) any {
			if key == ctxWebhookSourceCIDRs {
				return v
			}
			return nil
		}
	}
	s, err := SettingsFrom(get(" 203.0.113.0/24, 2001:db8::/32,,203.0.113.0/24 "))
	if err != nil || !slices.Equal(s.WebhookSourceCIDRs, []string{"203.0.113.0/24", "2001:db8::/32"}) {
		t.Errorf("got %v, %v", s.WebhookSourceCIDRs, err)
	}
	if s, err := SettingsFrom(get(nil)); err != nil || s.WebhookSourceCIDRs != nil {
		t.Errorf("absent: %v, %v", s.WebhookSourceCIDRs, err)
	}
	for bad, msg := range map[string]string{
		"203.0.113.7":        "not an address range",
		"203.0.113.7/24":     "did you mean 203.0.113.0/24",
		"0.0.0.0/0":          "admits every address",
		"::/0":               "admits every address",
		"example.com/24":     "not an address range",
		"::ffff:1.2.3.0/120": "not a plain",
	} {
		if _, err := SettingsFrom(get(bad)); err == nil || !strings.Contains(err.Error(), msg) || !strings.Contains(err.Error(), ctxWebhookSourceCIDRs) {
			t.Errorf("%q: %v, want %q", bad, err, msg)
		}
	}
	if _, err := SettingsFrom(get(5.0)); err == nil {
		t.Error("a number is taken")
	}
}
