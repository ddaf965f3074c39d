package seckill

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/oklog/ulid/v2"
	"github.com/redis/go-redis/v9"
	"github.com/shopspring/decimal"

	"github.com/hourglass/hourglass/shared/clock"
)

// Preheat protocol. An item's shards live in different hash slots, so no
// script can reset them all at once; yet a preheat is all or nothing across
// them, and two preheats of one item never interleave. So a preheat is a
// two-phase change, driven by an intent record in a slot of its own
// (preheat_begin.lua):
//
//  1. begin: the intent says what the preheat does (its version, settings,
//     the shards it touches: the old sale's and the new one's) and until
//     when (its deadline). An item has one intent at a time: a second
//     preheat is refused (ErrPreheatInProgress) without changing anything.
//  2. freeze every touched shard, in order, one script each (freeze.lua):
//     no order pending there, and the shard frozen for this version in the
//     same step; admission and takes then refuse it (ErrPreheating). Any
//     shard with orders pending ends the preheat: the frozen shards are put
//     back exactly as they were (unfreeze.lua) and it answers
//     ErrOrdersPending, nothing changed anywhere.
//  3. commit the intent: from then on the preheat is rolled forward,
//     whoever finishes it. Register the item (the poller drains every
//     touched shard), reset every shard for the new sale (reset.lua, once
//     per version), close the intent.
//
// A preheat whose container died or stalled is finished by the next
// preheat of the item or the compensation pass, once its deadline passed:
// committed, rolled forward; otherwise moved to "aborting" (so that its
// owner can no longer commit) and rolled back, with every shard fenced
// against its version. A stalled owner that wakes up applies nothing:
// every step is fenced on the version (a frozen shard must be frozen by it,
// a fenced or newer shard refuses it, the intent must still be its own).

var (
	//go:embed lua/preheat_begin.lua
	preheatBeginSrc string
	//go:embed lua/preheat_move.lua
	preheatMoveSrc string
	//go:embed lua/preheat_end.lua
	preheatEndSrc string
	//go:embed lua/freeze.lua
	freezeSrc string
	//go:embed lua/unfreeze.lua
	unfreezeSrc string
	//go:embed lua/reset.lua
	resetSrc string
	//go:embed lua/register.lua
	registerSrc string
	//go:embed lua/unindex.lua
	unindexSrc string

	preheatBeginScript = redis.NewScript(preheatBeginSrc)
	preheatMoveScript  = redis.NewScript(preheatMoveSrc)
	preheatEndScript   = redis.NewScript(preheatEndSrc)
	freezeScript       = redis.NewScript(freezeSrc)
	unfreezeScript     = redis.NewScript(unfreezeSrc)
	resetScript        = redis.NewScript(resetSrc)
	registerScript     = redis.NewScript(registerSrc)
	unindexScript      = redis.NewScript(unindexSrc)
)

// Phases of a preheat's intent.
const (
	phaseFreezing  = "freezing"
	phaseCommitted = "committed"
	phaseAborting  = "aborting"
)

// intent is a preheat under way, as its intent record holds it.
type intent struct {
	// item is the new sale, its Version the preheat's.
	item     Item
	phase    string
	owner    string
	deadline time.Time
	// touched is how many shards the preheat changes: the old sale's (or
	// more, while shards of an earlier sale are still polled) and the new
	// one's.
	touched int
}

// shardStock is shard n's part of the sale's stock.
func shardStock(it Item, n int) int64 {
	if n >= it.Shards {
		return 0
	}
	base, extra := it.Stock/int64(it.Shards), it.Stock%int64(it.Shards)
	if int64(n) < extra {
		base++
	}
	return base
}

// readIntent reads the open intent of item, if any.
func (s *Store) readIntent(ctx context.Context, item string) (intent, bool, error) {
	m, err := s.rdb.HGetAll(ctx, intentKey(s.prefix, item)).Result()
	if err != nil {
		return intent{}, false, fmt.Errorf("seckill: read the preheat of %s: %w", item, err)
	}
	in, ok := decodeIntent(item, m)
	return in, ok, nil
}

