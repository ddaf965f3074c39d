package seckill

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/oklog/ulid/v2"
	"github.com/shopspring/decimal"

	"github.com/hourglass/hourglass/shared/clock"
	"github.com/hourglass/hourglass/shared/correlation"
	"github.com/hourglass/hourglass/shared/delayq"
	"github.com/hourglass/hourglass/shared/metrics"
	"github.com/hourglass/hourglass/shared/money"
	"github.com/hourglass/hourglass/shared/validation"
)

// Defaults of a Service.
const (
	// DefaultBacklog bounds an item's order jobs waiting for the poller.
	DefaultBacklog = 50_000
	// DefaultHold is how long a buyer's limit may be held while stock is
	// taken from another shard; takes after it are refused.
	DefaultHold = 10 * time.Second
	// settingsTTL is how long a container trusts its copy of an item's
	// settings before reading them again (a purchase under settings of an
	// older version is refused by the script and retried, so staleness
	// costs a round trip, never correctness).
	settingsTTL = time.Second
	// DefaultPreheatTimeout is how long a preheat may take before another
	// container (the next preheat of the item, the compensation pass) may
	// finish it or undo it: far longer than the few round trips it needs,
	// short enough that shards frozen by a container that died are not
	// refusing buyers for long.
	DefaultPreheatTimeout = 30 * time.Second
)

// Config configures a Service.
type Config struct {
	Store  *Store
	Clock  clock.Clock
	Logger *slog.Logger
	// Backlog bounds an item's order jobs waiting for the poller (split
	// evenly over its shards); past it, purchases are refused with
	// ErrBacklogFull.
	Backlog int64
	Hold    time.Duration
	// Memory is how long a container trusts what it saw (sold out, ended)
	// before asking Redis again; 0 turns the memory off.
	Memory time.Duration
	// OnScheduled, if set, hears of every order job scheduled (the local
	// stack wakes its poller with it).
	OnScheduled func(due time.Time)
	// Metrics, if set, counts admissions and refusals by reason.
	Metrics *metrics.Emitter
	// Prices are the rules of an item's price and currency (a withdrawal's
	// amount rules: HOURGLASS_CURRENCIES, HOURGLASS_MAX_AMOUNT); zero means
	// CNY, USD, EUR and JPY up to 1,000,000.
	Prices money.Rules
	// PreheatTimeout is a preheat's deadline (DefaultPreheatTimeout).
	PreheatTimeout time.Duration
}

// Service is the flash-sale API: preheat, item state, purchase, own purchase.
type Service struct {
	cfg Config

	mu     sync.Mutex
	items  map[string]itemEntry
	memory map[string]memoryEntry
	// buyers are the users this container admitted, per item, so that a
	// buyer's retry answers already_purchased even when the item is
	// remembered sold out (a retry that reaches another container learns it
	// from Redis).
	buyers map[string]buyerSet
}

// buyerSet is the buyers a container admitted in one sale (version) of an
// item: those of an earlier sale bought nothing in this one.
type buyerSet struct {
	version int64
	users   map[string]bool
}

type itemEntry struct {
	settings
	at time.Time
}

// memoryEntry is the seed's "memory flag": an item this container saw sold
// out or ended, refused without asking Redis until the entry expires, or a
// preheat (a newer version) invalidates it.
type memoryEntry struct {
	version int64
	err     error
	at      time.Time
}

// maxRememberedBuyers bounds the buyers a container remembers per item.
const maxRememberedBuyers = 100_000

