package localstack

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"
)

// A running `hourglass serve` advertises where it is, so that an operator
// command on the same machine finds the stack's Redis and settings without
// being told (no REDIS_URL fished out of a log line, no unrelated Redis on
// :6379 operated on by mistake). The advert is a file per listening address
// in the state directory, readable by its user only (it holds REDIS_URL,
// whose password is a secret), written once serving and removed at exit.
// A process killed without a chance to remove it leaves a file whose pid is
// gone: readers skip it and remove it.

// StateDirEnv overrides where adverts live; the default is the user's cache
// directory (~/.cache/hourglass/local on Linux).
const StateDirEnv = "HOURGLASS_STATE_DIR"

// Advert is what a running local stack tells the operator commands.
type Advert struct {
	PID       int       `json:"pid"`
	Addr      string    `json:"addr"`
	StartedAt time.Time `json:"started_at"`
	// RedisURL is the Redis the stack runs on, the embedded one's included.
	RedisURL    string `json:"redis_url"`
	RedisPrefix string `json:"redis_prefix"`
	QueueShards int    `json:"queue_shards"`
	Ledger      string `json:"ledger"`
	// The DynamoDB ledger's settings, when Ledger is dynamodb.
	DynamoDBEndpoint string `json:"dynamodb_endpoint,omitempty"`
	WithdrawalsTable string `json:"withdrawals_table,omitempty"`
	OrdersTable      string `json:"orders_table,omitempty"`
	IdempotencyTable string `json:"idempotency_table,omitempty"`
	// Embedded says the Redis is the stack's in-process one, gone when it stops.
	Embedded bool `json:"embedded"`
}

// StateDir is where adverts are written and looked for.
func StateDir() (string, error) {
	if d := os.Getenv(StateDirEnv); d != "" {
		return d, nil
	}
	base, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("no directory for the local stack's advert (set %s): %w", StateDirEnv, err)
	}
	return filepath.Join(base, "hourglass", "local"), nil
}

// advertFile names the advert of the stack listening on addr.
func advertFile(dir, addr string) string {
	return filepath.Join(dir, strings.NewReplacer(":", "_", "/", "_", "[", "", "]", "").Replace(addr)+".json")
}

// WriteAdvert writes a's advert into dir and returns the function that
// removes it (only if it is still a's: another stack may have taken the
// address since).
func WriteAdvert(dir string, a Advert) (remove func(), err error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("advert: %w", err)
	}
	b, err := json.MarshalIndent(a, "", "  ")
	if err != nil {
		return nil, err
	}
	path := advertFile(dir, a.Addr)
	tmp, err := os.CreateTemp(dir, ".advert-*")
	if err != nil {
		return nil, fmt.Errorf("advert: %w", err)
	}
	defer func() { _ = os.Remove(tmp.Name()) }() // gone once renamed
	if _, err := tmp.Write(append(b, '\n')); err != nil {
		_ = tmp.Close()
		return nil, fmt.Errorf("advert: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return nil, fmt.Errorf("advert: %w", err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil { // CreateTemp made it 0600
		return nil, fmt.Errorf("advert: %w", err)
	}
	return func() {
		if cur, err := readAdvert(path); err == nil && cur.PID == a.PID && cur.StartedAt.Equal(a.StartedAt) {
			_ = os.Remove(path)
		}
	}, nil
}

func readAdvert(path string) (Advert, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return Advert{}, err
	}
	var a Advert
	if err := json.Unmarshal(b, &a); err != nil {
		return Advert{}, fmt.Errorf("advert %s: %w", path, err)
	}
	return a, nil
}

// FindAdverts returns the adverts in dir of stacks whose process still
// runs, in address order, and removes the others'. A missing dir holds none.
func FindAdverts(dir string) ([]Advert, error) {
	paths, err := filepath.Glob(filepath.Join(dir, "*.json"))
	if err != nil {
		return nil, err
	}
	var live []Advert
	for _, p := range paths {
		a, err := readAdvert(p)
		if errors.Is(err, fs.ErrNotExist) {
			continue // removed as we looked
		}
		if err != nil || !running(a.PID) {
			_ = os.Remove(p)
			continue
		}
		live = append(live, a)
	}
	sort.Slice(live, func(i, j int) bool { return live[i].Addr < live[j].Addr })
	return live, nil
}

// running reports whether a process of pid exists (signal 0 checks without
// sending anything; EPERM means it exists under another user).
func running(pid int) bool {
	if pid <= 0 {
		return false
	}
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}