func decodeIntent(item string, m map[string]string) (intent, bool) {
	if m["phase"] == "" {
		return intent{}, false
	}
	num := func(f string) int64 {
		v, _ := strconv.ParseInt(m[f], 10, 64)
		return v
	}
	in := intent{phase: m["phase"], owner: m["owner"], deadline: time.UnixMilli(num("deadline")).UTC(),
		touched: int(num("touched")), item: Item{ID: item, Stock: num("stock"), StartsAt: time.UnixMilli(num("starts")).UTC(),
			EndsAt: time.UnixMilli(num("ends")).UTC(), PerUserLimit: int(num("limit")), Shards: int(num("shards")),
			Version: num("version"), Currency: m["currency"], Window: time.Duration(num("window")) * time.Millisecond}}
	if p, err := decimal.NewFromString(m["price"]); err == nil {
		in.item.Price = p
	}
	return in, in.item.Version > 0 && in.touched > 0 && in.touched <= MaxShards && in.item.Shards > 0
}

// Answers of preheat_begin.lua.
const (
	beginDone    = 1
	beginBusy    = 2
	beginExpired = 3
	beginLate    = 4
)

// beginPreheat opens in's intent; it returns the answer of
// preheat_begin.lua and the version (in's, when begun; the other intent's
// otherwise).
func (s *Store) beginPreheat(ctx context.Context, in intent, floor int64, now time.Time) (int64, int64, error) {
	it := in.item
	price := ""
	if it.Currency != "" {
		price = it.Price.String()
	}
	res, err := preheatBeginScript.Run(ctx, s.rdb, []string{intentKey(s.prefix, it.ID)},
		in.owner, now.UnixMilli(), in.deadline.UnixMilli(), floor, in.touched, it.Shards, it.Stock,
		it.StartsAt.UnixMilli(), it.EndsAt.UnixMilli(), it.PerUserLimit, price, it.Currency, it.Window.Milliseconds()).Slice()
	if err != nil {
		return 0, 0, fmt.Errorf("seckill: begin a preheat of %s: %w", it.ID, err)
	}
	if len(res) < 2 {
		return 0, 0, fmt.Errorf("seckill: begin a preheat of %s: unexpected answer %v", it.ID, res)
	}
	code, _ := res[0].(int64)
	v, _ := res[1].(string)
	version, _ := strconv.ParseInt(v, 10, 64)
	return code, version, nil
}

// movePreheat runs preheat_move.lua: op is "commit", "abort" or "recover".
// It returns the intent's phase after, "" if the item has no intent of
// this version.
func (s *Store) movePreheat(ctx context.Context, item string, version int64, op string, now time.Time) (string, error) {
	phase, err := preheatMoveScript.Run(ctx, s.rdb, []string{intentKey(s.prefix, item)}, version, op, now.UnixMilli()).Text()
	if err != nil {
		return "", fmt.Errorf("seckill: %s the preheat of %s: %w", op, item, err)
	}
	return phase, nil
}

// endPreheat closes the intent of version, rolled forward or back on every
// shard, and drops it from the index.
func (s *Store) endPreheat(ctx context.Context, in intent) error {
	if err := preheatEndScript.Run(ctx, s.rdb, []string{intentKey(s.prefix, in.item.ID)}, in.item.Version).Err(); err != nil {
		return fmt.Errorf("seckill: close the preheat of %s: %w", in.item.ID, err)
	}
	return s.unindexPreheat(ctx, in.item.ID, in.deadline)
}

// indexPreheat lists item's open preheat, by its deadline, where the
// compensation pass looks for preheats to finish.
func (s *Store) indexPreheat(ctx context.Context, item string, deadline time.Time) error {
	err := s.rdb.ZAdd(ctx, intentIndexKey(s.prefix), redis.Z{Score: float64(deadline.UnixMilli()), Member: item}).Err()
	if err != nil {
		return fmt.Errorf("seckill: index the preheat of %s: %w", item, err)
	}
	return nil
}

func (s *Store) unindexPreheat(ctx context.Context, item string, deadline time.Time) error {
	if err := unindexScript.Run(ctx, s.rdb, []string{intentIndexKey(s.prefix)}, item, deadline.UnixMilli()).Err(); err != nil {
		return fmt.Errorf("seckill: unindex the preheat of %s: %w", item, err)
	}
	return nil
}

// Answers of freeze.lua.
const (
	freezePending = 0
	freezeDone    = 1
	freezePast    = 2
)