// NewService checks cfg, fills in defaults and returns a Service.
func NewService(cfg Config) (*Service, error) {
	if cfg.Store == nil || cfg.Clock == nil {
		return nil, errors.New("seckill: service needs a store and a clock")
	}
	cfg.Logger = cmp.Or(cfg.Logger, slog.Default())
	cfg.Backlog = cmp.Or(cfg.Backlog, DefaultBacklog)
	cfg.Hold = cmp.Or(cfg.Hold, DefaultHold)
	cfg.PreheatTimeout = cmp.Or(cfg.PreheatTimeout, DefaultPreheatTimeout)
	if len(cfg.Prices.Currencies) == 0 {
		cfg.Prices = money.Rules{Currencies: []string{"CNY", "USD", "EUR", "JPY"}, Max: decimal.NewFromInt(1_000_000)}
	}
	if cfg.Backlog < 1 || cfg.Hold <= 0 || cfg.Memory < 0 || cfg.PreheatTimeout <= 0 {
		return nil, fmt.Errorf("seckill: bad settings: backlog %d, hold %s, memory %s, preheat timeout %s",
			cfg.Backlog, cfg.Hold, cfg.Memory, cfg.PreheatTimeout)
	}
	return &Service{cfg: cfg, items: map[string]itemEntry{}, memory: map[string]memoryEntry{},
		buyers: map[string]buyerSet{}}, nil
}

// Clock is the service's clock: a caller judging a Sale before Preheat
// judges it at the same time.
func (s *Service) Clock() clock.Clock { return s.cfg.Clock }

// Prices are the rules of an item's price the service judges a Sale by,
// defaults filled in.
func (s *Service) Prices() money.Rules { return s.cfg.Prices }

// NewPurchaseID returns a new purchase id; ids sort by creation time.
func NewPurchaseID(now time.Time) string {
	return "pu_" + ulid.MustNew(ulid.Timestamp(now), ulid.DefaultEntropy()).String()
}

// purchaseTime is when purchase id pid was made, to the millisecond; the
// zero time if pid is not one of ours.
func purchaseTime(pid string) time.Time {
	id, err := ulid.ParseStrict(strings.TrimPrefix(pid, "pu_"))
	if err != nil {
		return time.Time{}
	}
	return ulid.Time(id.Time()).UTC()
}

// OrderID is the id of the order made for a purchase: derived from it, so
// making the order twice makes the same order.
func OrderID(purchaseID string) string {
	if len(purchaseID) > 3 && purchaseID[:3] == "pu_" {
		return "or_" + purchaseID[3:]
	}
	return "or_" + purchaseID
}

// settings returns the item's settings (version 0 when it is unknown), from
// this container's copy while it is fresh.
func (s *Service) settings(ctx context.Context, item string, now time.Time, fresh bool) (settings, error) {
	s.mu.Lock()
	e, ok := s.items[item]
	s.mu.Unlock()
	if ok && !fresh && now.Sub(e.at) < settingsTTL && !now.Before(e.at) {
		return e.settings, nil
	}
	st, err := s.cfg.Store.settings(ctx, item)
	if err != nil {
		return settings{}, err
	}
	s.mu.Lock()
	s.items[item] = itemEntry{settings: st, at: now}
	s.mu.Unlock()
	return st, nil
}

func (s *Service) remembered(item, user string, now time.Time) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.memory[item]
	if !ok {
		return nil
	}
	if now.Sub(e.at) >= s.cfg.Memory || now.Before(e.at) {
		delete(s.memory, item)
		return nil
	}
	if b := s.buyers[item]; e.err == ErrSoldOut && b.version == e.version && b.users[user] {
		return ErrAlreadyPurchased
	}
	return e.err
}

func (s *Service) remember(item string, version int64, err error, now time.Time) {
	s.mu.Lock()
	s.memory[item] = memoryEntry{version: version, err: err, at: now}
	s.mu.Unlock()
}

// forget drops what the container remembers of item, unless it is about a
// version at least as new as version (0: forget regardless).
func (s *Service) forget(item string, version int64) {
	s.mu.Lock()
	if e, ok := s.memory[item]; ok && (version == 0 || e.version < version) {
		delete(s.memory, item)
	}
	delete(s.items, item)
	if version == 0 {
		delete(s.buyers, item)
	}
	s.mu.Unlock()
}

