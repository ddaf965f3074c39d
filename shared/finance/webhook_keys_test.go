package finance

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hourglass/hourglass/internal/fakes"
	"github.com/hourglass/hourglass/shared/clock"
	"github.com/hourglass/hourglass/shared/secrets"
	"github.com/hourglass/hourglass/shared/signature"
)

// Finance moved to a new key (and refuses the old one) before the function
// read it: the message refused 401 is sent once more, signed with the key
// read again, and accepted. A refusal with the key just read is not resent.
func TestWebhookResendsOnceWithARotatedKey(t *testing.T) {
	const id = "hourglass/finance-signing-secret"
	var (
		mu     sync.Mutex
		accept = "fin-B"
		posts  int
	)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		mu.Lock()
		posts++
		key := accept
		mu.Unlock()
		if signature.Verify([]byte(key), r.Header.Get(signature.Header), body, time.Now(), time.Minute) != nil {
			w.WriteHeader(http.StatusUnauthorized)
		}
	}))
	t.Cleanup(srv.Close)
	count := func() int { mu.Lock(); defer mu.Unlock(); return posts }
	store := fakes.NewSecretStore(map[string]string{id: "fin-A"})
	src := secrets.NewCached(store, id, secrets.CachedOptions{Clock: clock.NewFake(time.Now())})
	if _, err := src.Keys(context.Background()); err != nil {
		t.Fatal(err)
	}
	h, err := NewWebhook(WebhookConfig{URL: srv.URL, Keys: src})
	if err != nil {
		t.Fatal(err)
	}
	store.Set(id, `{"current":"fin-B","previous":"fin-A"}`)
	if err := h.Notify(context.Background(), message(t, "wd_1")); err != nil {
		t.Fatalf("Notify after the rotation: %v", err)
	}
	if posts := count(); posts != 2 {
		t.Fatalf("%d posts; want 2 (refused with the old key, accepted with the new)", posts)
	}
	mu.Lock()
	accept = "fin-C"
	mu.Unlock()
	err = h.Notify(context.Background(), message(t, "wd_1"))
	if err == nil || !strings.Contains(err.Error(), "401") {
		t.Fatalf("Notify with a key finance refuses: %v; want the 401", err)
	}
	if posts := count(); posts != 3 {
		t.Fatalf("%d posts; want 3 (no resend under the same key)", posts)
	}
}
