package httpapi_test

import (
	"strings"
	"testing"

	"github.com/hourglass/hourglass/internal/redistest"
)

// TestRequestLogsHoldNoBodiesOrSecrets: what the API logs of a request, at
// INFO and above, is its line (method, route, status, duration, request
// id), never its body, its bearer token or an admin token.
func TestRequestLogsHoldNoBodiesOrSecrets(t *testing.T) {
	s := newStack(t, redistest.Start(t).URL(), nil)
	secrets := []string{"bank_secret_6222", "eyJhbGciOiJSUzI1NiJ9.secret-token", "admin-token-secret"}
	mods := []mod{key("logs-1"), header("authorization", "Bearer "+secrets[1]), header("x-admin-token", secrets[2])}
	s.invoke(t, payload(t, "withdrawal-create", "", append(mods,
		body(`{"amount":"1.00","currency":"CNY","destination":"bank_secret_6222"}`))...))
	s.invoke(t, payload(t, "withdrawal-create", "", append(mods,
		body(`{"amount":"1.00","currency":"CNY","destination":"bank_secret_6222","x":1}`))...))
	logs := s.log.String()
	if !strings.Contains(logs, `"msg":"request"`) {
		t.Fatalf("no request line logged:\n%s", logs)
	}
	for _, secret := range secrets {
		if strings.Contains(logs, secret) {
			t.Errorf("the logs hold %q:\n%s", secret, logs)
		}
	}
}