// State returns an item's public state.
func (s *Service) State(ctx context.Context, itemID string) (State, error) {
	if !ValidItemID(itemID) {
		return State{}, ErrNotFound
	}
	now := s.cfg.Clock.Now().UTC()
	set, err := s.settings(ctx, itemID, now, false)
	if err != nil {
		return State{}, err
	}
	if set.version == 0 {
		return State{}, ErrNotFound
	}
	metas, ok, err := s.cfg.Store.metas(ctx, itemID, set.shards)
	if err != nil {
		return State{}, err
	}
	if !ok || slices.ContainsFunc(metas, func(m shardMeta) bool { return m.frozen != 0 }) {
		// Between a preheat's freeze and its last reset the shards hold
		// two sales, or none yet: the item is being preheated, not gone.
		_, open, err := s.cfg.Store.readIntent(ctx, itemID)
		switch {
		case err != nil:
			return State{}, err
		case open:
			return State{}, ErrPreheating
		case !ok:
			return State{}, ErrNotFound
		}
	}
	var left int64
	for _, m := range metas {
		left += m.left
	}
	s.forget(itemID, metas[0].version) // a newer sale than what this container remembers
	m := metas[0]
	return stateOf(Item{ID: itemID, StartsAt: m.starts, EndsAt: m.ends, PerUserLimit: m.limit,
		Price: m.price, Currency: m.currency, Window: m.window}, left, now), nil
}

// stateOf is the public state of sale it with left units, at now.
func stateOf(it Item, left int64, now time.Time) State {
	starts, ends := it.StartsAt, it.EndsAt
	st := State{ItemID: it.ID, StockLeft: left, StartsAt: clock.Format(starts), EndsAt: clock.Format(ends),
		PerUserLimit: it.PerUserLimit}
	if it.Currency != "" {
		price := money.Format(it.Price, it.Currency)
		st.Price, st.Currency = &price, &it.Currency
	}
	if it.Window > 0 {
		secs := int64(it.Window / time.Second)
		st.PaymentWindowSeconds = &secs
	}
	switch {
	case !now.Before(ends):
		st.Status = Ended
	case now.Before(starts):
		st.Status = Upcoming
	case left == 0:
		st.Status = SoldOut
	default:
		st.Status = Live
	}
	return st
}

// Purchase admits or refuses one purchase attempt of user for quantity units
// of an item; a quantity out of 1..MaxPerUserLimit or a malformed item id is
// refused with a *validation.Error (see CheckPurchase).
//
// Cross-shard protocol. The user's home shard (a hash of the user id) counts
// everything the user bought of the item, so the per-user limit is checked and
// updated atomically in one place. The common case is one script there: limit,
// window, backlog and stock checked, stock taken, purchase recorded and order
// job enqueued. When the home shard has no stock left, that same script
// instead holds the requested quantity against the user's limit (a hold with a
// deadline) and the caller visits the other shards one by one: each visit is
// one script that takes the stock there, records the purchase and enqueues its
// order job, but only before the hold's deadline. Then the home shard settles
// the hold (records where the purchase lives), or, if no shard had stock,
// gives the quantity back. A caller that dies midway leaves a hold that the
// compensation pass ends after its deadline: settled if a shard recorded the
// purchase, given back otherwise. Since takes are refused past the deadline
// and the pass waits beyond it, a quantity is never both given back and sold,
// and the limit holds whatever fails.
func (s *Service) Purchase(ctx context.Context, itemID, userID string, qty int) (Purchase, error) {
	if err := CheckPurchase(itemID, qty); err != nil {
		return Purchase{}, err
	}
	now := s.cfg.Clock.Now().UTC()
	if err := s.remembered(itemID, userID, now); err != nil {
		s.countRefusal(err)
		return Purchase{}, err
	}
	set, err := s.settings(ctx, itemID, now, false)
	if err != nil {
		return Purchase{}, err
	}
	a := attempt{item: itemID, user: userID, pid: NewPurchaseID(now), qty: qty, now: now, holdUntil: now.Add(s.cfg.Hold)}
	for range 2 { // a second round only if the item was preheated under us
		if set.version == 0 {
			return Purchase{}, ErrNotFound
		}
		a.shards, a.version, a.starts, a.ends, a.limit = set.shards, set.version, set.starts, set.ends, set.limit
		a.home = delayq.ShardOf(userID, a.shards)
		a.backlog = (s.cfg.Backlog + int64(a.shards) - 1) / int64(a.shards)
		res, err := s.cfg.Store.admit(ctx, a)
		if err != nil {
			return Purchase{}, err
		}
		switch res.code {
		case codeUnknown, codeStale:
			// Unknown may be the answer of a shard the item's sale no
			// longer has (a re-preheat with fewer shards dropped it) to a
			// copy of the settings from before: only fresh settings of
			// the same version prove the item unknown.
			fresh, err := s.settings(ctx, itemID, now, true)
			if err != nil {
				return Purchase{}, err
			}
			if res.code == codeUnknown && (fresh.version == 0 || fresh.version == set.version) {
				return Purchase{}, s.refusal(itemID, res, now)
			}
			set = fresh
			// A new id for the new version: "another version" may be the
			// answer of a retry (go-redis resends a script whose reply was
			// lost) whose first run admitted this id under the old one,
			// before the preheat. Reused, the id would be one purchase in
			// two sales, sharing one order.
			a.pid = NewPurchaseID(now)
			continue
		case codeAdmitted:
			return s.admitted(ctx, a, a.home), nil
		case codeHold:
			return s.borrow(ctx, a, res.extra == 0)
		}
		return Purchase{}, s.refusal(itemID, res, now)
	}
	return Purchase{}, errors.New("seckill: the item keeps being preheated again")
}

