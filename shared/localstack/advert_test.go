package localstack

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestAdverts: an advert is readable by its user only, found while its
// process runs, and removed by its own stack only; one whose process is
// gone is skipped and removed.
func TestAdverts(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "local")
	mine := Advert{PID: os.Getpid(), Addr: "127.0.0.1:8080", StartedAt: t0, RedisURL: "redis://127.0.0.1:1234",
		RedisPrefix: "hg:", QueueShards: 4, Ledger: "redis", Embedded: true}
	remove, err := WriteAdvert(dir, mine)
	if err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(advertFile(dir, mine.Addr))
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o600 {
		t.Errorf("advert mode %v, want 0600: it holds REDIS_URL", st.Mode().Perm())
	}

	// A stack killed without removing its advert: its pid is gone.
	dead := exec.Command("true")
	if err := dead.Run(); err != nil {
		t.Fatal(err)
	}
	stale := Advert{PID: dead.Process.Pid, Addr: "127.0.0.1:8081", RedisURL: "redis://127.0.0.1:9"}
	if _, err := WriteAdvert(dir, stale); err != nil {
		t.Fatal(err)
	}
	live, err := FindAdverts(dir)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]Advert{mine}, live); diff != "" {
		t.Errorf("found (-want +got):\n%s", diff)
	}
	if _, err := os.Stat(advertFile(dir, stale.Addr)); !os.IsNotExist(err) {
		t.Errorf("the dead stack's advert is still there: %v", err)
	}

	// Another stack took the address since: the first one's exit leaves it.
	later := mine
	later.StartedAt = t0.Add(1)
	if _, err := WriteAdvert(dir, later); err != nil {
		t.Fatal(err)
	}
	remove()
	if live, _ := FindAdverts(dir); len(live) != 1 || !live[0].StartedAt.Equal(later.StartedAt) {
		t.Errorf("after the older stack's exit: %+v, want the later advert", live)
	}
	if live, err := FindAdverts(filepath.Join(dir, "missing")); err != nil || len(live) != 0 {
		t.Errorf("a missing directory: %v, %v; want none, no error", live, err)
	}
}
