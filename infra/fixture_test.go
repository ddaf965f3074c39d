package main

import (
	"archive/zip"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/assertions"
	"github.com/aws/constructs-go/constructs/v10"
	"github.com/aws/jsii-runtime-go"
)

// The stacks are synthesized once per test binary (a synthesis takes
// seconds of Node.js time) and every test reads the same templates.
var (
	fxOnce sync.Once
	fx     fixture
	fxDir  string
)

type fixture struct {
	// def is the stack as `make synth` builds it: settings from cdk.json.
	def    *HourglassStack
	defTpl assertions.Template
	defMap map[string]any
	// opt sets every optional setting to something else.
	opt    *HourglassStack
	optTpl assertions.Template
	optMap map[string]any
	// acct has a long, odd stack name, secrets given by complete ARN and
	// finance's webhook on its own port.
	acct    *HourglassStack
	acctTpl assertions.Template
	acctMap map[string]any
	// nagErrors and nagWarnings are cdk-nag's unsuppressed findings.
	nagErrors, nagWarnings []*string
	err                    error
}

// optSettings differ from the defaults in every optional setting.
var optSettings = func() Settings {
	s := DefaultSettings()
	s.JWTIssuer = "https://auth.example.org/realms/app"
	s.JWTAudience = "mobile"
	s.JWTScope = "payments/app"
	s.FinanceEmail = "finance@example.org"
	s.AlarmEmail = "ops@example.org"
	s.RedisNodeType = "cache.r7g.xlarge"
	s.RedisShards = 3
	s.QueueShards = 8
	s.PayoutURL = "https://pay.example.net:8443/v2/payouts"
	s.PayoutSecretName = "prod/payout-key"
	s.ConsumerMaxConcurrency = 50
	s.FinanceWebhookURL = "https://finance.example.org/v1/payouts"
	s.FinanceSecretName = "finance/webhook-abcdef"
	s.OrdersWebhookURL = "https://orders.example.org/v1/events"
	s.OrdersSecretName = "orders/webhook"
	s.PaymentsSecretName = "prod/payments-webhook"
	s.PollerReservedConcurrency = 2
	s.AdminRoleARNs = []string{"arn:aws:iam::123456789012:role/ops/hourglass-operator"}
	s.FinanceReaderARNs = []string{"arn:aws:iam::444455556666:role/finance/payout-reader"}
	s.OrdersReaderARNs = []string{"arn:aws:iam::123456789012:role/shipping"}
	s.EnqueueReservedConcurrency = 40
	s.SeckillReservedConcurrency = 200
	s.WebhookSourceCIDRs = []string{"203.0.113.0/24", "198.51.100.7/32", "2001:db8:1::/48"}
	return s
}()

// acctStackName is a valid CloudFormation stack name that is no valid
// ElastiCache id: too long, upper case, doubled and trailing hyphens.
const acctStackName = "Hourglass--Payments-EU-West-1--And-Flash-Sales--Production-"

// acctSettings name the operator's secrets by complete ARN, with the order
// events' webhook on a port of its own too.
var acctSettings = func() Settings {
	s := optSettings
	s.PayoutSecretName = "arn:aws:secretsmanager:eu-west-1:111122223333:secret:shared/payout-key-AbC123"
	s.PayoutWebhookSecretName = "arn:aws:secretsmanager:eu-west-1:111122223333:secret:shared/webhook-secret-Zz9Yx8"
	s.FinanceWebhookURL = "https://finance.example.org:9443/hook"
	s.FinanceSecretName = "finance"
	s.OrdersWebhookURL = "https://orders.example.org:7443/events"
	s.OrdersSecretName = "arn:aws:secretsmanager:eu-west-1:111122223333:secret:shared/orders-key-QwE456"
	s.PaymentsSecretName = "arn:aws:secretsmanager:eu-west-1:111122223333:secret:shared/payments-key-RtY789"
	s.AdminRoleARNs = []string{"arn:aws:iam::111122223333:role/operator", "arn:aws-cn:iam::111122223333:role/team/break-glass"}
	// One provider range, IPv4 only.
	s.WebhookSourceCIDRs = []string{"192.0.2.128/25"}
	return s
}()

func TestMain(m *testing.M) {
	if _, err := exec.LookPath("node"); err != nil {
		fmt.Fprintln(os.Stderr, "infra tests: the CDK runs on Node.js; put node (20 or later) on PATH")
		os.Exit(1)
	}
	code := m.Run()
	if fxDir != "" {
		if err := os.RemoveAll(fxDir); err != nil {
			fmt.Fprintln(os.Stderr, "infra: test fixtures left behind:", err)
		}
	}
	jsii.Close()
	os.Exit(code)
}

// stacks returns the synthesized fixture, building it on first use.
func stacks(t *testing.T) *fixture {
	t.Helper()
	fxOnce.Do(func() { fx = buildFixture() })
	if fx.err != nil {
		t.Fatal(fx.err)
	}
	return &fx
}