func (s *Service) admitted(ctx context.Context, a attempt, shard int) Purchase {
	// The one line that ties the purchase request's id to the purchase and
	// order ids every later step logs (one per admitted purchase: bounded by
	// the stock, not by the crowd).
	correlation.Info(s.cfg.Logger, correlation.ID(ctx), "purchase admitted",
		slog.String("item_id", a.item), slog.String("purchase_id", a.pid), slog.String("order_id", OrderID(a.pid)),
		slog.Int("quantity", a.qty), slog.Int("shard", shard))
	if s.cfg.OnScheduled != nil {
		s.cfg.OnScheduled(a.now)
	}
	s.cfg.Metrics.Count(metrics.Admitted, a.qty, nil)
	s.mu.Lock()
	b := s.buyers[a.item]
	if b.users == nil || b.version < a.version {
		b = buyerSet{version: a.version, users: map[string]bool{}}
		s.buyers[a.item] = b
	}
	if b.version == a.version && len(b.users) < maxRememberedBuyers {
		b.users[a.user] = true
	}
	s.mu.Unlock()
	return Purchase{ID: a.pid, ItemID: a.item, UserID: a.user, Quantity: a.qty, Status: Reserved,
		Shard: shard, Home: a.home, CreatedAt: a.now, UpdatedAt: a.now}
}

// refusal maps a refusing script answer to its error, remembering what will
// not change soon.
func (s *Service) refusal(item string, res admission, now time.Time) error {
	err := s.refusalErr(item, res, now)
	s.countRefusal(err)
	return err
}

// refusalReasons are the Reason dimension of the Refusals metric.
var refusalReasons = []struct {
	err    error
	reason string
}{
	{ErrSoldOut, "sold_out"}, {ErrAlreadyPurchased, "already_purchased"}, {ErrNotStarted, "not_started"},
	{ErrEnded, "ended"}, {ErrBacklogFull, "backlog_full"}, {ErrPreheating, "preheating"},
}

func (s *Service) countRefusal(err error) {
	for _, r := range refusalReasons {
		if errors.Is(err, r.err) {
			s.cfg.Metrics.Count(metrics.Refusals, 1, map[string]string{"Reason": r.reason})
			return
		}
	}
}

func (s *Service) refusalErr(item string, res admission, now time.Time) error {
	switch res.code {
	case codeUnknown:
		s.forget(item, 0)
		return ErrNotFound
	case codeNotStarted:
		return fmt.Errorf("%w: it starts at %s", ErrNotStarted, clock.Format(time.UnixMilli(res.extra)))
	case codeEnded:
		s.remember(item, res.version, ErrEnded, now)
		return ErrEnded
	case codeLimitReached:
		return ErrAlreadyPurchased
	case codeBacklogFull:
		return ErrBacklogFull
	case codeSoldOut:
		if res.extra != 0 {
			// Stock is left, just not as much as asked for: the item is not
			// sold out for smaller purchases, so nothing is remembered.
			return ErrNotEnoughLeft
		}
		s.remember(item, res.version, ErrSoldOut, now)
		return ErrSoldOut
	case codeTooMany:
		return validation.New("quantity", "must be at most the per-user limit of %d", res.extra)
	case codeFrozen:
		return ErrPreheating
	}
	return fmt.Errorf("seckill: unexpected admission answer %d", res.code)
}