func (s *Store) freeze(ctx context.Context, item string, n int, version int64) (int64, error) {
	k := s.keys(item, n)
	res, err := freezeScript.Run(ctx, s.rdb, []string{k.Meta}, version).Result()
	if err != nil {
		return 0, fmt.Errorf("seckill: freeze %s: %w", k.Tag, err)
	}
	switch res := res.(type) {
	case int64:
		return res, nil
	case []any:
		return freezePast, nil
	}
	return 0, fmt.Errorf("seckill: freeze %s: unexpected answer %v", k.Tag, res)
}

func (s *Store) unfreeze(ctx context.Context, item string, n int, version int64, fence bool) error {
	k := s.keys(item, n)
	f := "0"
	if fence {
		f = "1"
	}
	if err := unfreezeScript.Run(ctx, s.rdb, []string{k.Meta}, version, f).Err(); err != nil {
		return fmt.Errorf("seckill: unfreeze %s: %w", k.Tag, err)
	}
	return nil
}

// reset resets shard n for sale it (a shard it does not use is dropped);
// false when the shard is not the preheat's to reset (see reset.lua).
func (s *Store) reset(ctx context.Context, it Item, n int) (bool, error) {
	k := s.keys(it.ID, n)
	price, shards := "", it.Shards
	if it.Currency != "" {
		price = it.Price.String()
	}
	if n >= it.Shards {
		shards = 0
	}
	ok, err := resetScript.Run(ctx, s.rdb, []string{k.Meta, k.Users, k.Purchases, k.Holds},
		it.Version, shards, it.StartsAt.UnixMilli(), it.EndsAt.UnixMilli(), it.PerUserLimit, shardStock(it, n),
		price, it.Currency, it.Window.Milliseconds()).Int()
	if err != nil {
		return false, fmt.Errorf("seckill: reset %s: %w", k.Tag, err)
	}
	return ok == 1, nil
}

// register lists the sale of it in the registry, with touched shards
// polled at least.
func (s *Store) register(ctx context.Context, it Item, touched int) error {
	err := registerScript.Run(ctx, s.rdb, []string{registryKey(s.prefix)}, it.ID, it.Shards, touched, it.Version).Err()
	if err != nil {
		return fmt.Errorf("seckill: register %s: %w", it.ID, err)
	}
	return nil
}

// rollForward finishes committed preheat in: registered, every touched
// shard reset, the intent closed. superseded reports a shard that was not
// its to reset any more (a later preheat has it). Safe to run by several
// containers at once, and again.
func (s *Store) rollForward(ctx context.Context, in intent) (superseded bool, err error) {
	// Registered first: the poller drains every touched shard before any
	// of them can queue a job of the new sale.
	if err := s.register(ctx, in.item, in.touched); err != nil {
		return false, err
	}
	for n := range in.touched {
		ok, err := s.reset(ctx, in.item, n)
		if err != nil {
			return false, err
		}
		superseded = superseded || !ok
	}
	return superseded, s.endPreheat(ctx, in)
}

// rollBack undoes preheat in on every touched shard and closes its intent;
// fence: the preheat is not the caller's own (see unfreeze.lua).
func (s *Store) rollBack(ctx context.Context, in intent, fence bool) error {
	for n := range in.touched {
		if err := s.unfreeze(ctx, in.item.ID, n, in.item.Version, fence); err != nil {
			return err
		}
	}
	return s.endPreheat(ctx, in)
}

// recoverPreheat finishes preheat in if its deadline passed by now: rolled
// forward if it committed, else rolled back. It returns the phase it found
// ("freezing": not due, nothing done; "": finished by another meanwhile).
func (s *Store) recoverPreheat(ctx context.Context, in intent, now time.Time) (string, error) {
	phase, err := s.movePreheat(ctx, in.item.ID, in.item.Version, "recover", now)
	if err != nil {
		return "", err
	}
	switch phase {
	case phaseCommitted:
		_, err = s.rollForward(ctx, in)
	case phaseAborting:
		err = s.rollBack(ctx, in, true)
	case "":
		err = s.unindexPreheat(ctx, in.item.ID, in.deadline)
	}
	return phase, err
}

