// Package lostreply makes a store's writes lose their answers on purpose, for
// tests: the write is applied, its answer is dropped, and then either the
// write is sent again (what go-redis and the AWS SDK do when a connection
// dies between a request and its answer: the caller sees the resend's
// answer) or the caller gets an error (the client gave up; the write landed
// all the same). A store must recognise its own resent write, and a caller
// must treat an error as "it may have happened".
package lostreply

import (
	"context"
	"errors"
	"strings"
	"sync"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/redis/go-redis/v9"

	"github.com/hourglass/hourglass/shared/ledger"
)

// Mode is what follows a lost answer.
type Mode int

// Modes.
const (
	// Resend: the write is sent again and the caller gets that answer.
	Resend Mode = iota + 1
	// Fail: the caller gets ErrLost (the write was applied).
	Fail
)

// ErrLost is the error a Fail-mode write returns.
var ErrLost = errors.New("lostreply: the answer was lost after the write was applied")

// Switch decides which writes lose their answers. It is safe for concurrent
// use; the zero Switch loses nothing.
type Switch struct {
	mu      sync.Mutex
	pending []Mode
	lost    int
	// Match, if set, limits the writes that may lose their answer (by the
	// Redis command name in lower case, or the DynamoDB operation name).
	Match func(name string) bool
}

// Arm makes the next writes lose their answers, one per mode given.
func (s *Switch) Arm(modes ...Mode) {
	s.mu.Lock()
	s.pending = append(s.pending, modes...)
	s.mu.Unlock()
}

// Disarm drops what Arm asked for and not used yet.
func (s *Switch) Disarm() {
	s.mu.Lock()
	s.pending = nil
	s.mu.Unlock()
}

// Lost counts the answers lost so far.
func (s *Switch) Lost() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.lost
}

func (s *Switch) take(name string) Mode {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.pending) == 0 || (s.Match != nil && !s.Match(name)) {
		return 0
	}
	m := s.pending[0]
	s.pending = s.pending[1:]
	s.lost++
	return m
}

func (s *Switch) unTake(m Mode) {
	s.mu.Lock()
	s.pending = append([]Mode{m}, s.pending...)
	s.lost--
	s.mu.Unlock()
}

// redisWrites are the commands the ledgers write with.
var redisWrites = map[string]bool{
	"evalsha": true, "eval": true, "zadd": true, "zrem": true, "hset": true, "hsetnx": true,
	"hdel": true, "del": true, "zremrangebyscore": true, "hincrby": true, "set": true,
}

// Hook returns a go-redis hook through which the switch acts on a client.
func (s *Switch) Hook() redis.Hook { return hook{s} }

type hook struct{ s *Switch }

func (h hook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h hook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		name := strings.ToLower(cmd.Name())
		if !redisWrites[name] {
			return next(ctx, cmd)
		}
		mode := h.s.take(name)
		if mode == 0 {
			return next(ctx, cmd)
		}
		first := redis.NewCmd(ctx, cmd.Args()...)
		if err := next(ctx, first); redis.HasErrorPrefix(err, "NOSCRIPT") {
			// Nothing was applied (go-redis loads the script next): the
			// answer to lose is the next write's.
			h.s.unTake(mode)
			return next(ctx, cmd)
		}
		if mode == Fail {
			cmd.SetErr(ErrLost)
			return ErrLost
		}
		return next(ctx, cmd)
	}
}

func (h hook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		write := ""
		for _, c := range cmds {
			if n := strings.ToLower(c.Name()); redisWrites[n] {
				write = n
				break
			}
		}
		if write == "" {
			return next(ctx, cmds)
		}
		mode := h.s.take(write)
		if mode == 0 {
			return next(ctx, cmds)
		}
		copies := make([]redis.Cmder, len(cmds))
		for i, c := range cmds {
			copies[i] = redis.NewCmd(ctx, c.Args()...)
		}
		_ = next(ctx, copies)
		if mode == Fail {
			for _, c := range cmds {
				c.SetErr(ErrLost)
			}
			return ErrLost
		}
		return next(ctx, cmds)
	}
}

// Dynamo wraps a DynamoDB client: its writes (PutItem, UpdateItem,
// DeleteItem) go through the switch.
func (s *Switch) Dynamo(db ledger.DynamoAPI) ledger.DynamoAPI { return dynamo{db, s} }

type dynamo struct {
	ledger.DynamoAPI
	s *Switch
}

// write runs call as the switch says.
func write[T any](s *Switch, name string, call func() (T, error)) (T, error) {
	switch s.take(name) {
	case Resend:
		_, _ = call()
	case Fail:
		_, _ = call()
		var zero T
		return zero, ErrLost
	}
	return call()
}

func (d dynamo) PutItem(ctx context.Context, in *dynamodb.PutItemInput, opt ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error) {
	return write(d.s, "PutItem", func() (*dynamodb.PutItemOutput, error) { return d.DynamoAPI.PutItem(ctx, in, opt...) })
}

func (d dynamo) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, opt ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	return write(d.s, "UpdateItem", func() (*dynamodb.UpdateItemOutput, error) { return d.DynamoAPI.UpdateItem(ctx, in, opt...) })
}

func (d dynamo) DeleteItem(ctx context.Context, in *dynamodb.DeleteItemInput, opt ...func(*dynamodb.Options)) (*dynamodb.DeleteItemOutput, error) {
	return write(d.s, "DeleteItem", func() (*dynamodb.DeleteItemOutput, error) { return d.DynamoAPI.DeleteItem(ctx, in, opt...) })
}
