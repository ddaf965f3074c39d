package stall

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"fmt"
	"io/fs"
	"path"
	"strconv"
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"
)

// RedisHook is a go-redis hook that makes every command and pipeline of an
// actor a point, labelled "redis <COMMAND> <first key>", for a script
// "redis EVALSHA <script name> <first key>" (see RegisterScript), for a
// pipeline "redis pipeline <first command> <its key> +<more>" ("redis
// multi …" for a transaction). Dialing passes through. Add it to a client
// once (rdb.AddHook(stall.RedisHook{})): calls without an actor are not
// touched, so one client serves every run of a model.
type RedisHook struct{}

var _ redis.Hook = RedisHook{}

// DialHook passes through.
func (RedisHook) DialHook(next redis.DialHook) redis.DialHook { return next }

// ProcessHook parks an actor's command before it is sent.
func (RedisHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if actorOf(ctx) == nil {
			return next(ctx, cmd)
		}
		_, err := through(ctx, redisLabel(cmd), func(ctx context.Context, seen bool) (redis.Cmder, error) {
			c := cmd
			if !seen {
				c = copyCmd(ctx, cmd)
			}
			return c, next(ctx, c)
		}, isNoScript)
		if err != nil && cmd.Err() == nil {
			cmd.SetErr(err)
		}
		return err
	}
}

// ProcessPipelineHook parks an actor's pipeline (or transaction) before it
// is sent: one point for all its commands.
func (RedisHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if actorOf(ctx) == nil {
			return next(ctx, cmds)
		}
		_, err := through(ctx, pipelineLabel(cmds), func(ctx context.Context, seen bool) ([]redis.Cmder, error) {
			cs := cmds
			if !seen {
				cs = make([]redis.Cmder, len(cmds))
				for i, c := range cmds {
					cs[i] = copyCmd(ctx, c)
				}
			}
			return cs, next(ctx, cs)
		}, nil)
		if err != nil {
			for _, c := range cmds {
				if c.Err() == nil {
					c.SetErr(err)
				}
			}
		}
		return err
	}
}

// copyCmd is a fresh command with cmd's arguments, for an answer its caller
// will not see. A transaction's MULTI and EXEC keep their types: go-redis
// reads the transaction through them.
func copyCmd(ctx context.Context, cmd redis.Cmder) redis.Cmder {
	switch cmd.Name() {
	case "multi":
		return redis.NewStatusCmd(ctx, cmd.Args()...)
	case "exec":
		return redis.NewSliceCmd(ctx, cmd.Args()...)
	}
	return redis.NewCmd(ctx, cmd.Args()...)
}

func isNoScript(err error) bool { return redis.HasErrorPrefix(err, "NOSCRIPT") }

var scripts sync.Map // lower-case sha1 -> name

// RegisterScript names the Lua script whose SHA1 is sha in labels (e.g.
// RegisterScript(s.Hash(), "claim") for a *redis.Script s); an unnamed
// script is labelled by the first 8 digits of its SHA1.
func RegisterScript(sha, name string) { scripts.Store(strings.ToLower(sha), name) }

// RegisterScripts names every script of fsys matching pattern (e.g.
// os.DirFS("lua"), "*.lua") by its file name without ".lua".
func RegisterScripts(fsys fs.FS, pattern string) error {
	files, err := fs.Glob(fsys, pattern)
	if err != nil {
		return fmt.Errorf("stall: scripts %s: %w", pattern, err)
	}
	for _, f := range files {
		src, err := fs.ReadFile(fsys, f)
		if err != nil {
			return fmt.Errorf("stall: script %s: %w", f, err)
		}
		RegisterScript(sha1Hex(src), strings.TrimSuffix(path.Base(f), ".lua"))
	}
	return nil
}

func sha1Hex(src []byte) string {
	sum := sha1.Sum(src)
	return hex.EncodeToString(sum[:])
}

func scriptName(sha string) string {
	if n, ok := scripts.Load(strings.ToLower(sha)); ok {
		return n.(string)
	}
	return sha[:min(8, len(sha))]
}

// redisLabel is "redis" and what names cmd.
func redisLabel(cmd redis.Cmder) string { return "redis " + cmdLabel(cmd) }

// cmdLabel names cmd by its name and first key; a script by its name too.
func cmdLabel(cmd redis.Cmder) string {
	args := cmd.Args()
	name := strings.ToUpper(cmd.Name())
	arg := func(i int) string {
		if i < len(args) {
			return fmt.Sprint(args[i])
		}
		return ""
	}
	switch name {
	case "EVALSHA", "EVALSHA_RO", "EVAL", "EVAL_RO":
		script := arg(1)
		if !strings.HasPrefix(name, "EVALSHA") {
			script = sha1Hex([]byte(script))
		}
		label := name + " " + scriptName(script)
		if n, err := strconv.Atoi(arg(2)); err == nil && n > 0 {
			label += " " + arg(3)
		}
		return label
	}
	if len(args) > 1 {
		return name + " " + arg(1)
	}
	return name
}

func pipelineLabel(cmds []redis.Cmder) string {
	kind, inner := "pipeline", cmds
	if len(cmds) >= 2 && cmds[0].Name() == "multi" && cmds[len(cmds)-1].Name() == "exec" {
		kind, inner = "multi", cmds[1:len(cmds)-1]
	}
	if len(inner) == 0 {
		return "redis " + kind
	}
	label := "redis " + kind + " " + cmdLabel(inner[0])
	if len(inner) > 1 {
		label += fmt.Sprintf(" +%d", len(inner)-1)
	}
	return label
}