// Preheat sets up (or resets) sale: the stock split over its shards, the
// window and the per-user limit. A sale that breaks a rule (see Sale.Check)
// is refused with a *validation.Error. Buyers and purchases of an earlier
// sale of the item are dropped, which is refused with ErrOrdersPending while
// any of them still waits for its order or its payment;
// ErrPreheatInProgress while another preheat of the item is under way. Any
// refusal changes nothing. See "Preheat protocol" above.
func (s *Service) Preheat(ctx context.Context, sale Sale) (State, error) {
	now := s.cfg.Clock.Now().UTC()
	if err := sale.Check(now, s.cfg.Prices); err != nil {
		return State{}, err
	}
	it := sale.item(now)
	in, err := s.begin(ctx, it, now)
	if err != nil {
		return State{}, err
	}
	for n := range in.touched {
		code, err := s.cfg.Store.freeze(ctx, it.ID, n, in.item.Version)
		switch {
		case err != nil:
			s.abort(ctx, in)
			return State{}, err
		case code == freezePending:
			s.abort(ctx, in)
			return State{}, ErrOrdersPending
		case code != freezeDone:
			s.abort(ctx, in)
			return State{}, ErrPreheatAbandoned
		}
	}
	phase, err := s.cfg.Store.movePreheat(ctx, it.ID, in.item.Version, "commit", s.cfg.Clock.Now())
	if err != nil {
		return State{}, err // committed or not, recovery finishes it after its deadline
	}
	if phase != phaseCommitted {
		return State{}, ErrPreheatAbandoned // rolled back by another container
	}
	superseded, err := s.cfg.Store.rollForward(ctx, in)
	if err != nil {
		return State{}, err // committed: recovery rolls it forward after its deadline
	}
	if superseded {
		return State{}, ErrPreheatAbandoned
	}
	s.forget(it.ID, 0)
	s.cfg.Logger.Info("item preheated", "item_id", it.ID, "stock", it.Stock, "shards", it.Shards,
		"per_user_limit", it.PerUserLimit, "starts_at", clock.Format(it.StartsAt), "ends_at", clock.Format(it.EndsAt),
		"version", in.item.Version, "price", it.Price.String(), "currency", it.Currency, "payment_window", it.Window.String())
	// The sale as this preheat set it up: read back, it may already be
	// another preheat's, half applied (answered "being preheated" to
	// readers), or that sale's.
	return stateOf(it, it.Stock, s.cfg.Clock.Now().UTC()), nil
}

// begin opens the intent of preheat it, first finishing a preheat of the
// item whose deadline passed. Orders pending in the current sale are
// refused before anything is written (freeze.lua checks again, atomically).
func (s *Service) begin(ctx context.Context, it Item, now time.Time) (intent, error) {
	owner := ulid.Make().String()
	for range 3 {
		reg, err := s.cfg.Store.Registration(ctx, it.ID)
		if err != nil {
			return intent{}, err
		}
		in := intent{item: it, owner: owner, deadline: now.Add(s.cfg.PreheatTimeout), touched: max(reg.Polled, it.Shards)}
		metas, err := s.cfg.Store.rawMetas(ctx, it.ID, in.touched)
		if err != nil {
			return intent{}, err
		}
		floor := now.UnixMilli()
		for _, m := range metas {
			if m.version != 0 && m.frozen == 0 && m.pending() > 0 {
				return intent{}, ErrOrdersPending
			}
			floor = max(floor, m.version+1, m.fence+1, m.dropped+1, m.frozen+1)
		}
		code, version, err := s.cfg.Store.beginPreheat(ctx, in, floor, now)
		if err != nil {
			return intent{}, err
		}
		switch code {
		case beginDone:
			in.item.Version = version
			if err := s.cfg.Store.indexPreheat(ctx, it.ID, in.deadline); err != nil {
				s.abort(ctx, in)
				return intent{}, err
			}
			return in, nil
		case beginBusy:
			return intent{}, ErrPreheatInProgress
		case beginLate:
			return intent{}, ErrPreheatAbandoned // resent past its deadline; another preheat came since
		}
		old, ok, err := s.cfg.Store.readIntent(ctx, it.ID)
		if err != nil {
			return intent{}, err
		}
		if ok {
			phase, err := s.cfg.Store.recoverPreheat(ctx, old, now)
			if err != nil {
				return intent{}, err
			}
			s.cfg.Logger.Warn("preheat past its deadline finished by the next preheat", "item_id", it.ID,
				"version", old.item.Version, "phase", phase)
		}
	}
	return intent{}, ErrPreheatInProgress
}

