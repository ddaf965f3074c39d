package redisacl_test

import (
	"strings"
	"testing"

	"github.com/hourglass/hourglass/shared/redisacl"
)

func TestAccessString(t *testing.T) {
	for _, fn := range redisacl.Functions() {
		s, err := redisacl.AccessString(fn, "hg:")
		if err != nil {
			t.Fatal(err)
		}
		f := strings.Fields(s)
		if f[0] != "on" {
			t.Errorf("%s: %q does not start with on", fn, s)
		}
		seen, all := map[string]bool{}, -1
		for i, tok := range f[1:] {
			switch {
			case seen[tok]:
				t.Errorf("%s: %q twice", fn, tok)
			case tok == "-@all":
				all = i
			case strings.HasPrefix(tok, "~hg:"):
				if all >= 0 {
					t.Errorf("%s: key pattern %q after -@all", fn, tok)
				}
			case strings.HasPrefix(tok, "+") && !strings.HasPrefix(tok, "+@"):
				if all < 0 {
					t.Errorf("%s: %q before -@all would be taken back", fn, tok)
				}
			default:
				// ElastiCache takes on|off, ~keys, +/-@category, +/-cmd[|sub].
				t.Errorf("%s: %q is not a token of an ElastiCache access string", fn, tok)
			}
			seen[tok] = true
		}
		for _, never := range []string{"+@all", "~*", "+flushall", "+keys", "+config", "+acl", "+scan", "+debug"} {
			if seen[never] {
				t.Errorf("%s: %s in %q", fn, never, s)
			}
		}
		// ElastiCache: an access string of at most 2,048 characters.
		if len(s) > 2048 {
			t.Errorf("%s: %d characters", fn, len(s))
		}
	}
	if _, err := redisacl.AccessString("nobody", "hg:"); err == nil {
		t.Error("a function with no rules rendered")
	}
}

func TestAccessStringPrefix(t *testing.T) {
	s, err := redisacl.AccessString(redisacl.Seckill, "a*b?[c]\\:")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(s, `~a\*b\?\[c\]\\:{dq:sk:*`) {
		t.Errorf("glob characters of the prefix not escaped: %q", s)
	}
	for _, bad := range []string{"", "hg :", "hg:\t", "hg\n"} {
		if _, err := redisacl.AccessString(redisacl.Seckill, bad); err == nil {
			t.Errorf("prefix %q rendered", bad)
		}
	}
}

func TestWithdrawalKeysOnlyWhereTheyBelong(t *testing.T) {
	want := map[string]bool{redisacl.Enqueue: true, redisacl.Poller: true, redisacl.Consumer: true, redisacl.Operator: true}
	for _, fn := range redisacl.Functions() {
		s, _ := redisacl.AccessString(fn, "hg:")
		if got := strings.Contains(s, "~hg:{dq:withdrawals:*"); got != want[fn] {
			t.Errorf("%s reaches the withdrawals: %v, want %v", fn, got, want[fn])
		}
	}
}
