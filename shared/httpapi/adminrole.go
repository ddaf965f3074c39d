package httpapi

import (
	"fmt"
	"net/http"
	"regexp"
	"strings"

	"github.com/aws/aws-lambda-go/events"
)

// AdminRole is an IAM role allowed on the admin routes in jwt mode, as
// HOURGLASS_ADMIN_ROLE_ARNS names it: arn:<partition>:iam::<account>:role/<path/>Name.
type AdminRole struct {
	Partition, Account, Name string
}

// roleARN is an IAM role ARN; the path, if any, is kept out of the name.
// Role names are 1-64 of [\w+=,.@-] (IAM's own rule).
var roleARN = regexp.MustCompile(`^arn:(aws|aws-cn|aws-us-gov):iam::(\d{12}):role/(?:[\x21-\x7e]*/)?([\w+=,.@-]{1,64})$`)

// assumedRole is what the caller of a signed request is when it assumed a
// role: arn:<partition>:sts::<account>:assumed-role/<Name>/<session>. STS
// leaves the role's path out.
var assumedRole = regexp.MustCompile(`^arn:(aws|aws-cn|aws-us-gov):sts::(\d{12}):assumed-role/([\w+=,.@-]{1,64})/[\w+=,.@-]{2,64}$`)

// ParseAdminRoles reads HOURGLASS_ADMIN_ROLE_ARNS's entries (already split
// at commas; blanks are skipped). An entry that is not an IAM role ARN is an
// error naming it: a typo must fail the cold start, not lock operators out
// (or let anyone in) at 3 a.m.
func ParseAdminRoles(arns []string) ([]AdminRole, error) {
	var out []AdminRole
	for _, a := range arns {
		a = strings.TrimSpace(a)
		if a == "" {
			continue
		}
		m := roleARN.FindStringSubmatch(a)
		if m == nil {
			return nil, fmt.Errorf("%q is not an IAM role ARN (arn:aws:iam::<account>:role/[<path>/]<name>)", a)
		}
		out = append(out, AdminRole{Partition: m[1], Account: m[2], Name: m[3]})
	}
	return out, nil
}

// adminRoleProblem checks, in jwt mode, that the IAM caller API Gateway
// authorized is one of the operator roles: the route's IAM authorization
// lets through any identity of the account with execute-api:Invoke, which
// is more than the operators. Account and role name decide; a role's path
// does not appear in the ARN of a session that assumed it.
func adminRoleProblem(iam *events.APIGatewayV2HTTPRequestContextAuthorizerIAMDescription, roles []AdminRole) *Problem {
	if len(roles) == 0 {
		return NewProblem(http.StatusForbidden, CodeAdminNotConfigured,
			"no operator role is configured (HOURGLASS_ADMIN_ROLE_ARNS, the stack's adminRoleArns context value, is empty): every admin call is refused")
	}
	m := assumedRole.FindStringSubmatch(iam.UserARN)
	if m != nil && (iam.AccountID == "" || iam.AccountID == m[2]) {
		for _, r := range roles {
			if r.Partition == m[1] && r.Account == m[2] && r.Name == m[3] {
				return nil
			}
		}
	}
	return NewProblem(http.StatusForbidden, CodeForbidden, "the caller is not one of the operator roles (HOURGLASS_ADMIN_ROLE_ARNS)")
}
