package httpapi

import (
	"net/http"
	"slices"
	"strings"

	"github.com/aws/aws-lambda-go/events"
)

// scopeProblem checks, in jwt mode, that the token API Gateway's authorizer
// accepted is an access token granting scope (when scope is set). An OpenID
// Connect ID token proves who someone is to the app that asked for it; it
// grants nothing, and it is easy to come by (any app of the issuer's users
// has one), so it must not open the user routes: Cognito marks it
// "token_use": "id" and gives it no scope claim.
func scopeProblem(jwt *events.APIGatewayV2HTTPRequestContextAuthorizerJWTDescription, scope string) *Problem {
	if use := jwt.Claims["token_use"]; use != "" && use != "access" {
		return NewProblem(http.StatusForbidden, CodeForbidden, "send an access token, not an ID token")
	}
	if scope == "" || hasScope(jwt, scope) {
		return nil
	}
	return NewProblem(http.StatusForbidden, CodeForbidden, "the access token does not grant the scope "+scope)
}

// hasScope reports whether a token grants scope, wherever API Gateway puts
// its scopes: the authorizer's own list (filled when the route requires
// scopes), the OAuth "scope" claim (space-separated), and "scp" (an array
// some issuers use, which reaches us flattened, e.g. "[a b]").
func hasScope(jwt *events.APIGatewayV2HTTPRequestContextAuthorizerJWTDescription, scope string) bool {
	if slices.Contains(jwt.Scopes, scope) {
		return true
	}
	for _, claim := range []string{"scope", "scp"} {
		for s := range strings.FieldsFuncSeq(strings.Trim(jwt.Claims[claim], "[]"), isScopeSeparator) {
			if s == scope {
				return true
			}
		}
	}
	return false
}

func isScopeSeparator(r rune) bool { return r == ' ' || r == ',' || r == '"' }
