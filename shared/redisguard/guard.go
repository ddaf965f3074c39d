// Package redisguard holds the command guard of HOURGLASS_REDIS_COMMANDS: a
// go-redis hook that refuses, before it is sent, any command the configured
// Redis would refuse. Profile elasticache-serverless allows only what
// ElastiCache Serverless serves (served.go, with its source) and only
// scripts, transactions and multi-key commands whose keys share one hash
// slot, so a command it would refuse fails in tests and in `hourglass serve`
// on a plain redis-server, not first in production.
//
// A refusal is an error naming the command and the profile; it is counted
// (Guard.Refused, and Total across the process) and logged at ERROR as an
// EMF line, so CloudWatch counts it as the metric RedisCommandsRefused.
package redisguard

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// Profile names what a guard lets through.
type Profile string

// The profiles of HOURGLASS_REDIS_COMMANDS.
const (
	// All lets every command through: node-based ElastiCache and Redis.
	All Profile = "all"
	// ElastiCacheServerless lets through what ElastiCache Serverless serves.
	ElastiCacheServerless Profile = "elasticache-serverless"
)

// Profiles lists the profiles, the default first.
func Profiles() []Profile { return []Profile{All, ElastiCacheServerless} }

// ParseProfile returns the profile named s ("" is All).
func ParseProfile(s string) (Profile, error) {
	switch p := Profile(s); p {
	case "", All:
		return All, nil
	case ElastiCacheServerless:
		return p, nil
	}
	return "", fmt.Errorf("redisguard: %q is not a command profile (want %s or %s)", s, All, ElastiCacheServerless)
}

// MaxArgs is the most arguments, the command's name included, one command
// may have on ElastiCache Serverless ("clients cannot issue a request with
// more than 3,999 arguments": Valkey and Redis OSS configuration and limits,
// https://docs.aws.amazon.com/AmazonElastiCache/latest/dg/RedisConfiguration.html,
// read 2026-12-03).
const MaxArgs = 3999

// Metric is the name of the count of refused commands in the refusal log
// lines (CloudWatch EMF), with the dimension Command.
const Metric = "RedisCommandsRefused"

// LogMessage is the message of every refusal's log line.
const LogMessage = "redisguard: redis command refused before sending"

// ErrRefused is what every refusal is (errors.Is).
var ErrRefused = errors.New("redisguard: command refused")

// RefusedError is a refusal: Command (with its subcommand, if any) is not
// served by Profile, or its keys span hash slots.
type RefusedError struct {
	Command string
	Profile Profile
	// Slots is set when the command was refused for its keys: two of the
	// slots they hash to.
	Slots []int
	// Args is set when it was refused for its number of arguments.
	Args int
}

func (e *RefusedError) Error() string {
	if e.Args > 0 {
		return fmt.Sprintf("redisguard: %s has %d arguments: %s takes at most %d", e.Command, e.Args, e.Profile.title(), MaxArgs)
	}
	if len(e.Slots) > 0 {
		return fmt.Sprintf("redisguard: %s keys hash to slots %d and %d: %s runs it only on one slot",
			e.Command, e.Slots[0], e.Slots[1], e.Profile.title())
	}
	return fmt.Sprintf("redisguard: %s is not served by %s", e.Command, e.Profile.title())
}

// Is makes errors.Is(err, ErrRefused) hold.
func (e *RefusedError) Is(target error) bool { return target == ErrRefused }

// RedisError makes go-redis take a refusal for a server's error reply, as
// ElastiCache's own would be: the connection stays good, nothing is retried.
func (e *RefusedError) RedisError() {}

func (p Profile) title() string {
	if p == ElastiCacheServerless {
		return "ElastiCache Serverless"
	}
	return string(p)
}

// total counts refusals of every guard of the process.
var total atomic.Int64

// Total returns how many commands every guard of this process refused.
func Total() int64 { return total.Load() }

// Guard is the hook of one profile. Its zero value is not usable; see New.
type Guard struct {
	profile Profile
	log     *slog.Logger
	refused atomic.Int64
}

var _ redis.Hook = (*Guard)(nil)

// New returns the guard of profile p, logging refusals to log (nil:
// slog.Default()), or nil for All, which guards nothing.
func New(p Profile, log *slog.Logger) *Guard {
	if p == All || p == "" {
		return nil
	}
	if log == nil {
		log = slog.Default()
	}
	return &Guard{profile: p, log: log}
}

// Profile returns the guard's profile (All for a nil guard).
func (g *Guard) Profile() Profile {
	if g == nil {
		return All
	}
	return g.profile
}

// Refused returns how many commands g refused.
func (g *Guard) Refused() int64 {
	if g == nil {
		return 0
	}
	return g.refused.Load()
}

