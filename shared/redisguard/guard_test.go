package redisguard_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hourglass/hourglass/internal/redistest"
	"github.com/hourglass/hourglass/shared/redisacl"
	"github.com/hourglass/hourglass/shared/redisconn"
	"github.com/hourglass/hourglass/shared/redisguard"
)

func guard() *redisguard.Guard {
	return redisguard.New(redisguard.ElastiCacheServerless, slog.New(slog.NewJSONHandler(io.Discard, nil)))
}

func TestCheck(t *testing.T) {
	g := guard()
	for _, tc := range []struct {
		args []any
		// refused is "" when served, else the refusal's text.
		refused string
	}{
		{[]any{"config", "set", "maxmemory-policy", "noeviction"}, "redisguard: CONFIG SET is not served by ElastiCache Serverless"},
		{[]any{"CONFIG", "GET", "*"}, "CONFIG GET is not served"},
		{[]any{"keys", "hg:*"}, "KEYS is not served"},
		{[]any{"debug", "sleep", "0"}, "DEBUG"},
		{[]any{"monitor"}, "MONITOR"},
		{[]any{"wait", 1, 0}, "WAIT"},
		{[]any{"watch", "{a}x"}, "WATCH"},
		{[]any{"object", "encoding", "k"}, "OBJECT ENCODING"},
		{[]any{"memory", "usage", "k"}, "MEMORY"},
		{[]any{"latency", "doctor"}, "LATENCY"},
		{[]any{"slowlog", "get"}, "SLOWLOG"},
		{[]any{"fcall", "f", 0}, "FCALL"},
		{[]any{"function", "load", "x"}, "FUNCTION"},
		{[]any{"script", "kill"}, "SCRIPT KILL is not served"},
		{[]any{"cluster", "reset"}, "CLUSTER RESET is not served"},
		{[]any{"cluster", "failover"}, "CLUSTER FAILOVER"},
		{[]any{"cluster"}, "CLUSTER is not served"},
		{[]any{"client", "setinfo", "lib-name", "go-redis"}, "CLIENT SETINFO is not served"},
		{[]any{"client", "list"}, "CLIENT LIST"},
		{[]any{"client", "kill", "id", "1"}, "CLIENT KILL"},
		{[]any{"acl", "setuser", "u"}, "ACL SETUSER"},
		{[]any{"acl", "log"}, "ACL LOG"},
		{[]any{"swapdb", 0, 1}, "SWAPDB"},
		{[]any{"move", "k", 1}, "MOVE"},
		{[]any{"psubscribe", "x*"}, "PSUBSCRIBE"},
		{[]any{"bgsave"}, "BGSAVE"},
		{[]any{"evalsha", "abc", 2, "{dq:a:0}:due", "{dq:a:1}:due"}, "EVALSHA keys hash to slots"},
		{[]any{"eval", "return 1", "2", "a", "b"}, "EVAL keys hash to slots"},
		{[]any{"mget", "a", "b"}, "MGET keys hash to slots"},
		{[]any{"mset", "a", "1", "b", "2"}, "MSET keys hash to slots"},
		{[]any{"del", "{x}1", "{y}1"}, "DEL keys hash to slots"},
		{[]any{"zunionstore", "{x}d", 2, "{x}a", "{y}b"}, "ZUNIONSTORE keys hash to slots"},

		{append([]any{"zrem", "{x}z"}, make([]any, 3998)...), "ZREM has 4000 arguments: ElastiCache Serverless takes at most 3999"},
		{append([]any{"zrem", "{x}z"}, make([]any, 3997)...), ""},

		{[]any{"hello", "2"}, ""},
		{[]any{"auth", "u", "p"}, ""},
		{[]any{"ping"}, ""},
		{[]any{"select", 0}, ""},
		{[]any{"cluster", "slots"}, ""},
		{[]any{"CLUSTER", "SHARDS"}, ""},
		{[]any{"cluster", "nodes"}, ""},
		{[]any{"cluster", "keyslot", "k"}, ""},
		{[]any{"command"}, ""},
		{[]any{"command", "info", "get"}, ""},
		{[]any{"client", "setname", "x"}, ""},
		{[]any{"script", "load", "return 1"}, ""},
		{[]any{"script", "exists", "abc"}, ""},
		{[]any{"info", "memory"}, ""},
		{[]any{"dbsize"}, ""},
		{[]any{"flushall"}, ""},
		{[]any{"scan", 0, "match", "hg:*"}, ""},
		{[]any{"time"}, ""},
		{[]any{"multi"}, ""},
		{[]any{"exec"}, ""},
		{[]any{"evalsha", "abc", 3, "{dq:a:0}:due", "{dq:a:0}:inflight", "{dq:a:0}:lease", 1, 2}, ""},
		{[]any{[]byte("EVALSHA_RO"), "abc", 1, "rl:x", "a"}, ""},
		{[]any{"eval", "return 1", 0}, ""},
		{[]any{"del", "{x}1", "{x}2"}, ""},
		{[]any{"zadd", "{x}z", 1, "m"}, ""},
		{[]any{"hset", "k", "f", "v"}, ""},
		{[]any{"set", "k", "v", "px", 1000}, ""},
	} {
		name := strings.Join(strings.Fields(strings.Trim(strings.ReplaceAll(fmtArgs(tc.args), "/", "_"), " ")), "_")
		t.Run(name, func(t *testing.T) {
			err := g.Check(tc.args)
			switch {
			case tc.refused == "" && err != nil:
				t.Errorf("refused: %v", err)
			case tc.refused != "" && err == nil:
				t.Errorf("let through, want %q", tc.refused)
			case tc.refused != "" && !strings.Contains(err.Error(), tc.refused):
				t.Errorf("refusal %q does not say %q", err, tc.refused)
			case err != nil && !errors.Is(err, redisguard.ErrRefused):
				t.Errorf("refusal %v is not ErrRefused", err)
			}
		})
	}
	if n := g.Refused(); n != 0 {
		t.Errorf("Check counted %d refusals; only the hooks count", n)
	}
}

