package app_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-lambda-go/lambda"

	"github.com/hourglass/hourglass/internal/dynalitetest"
	"github.com/hourglass/hourglass/internal/redistest"
	"github.com/hourglass/hourglass/shared/config"
	"github.com/hourglass/hourglass/shared/httpapi"
	"github.com/hourglass/hourglass/shared/withdrawal"
)

// apiEvent is the events/ fixture name as the user of userID (JWT sub)
// sends it, for withdrawal id (if the fixture names one).
func apiEvent(t *testing.T, name, userID, id string) []byte {
	t.Helper()
	raw, err := os.ReadFile("../../events/" + name + ".json")
	if err != nil {
		t.Fatal(err)
	}
	if id != "" {
		raw = []byte(strings.ReplaceAll(string(raw), "wd_01KB6Y0Z3M5Q8R2T4V6W8X0Y1Z", id))
	}
	var ev events.APIGatewayV2HTTPRequest
	if err := json.Unmarshal(raw, &ev); err != nil {
		t.Fatal(err)
	}
	ev.RequestContext.Authorizer.JWT.Claims["sub"] = userID
	out, _ := json.Marshal(ev)
	return out
}

func invokeAPI(t *testing.T, h lambda.Handler, payload []byte) events.APIGatewayV2HTTPResponse {
	t.Helper()
	out, err := h.Invoke(context.Background(), payload)
	if err != nil {
		t.Fatal(err)
	}
	var resp events.APIGatewayV2HTTPResponse
	if err := json.Unmarshal(out, &resp); err != nil {
		t.Fatal(err)
	}
	return resp
}

// leaky is what a provider's error page may say: its internal host and
// address, our provider URL, an account number.
const leaky = `{"error":"upstream https://payout-internal.corp.example:8443/v2/accounts failed",` +
	`"host":"10.20.30.40","account":"6222020200112233445","trace":"ledger-db-7.prod"}`

var leaks = []string{"payout-internal", "corp.example", "10.20.30.40", "6222020200112233445", "ledger-db-7", "127.0.0.1", "provider answered"}

// TestProviderErrorsStayInternal: the provider's raw answer (hosts, URLs, an
// account number) is kept in the record for operators, but the user's GET and
// list show only the fixed reason of each outcome class, on both ledgers.
func TestProviderErrorsStayInternal(t *testing.T) {
	for _, ledgerKind := range []string{"redis", "dynamodb"} {
		t.Run(ledgerKind, func(t *testing.T) {
			answers := map[string]int{} // user -> status the provider answers
			prov := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				var req struct {
					UserID string `json:"user_id"`
				}
				_ = json.NewDecoder(r.Body).Decode(&req)
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(answers[req.UserID])
				_, _ = io.WriteString(w, leaky)
			}))
			t.Cleanup(prov.Close)
			rs := redistest.Start(t)
			vars := map[string]string{
				"REDIS_URL": rs.URL(), "PAYOUT_URL": prov.URL + "/internal/payouts", "PAYOUT_SIGNING_SECRET": "pay-secret",
				"PAYOUT_LOOKUP": "false", "HOURGLASS_MAX_ATTEMPTS": "5",
			}
			if ledgerKind == "dynamodb" {
				db := dynalitetest.Start(t)
				dynTables(t)
				vars["HOURGLASS_LEDGER"], vars["DYNAMODB_ENDPOINT"], vars["HOURGLASS_CREATE_TABLES"] = "dynamodb", db.Endpoint, "true"
			}
			for k, v := range vars {
				t.Setenv(k, v)
			}
			a := appFromEnv(t, config.Lambda)
			ctx := context.Background()
			if err := a.CreateTables(ctx); err != nil {
				t.Fatal(err)
			}
			provider, err := a.Provider(false)
			if err != nil {
				t.Fatal(err)
			}
			proc, err := a.Processor(provider, &recordingNotifier{})
			if err != nil {
				t.Fatal(err)
			}
			api := lambda.NewHandler(a.WithdrawalAPI())
			for _, tc := range []struct {
				user   string
				status int
				shown  withdrawal.Status
				reason string
			}{
				{"refused", 422, withdrawal.Failed, withdrawal.ReasonNotMade},
				{"unavailable", 503, withdrawal.Retrying, withdrawal.ReasonUnavailable},
				{"unconfirmed", 409, withdrawal.Processing, withdrawal.ReasonUnconfirmed},
			} {
				answers[tc.user] = tc.status
				c, err := httpapi.CreateWithdrawal(ctx, a.Service, tc.user, "key-"+tc.user,
					[]byte(`{"amount":"88.80","currency":"CNY","destination":"bank_6222","delay_seconds":0}`))
				if err != nil {
					t.Fatal(err)
				}
				w, err := a.Ledger.Find(ctx, c.ID)
				if err != nil {
					t.Fatal(err)
				}
				if err := proc.Process(ctx, w.Ref()); err != nil {
					t.Fatalf("%s: process: %v", tc.user, err)
				}
				// Operators keep the detail: the record's internal field.
				w, err = a.Ledger.Find(ctx, c.ID)
				if err != nil || !strings.Contains(w.LastError, "payout-internal.corp.example") {
					t.Errorf("%s: the record's last error %q (%v) lost the provider's answer", tc.user, w.LastError, err)
				}
				get := invokeAPI(t, api, apiEvent(t, "withdrawal-get", tc.user, c.ID))
				list := invokeAPI(t, api, apiEvent(t, "withdrawal-list", tc.user, ""))
				for name, resp := range map[string]events.APIGatewayV2HTTPResponse{"get": get, "list": list} {
					if resp.StatusCode != 200 {
						t.Fatalf("%s %s: %d %s", tc.user, name, resp.StatusCode, resp.Body)
					}
					for _, leak := range leaks {
						if strings.Contains(resp.Body, leak) {
							t.Errorf("%s: the user's %s shows %q: %s", tc.user, name, leak, resp.Body)
						}
					}
				}
				var v httpapi.View
				if err := json.Unmarshal([]byte(get.Body), &v); err != nil {
					t.Fatal(err)
				}
				if v.Status != tc.shown || v.LastError == nil || *v.LastError != tc.reason {
					t.Errorf("%s: the user sees %s, last_error %v; want %s, %q", tc.user, v.Status, show(v.LastError), tc.shown, tc.reason)
				}
			}
			// The operator's view of unknown outcomes (hourglass payouts
			// unresolved) still has the detail.
			un, err := a.Service.Unresolved(ctx, a.Config.MaxAttempts)
			if err != nil || len(un) != 1 || !strings.Contains(un[0].LastError, "payout-internal.corp.example") {
				t.Errorf("unresolved %+v (%v), want the one unconfirmed payout with the provider's answer", un, err)
			}
		})
	}
}