// Install puts g on c, and on every node client of a cluster client, so the
// commands go-redis sends by itself (CLUSTER SLOTS, COMMAND) pass it too. A
// nil guard installs nothing. Install before the client's first command: a
// cluster's nodes made earlier are not guarded.
func (g *Guard) Install(c redis.UniversalClient) {
	if g == nil {
		return
	}
	c.AddHook(g)
	if cc, ok := c.(*redis.ClusterClient); ok {
		cc.OnNewNode(func(n *redis.Client) { n.AddHook(g) })
	}
}

// DialHook implements redis.Hook.
func (g *Guard) DialHook(next redis.DialHook) redis.DialHook { return next }

// ProcessHook implements redis.Hook: a refused command is not sent.
func (g *Guard) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if err := g.Check(cmd.Args()); err != nil {
			g.refuse(ctx, err)
			cmd.SetErr(err)
			return err
		}
		return next(ctx, cmd)
	}
}

// ProcessPipelineHook implements redis.Hook, for pipelines and transactions:
// when one command is refused none is sent (half a pipeline would be a
// half-write), and each carries the refusal. A transaction (MULTI first)
// must keep every key on one slot.
func (g *Guard) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		var first error
		for _, c := range cmds {
			if err := g.Check(c.Args()); err != nil {
				g.refuse(ctx, err)
				first = firstOf(first, err)
			}
		}
		if first == nil && len(cmds) > 0 && name(cmds[0].Args()) == "MULTI" {
			first = g.oneSlot("MULTI", cmds)
			if first != nil {
				g.refuse(ctx, first)
			}
		}
		if first != nil {
			for _, c := range cmds {
				c.SetErr(first)
			}
			return first
		}
		return next(ctx, cmds)
	}
}

func firstOf(a, b error) error {
	if a != nil {
		return a
	}
	return b
}

// Check returns the refusal of the command args (name first), or nil if g
// lets it through. A nil guard lets everything through.
func (g *Guard) Check(args []any) error {
	if g == nil || len(args) == 0 {
		return nil
	}
	n, sub := name(args), ""
	if containers[n] && len(args) > 1 {
		sub = upper(str(args[1]))
	}
	if !Served(n, sub) {
		return &RefusedError{Command: strings.TrimSpace(n + " " + sub), Profile: g.profile}
	}
	if len(args) > MaxArgs {
		return &RefusedError{Command: n, Profile: g.profile, Args: len(args)}
	}
	keys := keysOf(n, args)
	if s1, s2, ok := slotsDiffer(keys); ok {
		return &RefusedError{Command: n, Profile: g.profile, Slots: []int{s1, s2}}
	}
	return nil
}

// oneSlot refuses a transaction whose commands' keys span slots.
func (g *Guard) oneSlot(what string, cmds []redis.Cmder) error {
	var keys []string
	for _, c := range cmds {
		keys = append(keys, keysOf(name(c.Args()), c.Args())...)
	}
	if s1, s2, ok := slotsDiffer(keys); ok {
		return &RefusedError{Command: what, Profile: g.profile, Slots: []int{s1, s2}}
	}
	return nil
}

func slotsDiffer(keys []string) (int, int, bool) {
	if len(keys) < 2 {
		return 0, 0, false
	}
	s := Slot(keys[0])
	for _, k := range keys[1:] {
		if o := Slot(k); o != s {
			return s, o, true
		}
	}
	return 0, 0, false
}

// refuse counts a refusal and logs it as an EMF line (CloudWatch takes the
// log line itself for the metric).
func (g *Guard) refuse(ctx context.Context, err error) {
	g.refused.Add(1)
	total.Add(1)
	var re *RefusedError
	cmd := "?"
	if errors.As(err, &re) {
		cmd = re.Command
	}
	g.log.ErrorContext(ctx, LogMessage,
		"command", cmd, "profile", string(g.profile), "error", err.Error(),
		"Command", cmd, Metric, 1,
		"_aws", map[string]any{
			"Timestamp": time.Now().UnixMilli(),
			"CloudWatchMetrics": []map[string]any{{
				"Namespace":  "Hourglass",
				"Dimensions": [][]string{{"Command"}},
				"Metrics":    []map[string]string{{"Name": Metric, "Unit": "Count"}},
			}},
		})
}

func name(args []any) string {
	if len(args) == 0 {
		return ""
	}
	return upper(str(args[0]))
}

func upper(s string) string { return strings.ToUpper(s) }

func str(a any) string {
	switch v := a.(type) {
	case string:
		return v
	case []byte:
		return string(v)
	case int:
		return strconv.Itoa(v)
	case int64:
		return strconv.FormatInt(v, 10)
	default:
		return fmt.Sprint(v)
	}
}