func fmtArgs(args []any) string {
	var b strings.Builder
	for i, a := range args {
		if i > 3 {
			break
		}
		switch v := a.(type) {
		case []byte:
			b.WriteString(string(v))
		case string:
			b.WriteString(v)
		default:
			b.WriteString("n")
		}
		b.WriteByte(' ')
	}
	return b.String()
}

func TestAllGuardsNothing(t *testing.T) {
	if g := redisguard.New(redisguard.All, nil); g != nil {
		t.Fatalf("New(All) = %v, want nil", g)
	}
	var g *redisguard.Guard
	if err := g.Check([]any{"config", "set", "a", "b"}); err != nil {
		t.Errorf("a nil guard refused: %v", err)
	}
	for _, s := range []string{"", "all", "elasticache-serverless"} {
		if _, err := redisguard.ParseProfile(s); err != nil {
			t.Errorf("ParseProfile(%q): %v", s, err)
		}
	}
	_, err := redisguard.ParseProfile("serverless")
	if err == nil || !strings.Contains(err.Error(), "all or elasticache-serverless") {
		t.Errorf("ParseProfile(serverless) = %v, want an error naming the profiles", err)
	}
}

// TestEveryACLCommandIsServed: package redisacl lists, per function, every
// command it may send (a real redis-server refuses the rest in its tests),
// so each must be one ElastiCache Serverless serves.
func TestEveryACLCommandIsServed(t *testing.T) {
	for _, fn := range redisacl.Functions() {
		r, err := redisacl.For(fn)
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range r.Commands {
			name, sub, _ := strings.Cut(c, "|")
			if !redisguard.Served(name, sub) {
				t.Errorf("%s may send %s, which ElastiCache Serverless does not serve", fn, c)
			}
		}
	}
}

// TestSlot holds Slot to the slots Redis's documentation gives.
func TestSlot(t *testing.T) {
	for key, want := range map[string]int{
		"foo": 12182, "hello": 866, "somekey": 11058,
		"foo{hash_tag}": 2515, "bar{hash_tag}": 2515, "hash_tag": 2515,
	} {
		if got := redisguard.Slot(key); got != want {
			t.Errorf("Slot(%q) = %d, want %d", key, got, want)
		}
	}
	if redisguard.Slot("{}x") == redisguard.Slot("x") && redisguard.Slot("{}y") == redisguard.Slot("y") {
		t.Error("an empty hash tag was taken for a tag")
	}
	if redisguard.Slot("a{b}{c}") != redisguard.Slot("b") {
		t.Error("the first hash tag is not the one hashed")
	}
}