func show(s *string) string {
	if s == nil {
		return "null"
	}
	return *s
}

// TestDynamoCreateFailsClosedWithoutRateLimit: with the dynamodb ledger a
// create needs no Redis, but its rate limit does; with Redis down the create
// route refuses (503 rate_limit_unavailable, Retry-After) rather than let one
// user create without a limit. Reads, which no limit guards, still answer
// from DynamoDB.
func TestDynamoCreateFailsClosedWithoutRateLimit(t *testing.T) {
	db := dynalitetest.Start(t)
	s := newDynStack(t, db)
	api := lambda.NewHandler(s.a.WithdrawalAPI())
	created := invokeAPI(t, api, apiEvent(t, "withdrawal-create", "alice", ""))
	if created.StatusCode != 202 {
		t.Fatalf("create with Redis up: %d %s", created.StatusCode, created.Body)
	}
	var v httpapi.View
	if err := json.Unmarshal([]byte(created.Body), &v); err != nil {
		t.Fatal(err)
	}

	s.redis.Kill()
	for i := range 3 {
		ev := apiEvent(t, "withdrawal-create", "alice", "")
		ev = []byte(strings.Replace(string(ev), "0b5e4a3c-7f0e-4a53-9d3b-2f1c9e8a7b61", "down-"+string(rune('a'+i)), 1))
		resp := invokeAPI(t, api, ev)
		var p struct {
			Code string `json:"code"`
		}
		_ = json.Unmarshal([]byte(resp.Body), &p)
		if resp.StatusCode != 503 || p.Code != "rate_limit_unavailable" || resp.Headers["Retry-After"] == "" {
			t.Fatalf("create %d with Redis down: %d %v %s, want 503 rate_limit_unavailable with Retry-After",
				i, resp.StatusCode, resp.Headers, resp.Body)
		}
	}
	page, err := s.a.Service.List(context.Background(), "alice", 10, "")
	if err != nil || len(page.Items) != 1 {
		t.Fatalf("alice has %d withdrawals (%v), want only the one made with Redis up", len(page.Items), err)
	}
	if resp := invokeAPI(t, api, apiEvent(t, "withdrawal-get", "alice", v.ID)); resp.StatusCode != 200 {
		t.Errorf("get with Redis down: %d %s", resp.StatusCode, resp.Body)
	}
	if resp := invokeAPI(t, api, apiEvent(t, "withdrawal-list", "alice", "")); resp.StatusCode != 200 {
		t.Errorf("list with Redis down: %d %s", resp.StatusCode, resp.Body)
	}
}