// borrow takes stock for a held purchase from the other shards in turn.
// homeEmpty says the home shard had no stock left at all (not just too
// little for the quantity).
func (s *Service) borrow(ctx context.Context, a attempt, homeEmpty bool) (Purchase, error) {
	backlogged, empty := false, homeEmpty
	for i := 1; i < a.shards; i++ {
		n := (a.home + i) % a.shards
		// Each take is judged against the hold's deadline at the time it is
		// made: a caller stalled past it (and past the compensation pass that
		// gave the hold back) must be refused, or the limit would not hold.
		a.now = s.cfg.Clock.Now().UTC()
		res, err := s.cfg.Store.take(ctx, a, n)
		if err != nil {
			return Purchase{}, err // the hold expires; compensation ends it
		}
		switch res.code {
		case codeAdmitted:
			if err := s.cfg.Store.settle(ctx, a, n); err != nil {
				s.cfg.Logger.Warn("hold not settled; compensation will", "item_id", a.item, "purchase_id", a.pid, "error", err.Error())
			}
			return s.admitted(ctx, a, n), nil
		case codeBacklogFull:
			backlogged = true
			continue
		case codeSoldOut:
			empty = empty && res.extra == 0
			continue
		}
		// Ended, re-preheated (or being preheated) or past the hold: no
		// stock will be found under this sale.
		if _, err := s.cfg.Store.unclaim(ctx, a.item, a.home, a.user, a.pid, a.qty, true); err != nil {
			return Purchase{}, err
		}
		switch res.code {
		case codeEnded:
			return Purchase{}, s.refusal(a.item, admission{code: codeEnded, version: a.version}, a.now)
		case codeFrozen, codeUnknown:
			// Being preheated, or preheated again under this purchase
			// (take.lua's 0): the new sale may well have stock, so the
			// answer is "retry", never "sold out".
			s.countRefusal(ErrPreheating)
			return Purchase{}, ErrPreheating
		}
		return Purchase{}, ErrSoldOut
	}
	if _, err := s.cfg.Store.unclaim(ctx, a.item, a.home, a.user, a.pid, a.qty, true); err != nil {
		return Purchase{}, err
	}
	if backlogged {
		s.countRefusal(ErrBacklogFull)
		return Purchase{}, ErrBacklogFull
	}
	left := int64(0) // every shard empty: the item is sold out
	if !empty {
		left = -1
	}
	return Purchase{}, s.refusal(a.item, admission{code: codeSoldOut, version: a.version, extra: left}, a.now)
}

// Mine returns the user's latest purchase of an item.
func (s *Service) Mine(ctx context.Context, itemID, userID string) (Purchase, error) {
	if !ValidItemID(itemID) {
		return Purchase{}, ErrNotFound
	}
	set, err := s.settings(ctx, itemID, s.cfg.Clock.Now(), false)
	if err != nil {
		return Purchase{}, err
	}
	if set.version == 0 {
		return Purchase{}, ErrNotFound
	}
	home := delayq.ShardOf(userID, set.shards)
	refs, err := s.cfg.Store.userPurchases(ctx, itemID, home, userID)
	if err != nil {
		return Purchase{}, err
	}
	for i := len(refs) - 1; i >= 0; i-- {
		if refs[i].shard < 0 {
			continue // still being taken from another shard
		}
		p, err := s.cfg.Store.purchase(ctx, itemID, refs[i].shard, orderJob{pid: refs[i].pid, qty: refs[i].qty, home: home, user: userID})
		if err == nil && p.OrderID != "" {
			p.Amount, p.Currency, _ = set.terms(p.Quantity, p.UpdatedAt)
		}
		return p, err
	}
	return Purchase{}, ErrNoPurchase
}