// TestSlotMatchesACluster compares Slot with CLUSTER KEYSLOT of a real
// cluster for keys of every shape the packages build.
func TestSlotMatchesACluster(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a Redis Cluster")
	}
	c := redistest.StartCluster(t, 3)
	rc := redis.NewClient(&redis.Options{Addr: c.Addrs()[0]})
	t.Cleanup(func() { _ = rc.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	keys := []string{"", "a", "hg:{dq:withdrawals:0}:due", "hg:{dq:sk:item-1:3}:stock", "hg:seckill:items",
		"hg:rl:wd:u:user-1", "{", "}", "{}", "a{}b{c}", "x{y", "ü{ü}", "hg:{sk:item}:preheat"}
	for i := range 200 {
		keys = append(keys, "k"+string(rune('a'+i%26))+strings.Repeat("x", i))
	}
	for _, k := range keys {
		want, err := rc.ClusterKeySlot(ctx, k).Result()
		if err != nil {
			t.Fatal(err)
		}
		if got := redisguard.Slot(k); int64(got) != want {
			t.Errorf("Slot(%q) = %d, CLUSTER KEYSLOT says %d", k, got, want)
		}
	}
}

// TestHooksRefuseBeforeSending runs the guard on a real redis-server: a
// refused command, or a pipeline holding one, never reaches it.
func TestHooksRefuseBeforeSending(t *testing.T) {
	srv := redistest.Start(t)
	admin := srv.Client(t)
	g := guard()
	// As the functions connect: package redisconn installs the guard, and
	// nothing it sends on connecting may be refused (protocol 3 is the
	// one that would try CLIENT MAINT_NOTIFICATIONS).
	c, err := redisconn.New(srv.URL()+"?protocol=3", redisconn.Options{Guard: g})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	before := redisguard.Total()

	if err := c.Set(ctx, "{a}k", "v", 0).Err(); err != nil {
		t.Fatalf("SET through the guard: %v", err)
	}
	policy := admin.ConfigGet(ctx, "maxmemory-policy").Val()["maxmemory-policy"]
	err = c.ConfigSet(ctx, "maxmemory-policy", "allkeys-lru").Err()
	if want := "redisguard: CONFIG SET is not served by ElastiCache Serverless"; err == nil || err.Error() != want {
		t.Errorf("CONFIG SET: %v, want %q", err, want)
	}
	if got := admin.ConfigGet(ctx, "maxmemory-policy").Val()["maxmemory-policy"]; got != policy {
		t.Errorf("the refused CONFIG SET reached Redis: policy %s, was %s", got, policy)
	}
	if err := c.Keys(ctx, "*").Err(); !errors.Is(err, redisguard.ErrRefused) {
		t.Errorf("KEYS: %v, want a refusal", err)
	}
	script := redis.NewScript(`return redis.call('GET', KEYS[1])`)
	if err := script.Run(ctx, c, []string{"{a}k", "{b}k"}).Err(); !errors.Is(err, redisguard.ErrRefused) {
		t.Errorf("a cross-slot script: %v, want a refusal", err)
	}
	if v, err := script.Run(ctx, c, []string{"{a}k"}).Text(); err != nil || v != "v" {
		t.Errorf("a one-slot script: %q, %v", v, err)
	}

	// A pipeline with one refused command sends none of them.
	cmds, err := c.Pipelined(ctx, func(p redis.Pipeliner) error {
		p.Set(ctx, "{a}p", "1", 0)
		p.ObjectEncoding(ctx, "{a}k")
		return nil
	})
	if !errors.Is(err, redisguard.ErrRefused) {
		t.Errorf("pipeline: %v, want a refusal", err)
	}
	for _, cmd := range cmds {
		if !errors.Is(cmd.Err(), redisguard.ErrRefused) {
			t.Errorf("pipeline's %s: %v, want the refusal", cmd.Name(), cmd.Err())
		}
	}
	if n := admin.Exists(ctx, "{a}p").Val(); n != 0 {
		t.Error("half the refused pipeline reached Redis")
	}
	// A transaction across slots is refused; on one slot it runs.
	_, err = c.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.Set(ctx, "{a}t", "1", 0)
		p.Set(ctx, "{b}t", "1", 0)
		return nil
	})
	if !errors.Is(err, redisguard.ErrRefused) || !strings.Contains(err.Error(), "MULTI keys hash to slots") {
		t.Errorf("a cross-slot MULTI: %v, want a refusal", err)
	}
	if _, err := c.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.Set(ctx, "{a}t", "1", 0)
		p.Incr(ctx, "{a}n")
		return nil
	}); err != nil {
		t.Errorf("a one-slot MULTI: %v", err)
	}
	if n := admin.Exists(ctx, "{b}t").Val(); n != 0 {
		t.Error("the cross-slot MULTI reached Redis")
	}
	// CONFIG SET, KEYS, the script, the pipeline's OBJECT, the MULTI.
	if got, want := g.Refused(), int64(5); got != want { // none on connecting
		t.Errorf("Refused() = %d, want %d", got, want)
	}
	if got := redisguard.Total() - before; got < 5 {
		t.Errorf("Total() grew by %d, want at least 5", got)
	}
	// The connection is still good: a refusal is not a network error.
	if err := c.Ping(ctx).Err(); err != nil {
		t.Errorf("PING after refusals: %v", err)
	}
}

// TestRefusalIsLoggedAsAMetric: the log line is an EMF line CloudWatch
// counts as RedisCommandsRefused by Command.
func TestRefusalIsLoggedAsAMetric(t *testing.T) {
	var b strings.Builder
	g := redisguard.New(redisguard.ElastiCacheServerless, slog.New(slog.NewJSONHandler(&b, nil)))
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1})
	g.Install(c)
	t.Cleanup(func() { _ = c.Close() })
	_ = c.ConfigGet(context.Background(), "*").Err()
	line := b.String()
	for _, want := range []string{redisguard.LogMessage, `"Command":"CONFIG GET"`, `"RedisCommandsRefused":1`,
		`"CloudWatchMetrics"`, `"Namespace":"Hourglass"`, `"level":"ERROR"`} {
		if !strings.Contains(line, want) {
			t.Errorf("log line lacks %s:\n%s", want, line)
		}
	}
}
