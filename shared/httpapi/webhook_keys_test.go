package httpapi_test

import (
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/aws/aws-lambda-go/lambda"

	"github.com/hourglass/hourglass/internal/fakes"
	"github.com/hourglass/hourglass/shared/clock"
	"github.com/hourglass/hourglass/shared/secrets"
)

// The provider's callback secret in Secrets Manager rotates with a window
// where both keys are valid ({"current","previous"}). A callback signed with
// a key the function has not read yet makes it read the secret again, once,
// before refusing; during the window both keys pass; a forgery is refused
// and cannot make it read again more than once per MinRefresh.
func TestCallbackKeysRotate(t *testing.T) {
	const id = "hourglass/payout-webhook-secret"
	s := newStack(t, "redis://"+miniredis.RunT(t).Addr(), nil)
	store := fakes.NewSecretStore(map[string]string{id: "cb-A"})
	clk := clock.NewFake(time.Now())
	s.app.Secrets.Webhook = secrets.NewCached(store, id, secrets.CachedOptions{Clock: clk})
	s.h = lambda.NewHandler(s.app.Router().Serve)
	v, _ := s.create(t, key("cbkeys"))
	sent(t, s, v.ID)

	wantCallback(t, s.invoke(t, callback(t, "cb-A", callbackBody("ev-1", v.ID, "paid"), time.Time{})), "paid", "applied")
	// The provider moves to cb-B; the secret says so, the function's cache
	// does not know yet.
	store.Set(id, `{"current":"cb-B","previous":"cb-A"}`)
	wantCallback(t, s.invoke(t, callback(t, "cb-B", callbackBody("ev-2", v.ID, "paid"), time.Time{})), "paid", "unchanged")
	wantCallback(t, s.invoke(t, callback(t, "cb-A", callbackBody("ev-3", v.ID, "paid"), time.Time{})), "paid", "unchanged")
	if n := store.Reads(id); n != 2 {
		t.Fatalf("%d reads of the secret; want 2 (first use, one on the unknown key)", n)
	}
	unauthenticated := want{status: 401, code: "unauthenticated"}
	forge := func() {
		for range 5 {
			checkProblem(t, s.invoke(t, callback(t, "forged", callbackBody("ev-4", v.ID, "failed"), time.Time{})), unauthenticated)
		}
	}
	forge() // right after the forced re-read: none more
	if n := store.Reads(id); n != 2 {
		t.Fatalf("%d reads after forgeries; want still 2 (within MinRefresh of the last)", n)
	}
	clk.Advance(secrets.DefaultMinRefresh)
	forge()
	if n := store.Reads(id); n != 3 {
		t.Fatalf("%d reads after forgeries; want 3 (one forced re-read per MinRefresh)", n)
	}
	// The window ends: the old key is refused.
	store.Set(id, `{"current":"cb-B"}`)
	clk.Advance(secrets.DefaultTTL)
	checkProblem(t, s.invoke(t, callback(t, "cb-A", callbackBody("ev-5", v.ID, "paid"), time.Time{})), unauthenticated)
	wantCallback(t, s.invoke(t, callback(t, "cb-B", callbackBody("ev-6", v.ID, "paid"), time.Time{})), "paid", "unchanged")
}