// abort rolls back the caller's own preheat in, refused: every shard it
// froze back as it was, its intent closed. What it cannot undo now (Redis
// failing) is undone by recovery once the deadline passed.
func (s *Service) abort(ctx context.Context, in intent) {
	ctx = context.WithoutCancel(ctx)
	phase, err := s.cfg.Store.movePreheat(ctx, in.item.ID, in.item.Version, "abort", s.cfg.Clock.Now())
	if err == nil && phase != phaseCommitted {
		err = s.cfg.Store.rollBack(ctx, in, false)
	}
	if err != nil || phase == phaseCommitted {
		s.cfg.Logger.Warn("refused preheat not rolled back; recovery will after its deadline", "item_id", in.item.ID,
			"version", in.item.Version, "phase", phase, "error", fmt.Sprint(err))
	}
}

// preheats finishes the preheats whose deadline passed by now: those the
// index lists, and any of the registered items (a preheat that died before
// it was indexed).
func (c *Compensation) preheats(ctx context.Context, now time.Time, registered map[string]Registration, rep *Report) error {
	due, err := c.Store.rdb.ZRangeByScoreWithScores(ctx, intentIndexKey(c.Store.prefix), &redis.ZRangeBy{
		Min: "-inf", Max: strconv.FormatInt(now.UnixMilli(), 10), Count: 100,
	}).Result()
	if err != nil {
		return fmt.Errorf("seckill: list open preheats: %w", err)
	}
	indexed := map[string]time.Time{}
	for _, z := range due {
		if item, ok := z.Member.(string); ok {
			indexed[item] = time.UnixMilli(int64(z.Score)).UTC()
		}
	}
	items := make([]string, 0, len(indexed)+len(registered))
	for item := range indexed {
		items = append(items, item)
	}
	for item := range registered {
		if _, ok := indexed[item]; !ok {
			items = append(items, item)
		}
	}
	cmds := make([]*redis.MapStringStringCmd, len(items))
	_, err = c.Store.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, item := range items {
			cmds[i] = p.HGetAll(ctx, intentKey(c.Store.prefix, item))
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("seckill: read open preheats: %w", err)
	}
	var errs []error
	for i, item := range items {
		in, ok := decodeIntent(item, cmds[i].Val())
		switch {
		case !ok:
			if at, listed := indexed[item]; listed {
				errs = append(errs, c.Store.unindexPreheat(ctx, item, at)) // closed; its entry left behind
			}
			continue
		case now.Before(in.deadline):
			continue
		}
		phase, err := c.Store.recoverPreheat(ctx, in, now)
		if err != nil {
			errs = append(errs, fmt.Errorf("seckill: finish the preheat of %s: %w", item, err))
			continue
		}
		switch phase {
		case phaseCommitted:
			rep.PreheatsRolledForward++
		case phaseAborting:
			rep.PreheatsRolledBack++
		default:
			continue
		}
		c.Log.Warn("preheat past its deadline finished", "item_id", item, "version", in.item.Version, "phase", phase,
			"deadline", clock.Format(in.deadline))
	}
	return errors.Join(errs...)
}

// strayFreezes unfreezes the shards of a registered sale frozen by a
// preheat that is no longer open: a freeze that reached Redis after its
// preheat was rolled back (its call resent late). metas were read before
// the intent: a shard frozen by an open preheat had its intent open then.
// Nothing is fenced: the preheat ended, and a shard it froze and rolled
// back meanwhile is left exactly as it was.
func (c *Compensation) strayFreezes(ctx context.Context, item string, metas []shardMeta, rep *Report) error {
	var frozen []int
	for n, m := range metas {
		if m.frozen != 0 {
			frozen = append(frozen, n)
		}
	}
	if len(frozen) == 0 {
		return nil
	}
	in, open, err := c.Store.readIntent(ctx, item)
	if err != nil {
		return err
	}
	for _, n := range frozen {
		if open && in.item.Version == metas[n].frozen {
			continue
		}
		if err := c.Store.unfreeze(ctx, item, n, metas[n].frozen, false); err != nil {
			return err
		}
		rep.StrayFreezes++
		c.Log.Warn("shard frozen by a preheat no longer open; unfrozen", "item_id", item, "shard", n, "version", metas[n].frozen)
	}
	return nil
}