func buildFixture() (f fixture) {
	// The jsii runtime reports JavaScript errors as panics.
	defer func() {
		if r := recover(); r != nil {
			f.err = fmt.Errorf("synthesis: %v", r)
		}
	}()
	dir, err := os.MkdirTemp("", "hourglass-infra-")
	if err != nil {
		return fixture{err: err}
	}
	fxDir = dir
	code := filepath.Join(dir, "dist")
	for _, fn := range functionNames {
		if err := writeStandInZip(filepath.Join(code, fn, "function.zip")); err != nil {
			return fixture{err: err}
		}
	}
	ctx, err := fileContext("cdk.json")
	if err != nil {
		return fixture{err: err}
	}
	app := awscdk.NewApp(&awscdk.AppProps{Outdir: jsii.String(filepath.Join(dir, "cdk.out")), Context: &ctx})
	settings, err := SettingsFrom(func(key string) any { return app.Node().TryGetContext(jsii.String(key)) })
	if err != nil {
		return fixture{err: err}
	}
	if f.def, err = NewHourglassStack(app, stackName, &HourglassStackProps{Settings: settings, CodeDir: code}); err != nil {
		return fixture{err: err}
	}
	if f.opt, err = NewHourglassStack(app, "HourglassOptions", &HourglassStackProps{Settings: optSettings, CodeDir: code}); err != nil {
		return fixture{err: err}
	}
	if f.acct, err = NewHourglassStack(app, acctStackName, &HourglassStackProps{Settings: acctSettings, CodeDir: code}); err != nil {
		return fixture{err: err}
	}
	ApplyNag(app)

	f.defTpl = assertions.Template_FromStack(f.def.Stack, nil)
	f.defMap = *f.defTpl.ToJSON()
	f.optTpl = assertions.Template_FromStack(f.opt.Stack, nil)
	f.optMap = *f.optTpl.ToJSON()
	f.acctTpl = assertions.Template_FromStack(f.acct.Stack, nil)
	f.acctMap = *f.acctTpl.ToJSON()
	nag := assertions.Match_StringLikeRegexp(jsii.String("AwsSolutions-.*"))
	for _, st := range []*HourglassStack{f.def, f.opt, f.acct} {
		ann := assertions.Annotations_FromStack(st.Stack)
		for _, m := range *ann.FindError(jsii.String("*"), nag) {
			f.nagErrors = append(f.nagErrors, jsii.String(fmt.Sprintf("%s %s: %v", *st.Stack.StackName(), *m.Id, m.Entry.Data)))
		}
		for _, m := range *ann.FindWarning(jsii.String("*"), nag) {
			f.nagWarnings = append(f.nagWarnings, jsii.String(fmt.Sprintf("%s %s: %v", *st.Stack.StackName(), *m.Id, m.Entry.Data)))
		}
	}
	return f
}

// writeStandInZip writes a deployment package that is not a real function:
// the stack only hashes and copies it.
func writeStandInZip(path string) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	out, err := os.Create(path)
	if err != nil {
		return err
	}
	zw := zip.NewWriter(out)
	w, err := zw.Create("bootstrap")
	if err == nil {
		_, err = w.Write([]byte("stand-in for " + path))
	}
	if err == nil {
		err = zw.Close()
	}
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	return err
}

// check runs one assertions call, turning its panic (how the jsii runtime
// reports a failed match) into a test error.
func check(t *testing.T, what string, assertion func()) {
	t.Helper()
	defer func() {
		if r := recover(); r != nil {
			t.Errorf("%s:\n%v", what, r)
		}
	}()
	assertion()
}

// props builds the map a matcher takes.
type props = map[string]any

func like(p props) assertions.Matcher { return assertions.Match_ObjectLike(&p) }

func arrayWith(items ...any) assertions.Matcher { return assertions.Match_ArrayWith(&items) }

func hasProps(t *testing.T, tpl assertions.Template, typ string, p props) {
	t.Helper()
	check(t, typ+" "+mustJSON(p), func() { tpl.HasResourceProperties(jsii.String(typ), like(p)) })
}

func count(t *testing.T, tpl assertions.Template, typ string, n int) {
	t.Helper()
	check(t, fmt.Sprintf("%d of %s", n, typ), func() { tpl.ResourceCountIs(jsii.String(typ), jsii.Number(float64(n))) })
}

func mustJSON(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	return string(b)
}

// logicalID is the CloudFormation id of c's resource in st.
func logicalID(st *HourglassStack, c constructs.IConstruct) string {
	el, ok := c.(awscdk.CfnElement) // an L1 construct is its own resource
	if !ok {
		el, ok = c.Node().DefaultChild().(awscdk.CfnElement)
	}
	if !ok {
		panic(fmt.Sprintf("%s has no CloudFormation resource", *c.Node().Path()))
	}
	return *st.Stack.GetLogicalId(el)
}

func ref(id string) props { return props{"Ref": id} }

func getAtt(id, attr string) props { return props{"Fn::GetAtt": []any{id, attr}} }

// resources returns the template's resources of one type, by logical id.
func resources(tpl map[string]any, typ string) map[string]map[string]any {
	out := map[string]map[string]any{}
	for id, r := range tpl["Resources"].(map[string]any) {
		res := r.(map[string]any)
		if res["Type"] == typ {
			out[id] = res
		}
	}
	return out
}

func propsOf(res map[string]any) map[string]any {
	p, _ := res["Properties"].(map[string]any)
	return p
}

// aStack is one synthesized stack of the fixtures, by what sets it apart.
type aStack struct {
	name  string
	stack *HourglassStack
	tpl   map[string]any
}

// everyStack is every stack the policy and network tests evaluate: the
// default (cdk.json), every option set (with secrets by name and by
// complete ARN), the dev profile (-c profile=dev) and the serverless one.
func everyStack(t *testing.T) []aStack {
	t.Helper()
	f, p := stacks(t), profileStacks(t)
	return []aStack{
		{"default", f.def, f.defMap}, {"options", f.opt, f.optMap}, {"complete ARNs", f.acct, f.acctMap}, {"dev", p.dev, p.devMap},
		{"serverless", p.sls, p.slsMap}, {profileServerless6, p.sls6, p.sls6Map},
	}
}
