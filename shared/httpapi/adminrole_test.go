package httpapi_test

import (
	"strings"
	"testing"

	"github.com/aws/aws-lambda-go/events"

	"github.com/hourglass/hourglass/internal/redistest"
)

// fixtureAdminRole is the operator role the admin fixtures' caller
// (arn:aws:sts::123456789012:assumed-role/hourglass-operator/ops) assumed,
// as the stack's adminRoleArns names it: with its path.
const fixtureAdminRole = "arn:aws:iam::123456789012:role/ops/hourglass-operator"

// iamCaller makes the IAM caller of the request arn in account.
func iamCaller(arn, account string) mod {
	return func(ev *events.APIGatewayV2HTTPRequest) {
		ev.RequestContext.Authorizer = &events.APIGatewayV2HTTPRequestContextAuthorizerDescription{
			IAM: &events.APIGatewayV2HTTPRequestContextAuthorizerIAMDescription{
				AccessKey: "ASIAEXAMPLE", AccountID: account, CallerID: "AROAEXAMPLE:ops", UserARN: arn, UserID: "AROAEXAMPLE:ops",
			},
		}
	}
}

// TestAdminRolePinned: in jwt mode API Gateway's IAM authorization lets
// through any identity with execute-api:Invoke; the function lets only
// sessions of HOURGLASS_ADMIN_ROLE_ARNS's roles on, by account and role name
// (a session's ARN carries no role path). With no role configured every
// admin call is refused with admin_not_configured, naming the setting.
func TestAdminRolePinned(t *testing.T) {
	u := redistest.Start(t).URL()
	sp := loadSpec(t)
	forbidden := want{status: 403, code: "forbidden"}
	cases := []struct {
		name   string
		vars   map[string]string
		caller mod
		want   *want // nil: allowed
	}{
		{name: "the operator role, configured with its path", caller: iamCaller("arn:aws:sts::123456789012:assumed-role/hourglass-operator/ops", "123456789012")},
		{name: "the operator role, configured without a path", vars: map[string]string{"HOURGLASS_ADMIN_ROLE_ARNS": "arn:aws:iam::123456789012:role/hourglass-operator"},
			caller: iamCaller("arn:aws:sts::123456789012:assumed-role/hourglass-operator/alice", "123456789012")},
		{name: "second role of the list", vars: map[string]string{"HOURGLASS_ADMIN_ROLE_ARNS": "arn:aws:iam::123456789012:role/a, arn:aws:iam::210987654321:role/x/break-glass"},
			caller: iamCaller("arn:aws:sts::210987654321:assumed-role/break-glass/bob", "210987654321")},
		{name: "another role of the same account", caller: iamCaller("arn:aws:sts::123456789012:assumed-role/hourglass-deployer/ci", "123456789012"), want: &forbidden},
		{name: "a role whose name has the operator's as prefix", caller: iamCaller("arn:aws:sts::123456789012:assumed-role/hourglass-operator-x/ops", "123456789012"), want: &forbidden},
		{name: "the role's name in another account", caller: iamCaller("arn:aws:sts::999999999999:assumed-role/hourglass-operator/ops", "999999999999"), want: &forbidden},
		{name: "the role's ARN in another account's context", caller: iamCaller("arn:aws:sts::123456789012:assumed-role/hourglass-operator/ops", "999999999999"), want: &forbidden},
		{name: "an IAM user", caller: iamCaller("arn:aws:iam::123456789012:user/alice", "123456789012"), want: &forbidden},
		{name: "the account root", caller: iamCaller("arn:aws:iam::123456789012:root", "123456789012"), want: &forbidden},
		{name: "the role ARN itself", caller: iamCaller("arn:aws:iam::123456789012:role/ops/hourglass-operator", "123456789012"), want: &forbidden},
		{name: "an empty IAM context", caller: iamCaller("", ""), want: &forbidden},
		{name: "no IAM context", caller: noAuthorizer, want: &forbidden},
		{name: "no role configured", vars: map[string]string{"HOURGLASS_ADMIN_ROLE_ARNS": ""},
			caller: iamCaller("arn:aws:sts::123456789012:assumed-role/hourglass-operator/ops", "123456789012"),
			want:   &want{status: 403, code: "admin_not_configured"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := newStack(t, u, tc.vars)
			for _, p := range [][]byte{payload(t, "admin-stats", "", tc.caller), itemPayload(t, "seckill-preheat", "phone-admin", tc.caller)} {
				resp := sp.invoke(t, s, p, tc.want == nil)
				if tc.want == nil {
					wantStatus(t, resp, 200)
					continue
				}
				p := checkProblem(t, resp, *tc.want)
				if tc.want.code == "admin_not_configured" && (!strings.Contains(p.Detail, "HOURGLASS_ADMIN_ROLE_ARNS") || !strings.Contains(p.Detail, "adminRoleArns")) {
					t.Errorf("detail %q does not name HOURGLASS_ADMIN_ROLE_ARNS / adminRoleArns", p.Detail)
				}
			}
		})
	}
}
