package ledger_test

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"strconv"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/redis/go-redis/v9"

	"github.com/hourglass/hourglass/internal/redistest"
	"github.com/hourglass/hourglass/shared/delayq"
	"github.com/hourglass/hourglass/shared/ledger"
	"github.com/hourglass/hourglass/shared/ledger/ledgertest"
	"github.com/hourglass/hourglass/shared/withdrawal"
)

// firstLayoutIdem is the name of a key's idempotency record as the first
// layout named it (a hash of its own, listed in <tag>:idem-exp).
func firstLayoutIdem(k delayq.Keys, user, key string) string {
	h := sha256.New()
	var n [8]byte
	binary.BigEndian.PutUint64(n[:], uint64(len(user)))
	h.Write(n[:])
	h.Write([]byte(user))
	h.Write([]byte(key))
	return k.Key("idem", hex.EncodeToString(h.Sum(nil)[:16]))
}

func ms(t time.Time) string { return strconv.FormatInt(t.UnixMilli(), 10) }

// TestFirstLayoutIsRead: records and idempotency records written before the
// compact layout (long field names, the id in the record, one hash per key
// with the whole first answer, an expiry index of names) are read, replayed,
// completed and purged by the ledger of the new one.
func TestFirstLayoutIsRead(t *testing.T) {
	redistest.Each(t, func(t *testing.T, rb redistest.Backend) {
		ctx := context.Background()
		c := rb.Client
		q := newQueue(t, rb, 2)
		l := ledger.NewRedis(c, q)
		t0 := ledgertest.T0
		user := "alice"
		k := q.Keys(q.ShardFor(user))
		fp := "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
		exp := k.Key("idem-exp")

		// A withdrawal created before the upgrade, and its key, done.
		id := withdrawal.NewID(t0)
		if err := c.HSet(ctx, k.Key("w", id), "id", id, "user", user, "status", "scheduled", "amount", "125.5",
			"currency", "CNY", "dest", "bank_6222", "due", ms(t0.Add(time.Hour)), "created", ms(t0),
			"updated", ms(t0), "attempts", "0", "request_id", "req-1").Err(); err != nil {
			t.Fatal(err)
		}
		done := firstLayoutIdem(k, user, "done-key")
		if err := c.HSet(ctx, done, "state", "done", "fp", fp, "id", id, "resp", `{"first":"layout"}`,
			"user", user, "key", "done-key").Err(); err != nil {
			t.Fatal(err)
		}
		c.ZAdd(ctx, exp, redisZ(t0.Add(24*time.Hour), done))

		got, err := l.Get(ctx, user, id)
		if err != nil {
			t.Fatal(err)
		}
		want := withdrawal.Withdrawal{ID: id, UserID: user, Shard: q.ShardFor(user), Status: withdrawal.Scheduled,
			Amount: got.Amount, Currency: "CNY", Destination: "bank_6222", DueAt: t0.Add(time.Hour),
			CreatedAt: t0, UpdatedAt: t0, RequestID: "req-1"}
		if diff := cmp.Diff(want, got); diff != "" || got.Amount.String() != "125.5" {
			t.Fatalf("a first-layout record read back (-want +got):\n%s amount %s", diff, got.Amount)
		}
		key := withdrawal.IdemKey{UserID: user, Key: "done-key", Shard: q.ShardFor(user)}
		st, err := l.Reserve(ctx, reservation(key, fp, "wd_new", t0.Add(time.Minute)))
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(withdrawal.KeyState{Phase: withdrawal.KeyCompleted, Fingerprint: fp, ID: id,
			Response: []byte(`{"first":"layout"}`)}, st); diff != "" {
			t.Fatalf("a first-layout key replayed (-want +got):\n%s", diff)
		}
		if st, _ := l.Reserve(ctx, reservation(key, "another body", "wd_new", t0.Add(time.Minute))); st.Fingerprint == "another body" {
			t.Fatalf("another body under a first-layout key: %+v", st)
		}

		// Its owner still moves and cancels it (the scripts read "user").
		if _, err := l.Reschedule(ctx, withdrawal.Reschedule{UserID: user, ID: id, DueAt: t0.Add(2 * time.Hour),
			Now: t0.Add(time.Minute), By: withdrawal.ByUser}); err != nil {
			t.Fatalf("reschedule of a first-layout record: %v", err)
		}
		if got, err := l.Cancel(ctx, user, id, t0.Add(time.Minute)); err != nil || got.Status != withdrawal.Cancelled {
			t.Fatalf("cancel of a first-layout record: %+v %v", got, err)
		}
		if _, err := l.Cancel(ctx, "mallory", id, t0.Add(time.Minute)); err == nil {
			t.Fatal("someone else cancels a first-layout record")
		}

		// A reservation made before the upgrade is completed after it, and
		// replayed in the new layout.
		pending := firstLayoutIdem(k, user, "pending-key")
		w := ledgertest.NewWithdrawal(q, user, t0.Add(time.Hour))
		if err := c.HSet(ctx, pending, "state", "pending", "fp", fp, "id", w.ID, "until", ms(t0.Add(30*time.Second)),
			"user", user, "key", "pending-key").Err(); err != nil {
			t.Fatal(err)
		}
		c.ZAdd(ctx, exp, redisZ(t0.Add(24*time.Hour), pending))
		pkey := withdrawal.IdemKey{UserID: user, Key: "pending-key", Shard: q.ShardFor(user)}
		if st, err := l.Reserve(ctx, reservation(pkey, fp, w.ID, t0)); err != nil || st.Phase != withdrawal.KeyAcquired {
			t.Fatalf("a first-layout reservation, its own request: %+v %v", st, err)
		}
		body, _ := withdrawal.EncodeCreated(w)
		if err := l.Create(ctx, w, pkey, body); err != nil {
			t.Fatal(err)
		}
		if n := c.Exists(ctx, pending).Val(); n != 0 {
			t.Errorf("the first-layout record of a completed key is left")
		}
		st, err = l.Reserve(ctx, reservation(pkey, fp, "wd_other", t0.Add(time.Minute)))
		if err != nil || st.Phase != withdrawal.KeyCompleted || string(st.Response) != string(body) {
			t.Fatalf("replay of a key reserved before the upgrade: %+v %s %v", st, st.Response, err)
		}
		// Its retention is the first reservation's.
		if st, _ := l.Reserve(ctx, reservation(pkey, fp, "wd_later", t0.Add(24*time.Hour+time.Second))); st.Phase != withdrawal.KeyAcquired {
			t.Fatalf("a migrated key past its retention: %+v", st)
		}

		// Past their retention, first-layout records are forgotten: by the
		// purge, or by a new reservation of the key.
		if n, err := l.PurgeExpiredKeys(ctx, t0.Add(25*time.Hour)); err != nil || n < 1 {
			t.Fatalf("purge: %d %v", n, err)
		}
		if n := c.Exists(ctx, done).Val() + c.ZCard(ctx, exp).Val(); n != 0 {
			t.Errorf("first-layout records left after their retention: %d", n)
		}
	})
}

func redisZ(at time.Time, member string) redis.Z {
	return redis.Z{Score: float64(at.UnixMilli()), Member: member}
}

func reservation(key withdrawal.IdemKey, fp, id string, now time.Time) withdrawal.Reservation {
	return withdrawal.Reservation{Key: key, Fingerprint: fp, ID: id, Now: now,
		LockUntil: now.Add(30 * time.Second), ExpiresAt: now.Add(24 * time.Hour)}
}
