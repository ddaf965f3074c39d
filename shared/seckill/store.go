package seckill

import (
	"cmp"
	"context"
	_ "embed"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/shopspring/decimal"

	"github.com/hourglass/hourglass/shared/delayq"
	"github.com/hourglass/hourglass/shared/money"
	"github.com/hourglass/hourglass/shared/orders"
)

var (
	//go:embed lua/admit.lua
	admitSrc string
	//go:embed lua/take.lua
	takeSrc string
	//go:embed lua/settle.lua
	settleSrc string
	//go:embed lua/unclaim.lua
	unclaimSrc string
	//go:embed lua/settle_order.lua
	settleOrderSrc string
	//go:embed lua/repair.lua
	repairSrc string
	//go:embed lua/end_order.lua
	endOrderSrc string
	//go:embed lua/enqueue_event.lua
	enqueueEventSrc string
	//go:embed lua/retire.lua
	retireSrc string
	//go:embed lua/registry_trim.lua
	registryTrimSrc string

	admitScript        = redis.NewScript(admitSrc)
	takeScript         = redis.NewScript(takeSrc)
	settleScript       = redis.NewScript(settleSrc)
	unclaimScript      = redis.NewScript(unclaimSrc)
	settleOrderScript  = redis.NewScript(settleOrderSrc)
	repairScript       = redis.NewScript(repairSrc)
	endOrderScript     = redis.NewScript(endOrderSrc)
	enqueueEventScript = redis.NewScript(enqueueEventSrc)
	retireScript       = redis.NewScript(retireSrc)
	registryTrimScript = redis.NewScript(registryTrimSrc)
)

// EventsQueue is the always-polled queue of order events that can no longer
// go on their item shard's own queue (the shard is retired: no longer
// polled). Its job ids are "<item>|" and the event job (see eventJob).
const EventsQueue = "seckill-events"

// Store is the flash sale's Redis state: item shards, buyers, purchases,
// holds and each item's order queue.
type Store struct {
	rdb    redis.Cmdable
	prefix string
	// eventShards is the shard count of the events queue.
	eventShards int
	// grace is how long after its pay-by time an order still takes a
	// payment signed before it (see Payment.PaidAt): its expiry waits that
	// long.
	grace time.Duration
	// keyCache holds the key names of item shards seen, so the admission
	// path does not build them again for every purchase.
	keyCache sync.Map // shardRef -> shardKeys
}

type shardRef struct {
	item string
	n    int
}

// StoreOption configures a Store.
type StoreOption func(*Store)

// WithEventShards splits the events queue over n shards (default 1). Like
// any queue's, the count must not shrink while jobs wait in its shards.
func WithEventShards(n int) StoreOption { return func(s *Store) { s.eventShards = max(n, 1) } }

// WithPaymentGrace lets a payment signed by the provider before its order's
// pay-by time, and arriving within d of being signed, pay the order (see
// Payment.PaidAt); an unpaid order then expires d after its pay-by time,
// not at it, so that such a payment finds it still open. 0 (the default)
// judges every payment by its arrival.
func WithPaymentGrace(d time.Duration) StoreOption { return func(s *Store) { s.grace = max(d, 0) } }

// PaymentGrace is the store's grace (WithPaymentGrace).
func (s *Store) PaymentGrace() time.Duration { return s.grace }

// NewStore returns the Store on rdb with key prefix (default "hg:").
func NewStore(rdb redis.Cmdable, prefix string, opts ...StoreOption) *Store {
	prefix = cmp.Or(prefix, "hg:")
	s := &Store{rdb: rdb, prefix: prefix, eventShards: 1}
	for _, o := range opts {
		o(s)
	}
	return s
}

// Queue returns the order queue of an item with shards shards.
func (s *Store) Queue(item string, shards int) (*delayq.Queue, error) {
	return delayq.New(s.rdb, delayq.Options{Prefix: s.prefix, Name: QueueName(item), Kind: JobKind, Shards: shards})
}

// EventsQueue returns the events queue (see EventsQueue).
func (s *Store) EventsQueue() *delayq.Queue {
	q, err := delayq.New(s.rdb, delayq.Options{Prefix: s.prefix, Name: EventsQueue, Kind: JobKind, Shards: s.eventShards})
	if err != nil {
		panic(err) // the options are ours and valid
	}
	return q
}

// Queues returns every queue of the flash sale the poller drains: each
// registered item's order queue over its polled shards, and the events
// queue.
func (s *Store) Queues(ctx context.Context) ([]*delayq.Queue, error) {
	items, err := s.Items(ctx)
	if err != nil {
		return nil, err
	}
	qs := make([]*delayq.Queue, 0, len(items)+1)
	for item, reg := range items {
		q, err := s.Queue(item, reg.Polled)
		if err != nil {
			return nil, err
		}
		qs = append(qs, q)
	}
	return append(qs, s.EventsQueue()), nil
}

func (s *Store) keys(item string, n int) shardKeys {
	ref := shardRef{item, n}
	if k, ok := s.keyCache.Load(ref); ok {
		return k.(shardKeys)
	}
	k := newShardKeys(delayq.KeysOf(s.prefix, QueueName(item), n))
	s.keyCache.Store(ref, k)
	return k
}

// settings are an item's settings for one version, as its shard 0 holds them.
type settings struct {
	version      int64
	shards       int
	starts, ends time.Time
	limit        int
	// price ("" for none), currency and payment window (0 for none).
	price, currency string
	window          time.Duration
}

// terms are the amount and pay-by time of an order of qty units made at now
// under the settings: no amount without a price, no pay-by time without a
// window.
func (st settings) terms(qty int, now time.Time) (amount, currency string, payBy time.Time) {
	if st.window > 0 {
		payBy = now.Add(st.window)
	}
	if st.price == "" {
		return "", "", payBy
	}
	price, err := decimal.NewFromString(st.price)
	if err != nil {
		return "", "", payBy
	}
	return money.Format(price.Mul(decimal.NewFromInt(int64(qty))), st.currency), st.currency, payBy
}

// settings reads an item's settings; version 0 means the item is unknown.
func (s *Store) settings(ctx context.Context, item string) (settings, error) {
	vals, err := s.rdb.HMGet(ctx, s.keys(item, 0).Meta, "version", "shards", "starts", "ends", "limit", "price", "currency", "window").Result()
	if err != nil {
		return settings{}, fmt.Errorf("seckill: read %s: %w", item, err)
	}
	num := func(i int) int64 {
		str, _ := vals[i].(string)
		v, _ := strconv.ParseInt(str, 10, 64)
		return v
	}
	str := func(i int) string { v, _ := vals[i].(string); return v }
	return settings{version: num(0), shards: int(num(1)), starts: time.UnixMilli(num(2)).UTC(),
		ends: time.UnixMilli(num(3)).UTC(), limit: int(num(4)), price: str(5), currency: str(6),
		window: time.Duration(num(7)) * time.Millisecond}, nil
}

// Registration is an item as the registry lists it.
type Registration struct {
	// Shards is the sale's shard count; Polled the shards whose order
	// queues the poller drains (at least Shards: more while shards of an
	// earlier sale may still hold jobs); Version the preheat's that
	// registered it (0 for an entry of the first layout).
	Shards, Polled int
	Version        int64
	// entry is the registry's value as read, for a compare and set.
	entry string
}

// parseRegistration reads "<shards>/<polled>/<version>", or "<shards>".
func parseRegistration(v string) (Registration, bool) {
	r := Registration{entry: v}
	f := strings.Split(v, "/")
	var err error
	switch len(f) {
	case 1:
		r.Shards, err = strconv.Atoi(f[0])
		r.Polled = r.Shards
	case 3:
		var e1, e2 error
		r.Shards, err = strconv.Atoi(f[0])
		r.Polled, e1 = strconv.Atoi(f[1])
		r.Version, e2 = strconv.ParseInt(f[2], 10, 64)
		err = errors.Join(err, e1, e2)
	default:
		return r, false
	}
	return r, err == nil && r.Shards > 0 && r.Polled >= r.Shards && r.Polled <= MaxShards
}

func (r Registration) String() string {
	return strconv.Itoa(r.Shards) + "/" + strconv.Itoa(r.Polled) + "/" + strconv.FormatInt(r.Version, 10)
}

// Registration returns item's registry entry; the zero Registration if the
// item is not registered.
func (s *Store) Registration(ctx context.Context, item string) (Registration, error) {
	v, err := s.rdb.HGet(ctx, registryKey(s.prefix), item).Result()
	if errors.Is(err, redis.Nil) {
		return Registration{}, nil
	}
	if err != nil {
		return Registration{}, fmt.Errorf("seckill: look up %s: %w", item, err)
	}
	r, ok := parseRegistration(v)
	if !ok {
		return Registration{}, fmt.Errorf("seckill: registry entry of %s: %q", item, v)
	}
	return r, nil
}

// Shards returns the registered shard count of item's sale, 0 if it is
// unknown.
func (s *Store) Shards(ctx context.Context, item string) (int, error) {
	r, err := s.Registration(ctx, item)
	return r.Shards, err
}

// Items returns every registered item.
func (s *Store) Items(ctx context.Context) (map[string]Registration, error) {
	all, err := s.rdb.HGetAll(ctx, registryKey(s.prefix)).Result()
	if err != nil {
		return nil, fmt.Errorf("seckill: list items: %w", err)
	}
	out := make(map[string]Registration, len(all))
	for item, v := range all {
		if r, ok := parseRegistration(v); ok {
			out[item] = r
		}
	}
	return out, nil
}

// shardMeta is one shard's meta hash.
type shardMeta struct {
	version      int64
	shards       int
	starts, ends time.Time
	limit        int
	// The price of a unit (zero without one), its currency ("" without a
	// price) and the payment window (0 without one), as preheated.
	price                           decimal.Decimal
	currency                        string
	window                          time.Duration
	stock, left, confirmd, released int64
	awaiting, paid, expired         int64
	// What preheats and the compensation pass mark (see keys.go).
	frozen, fence, dropped int64
	retired                bool
}

// admitted is the units admitted since the preheat, each admission once:
// those purchases hold now (stock - left) and those released or expired
// back to the stock since (a unit that expired and sold again counts twice).
func (m shardMeta) admitted() int64 { return m.stock - m.left + m.released + m.expired }

// pending is the units admitted whose order is not made yet or not paid
// yet: those that left the stock and were neither confirmed nor paid.
func (m shardMeta) pending() int64 { return m.stock - m.left - m.confirmd - m.paid }

// leftField is the meta field of the stock left under an item version.
func leftField(version int64) string { return "left:" + strconv.FormatInt(version, 10) }

// metas reads the meta of every shard of item, in one pipelined round trip.
// A shard without a sale gives ok=false.
func (s *Store) metas(ctx context.Context, item string, shards int) ([]shardMeta, bool, error) {
	out, err := s.rawMetas(ctx, item, shards)
	if err != nil {
		return nil, false, err
	}
	for _, m := range out {
		if m.version == 0 {
			return nil, false, nil
		}
	}
	return out, true, nil
}

// rawMetas reads the meta of shards 0..shards-1 of item, with or without a
// sale, in one pipelined round trip.
func (s *Store) rawMetas(ctx context.Context, item string, shards int) ([]shardMeta, error) {
	cmds := make([]*redis.MapStringStringCmd, shards)
	_, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for n := range shards {
			cmds[n] = p.HGetAll(ctx, s.keys(item, n).Meta)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("seckill: read %s: %w", item, err)
	}
	out := make([]shardMeta, shards)
	for n, c := range cmds {
		m := c.Val()
		num := func(f string) int64 {
			v, _ := strconv.ParseInt(m[f], 10, 64)
			return v
		}
		version := num("version")
		out[n] = shardMeta{
			version: version, shards: int(num("shards")), starts: time.UnixMilli(num("starts")).UTC(),
			ends: time.UnixMilli(num("ends")).UTC(), limit: int(num("limit")), stock: num("stock"),
			left: num(leftField(version)), confirmd: num("confirmed"), released: num("released"),
			awaiting: num("awaiting"), paid: num("paid"), expired: num("expired"),
			frozen: num("frozen"), fence: num("fence"), dropped: num("dropped"), retired: m["retired"] != "",
			currency: m["currency"], window: time.Duration(num("window")) * time.Millisecond,
		}
		if out[n].currency != "" {
			// Written by Preheat from a decimal.Decimal: a bad one is no price.
			price, perr := decimal.NewFromString(m["price"])
			if perr != nil {
				out[n].currency = ""
			}
			out[n].price = price
		}
		if out[n].frozen != 0 || out[n].retired {
			out[n].left = num("left_aside") // moved aside: see freeze.lua
		}
	}
	return out, nil
}

// admission is the answer of the admit and take scripts.
type admission struct {
	code    int64
	version int64
	extra   int64
}

const (
	codeUnknown      = 0
	codeStale        = 1
	codeNotStarted   = 2
	codeEnded        = 3
	codeLimitReached = 4
	codeBacklogFull  = 5
	codeAdmitted     = 6
	codeSoldOut      = 7
	codeHold         = 8
	codeHoldExpired  = 9
	codeTooMany      = 10
	codeFrozen       = 11
)

// decodeAdmission reads a script's {code, [version,] [extra]}; extra is -1
// when the script gave none.
func decodeAdmission(res []any, withVersion bool) (admission, error) {
	a := admission{extra: -1}
	if len(res) == 0 {
		return a, errors.New("empty reply")
	}
	a.code, _ = res[0].(int64)
	rest := res[1:]
	if withVersion && len(rest) > 0 {
		v, _ := rest[0].(string)
		a.version, _ = strconv.ParseInt(v, 10, 64)
		rest = rest[1:]
	}
	if len(rest) > 0 {
		switch x := rest[0].(type) {
		case int64:
			a.extra = x
		case string:
			a.extra, _ = strconv.ParseInt(x, 10, 64)
		}
	}
	return a, nil
}

type attempt struct {
	item, user, pid   string
	qty, shards, home int
	now, holdUntil    time.Time
	backlog           int64
	// The item's settings as the caller knows them, for its version.
	version      int64
	starts, ends time.Time
	limit        int
}

// job is the order job of the attempt's purchase.
func (a attempt) job() orderJob { return orderJob{pid: a.pid, qty: a.qty, home: a.home, user: a.user} }

func (s *Store) admit(ctx context.Context, a attempt) (admission, error) {
	k := s.keys(a.item, a.home)
	// The caller's settings decide whether the four-command path may be
	// tried; on any other path the script reads them from the meta of the
	// item's version.
	fast := "0"
	if !a.now.Before(a.starts) && a.now.Before(a.ends) && a.qty <= a.limit {
		fast = "1"
	}
	qty, job := strconv.Itoa(a.qty), a.job().String()
	res, err := admitScript.Run(ctx, s.rdb, k.admit,
		a.user, a.now.UnixMilli(), leftField(a.version), "-"+qty, a.backlog, job,
		qty+"|"+a.pid+"@"+strconv.Itoa(a.home)+":"+qty, fast, a.holdUntil.UnixMilli()).Result()
	if err != nil {
		return admission{}, fmt.Errorf("seckill: admit on %s: %w", k.Tag, err)
	}
	switch res := res.(type) {
	case int64:
		return admission{code: codeAdmitted, version: a.version, extra: res}, nil
	case []any:
		return decodeAdmission(res, true)
	}
	return admission{}, fmt.Errorf("seckill: admit on %s: unexpected answer %v", k.Tag, res)
}

func (s *Store) take(ctx context.Context, a attempt, n int) (admission, error) {
	k := s.keys(a.item, n)
	res, err := takeScript.Run(ctx, s.rdb, []string{k.Meta, k.Purchases, k.Due},
		a.user, a.qty, a.now.UnixMilli(), a.pid, a.backlog, a.holdUntil.UnixMilli(), a.home, a.version,
		a.job().String()).Slice()
	if err != nil {
		return admission{}, fmt.Errorf("seckill: take on %s: %w", k.Tag, err)
	}
	return decodeAdmission(res, false)
}

func holdMember(pid string, qty int, user string) string {
	return pid + "|" + strconv.Itoa(qty) + "|" + user
}

func (s *Store) settle(ctx context.Context, a attempt, n int) error {
	k := s.keys(a.item, a.home)
	err := settleScript.Run(ctx, s.rdb, []string{k.Users, k.Holds}, a.user, a.pid, n, holdMember(a.pid, a.qty, a.user)).Err()
	if err != nil {
		return fmt.Errorf("seckill: settle hold on %s: %w", k.Tag, err)
	}
	return nil
}

// unclaim gives a purchase's quantity back to the user's limit on the home
// shard; with hold, only if the hold is still there.
func (s *Store) unclaim(ctx context.Context, item string, home int, user, pid string, qty int, hold bool) (bool, error) {
	k := s.keys(item, home)
	member := ""
	if hold {
		member = holdMember(pid, qty, user)
	}
	n, err := unclaimScript.Run(ctx, s.rdb, []string{k.Users, k.Holds}, user, pid, qty, member).Int()
	if err != nil {
		return false, fmt.Errorf("seckill: give back the limit on %s: %w", k.Tag, err)
	}
	return n == 1, nil
}

// Purchase reads the purchase of order job jobID of an item's shard n.
func (s *Store) Purchase(ctx context.Context, item string, n int, jobID string) (Purchase, error) {
	j, err := parseOrderJob(jobID)
	if err != nil {
		return Purchase{}, err
	}
	return s.purchase(ctx, item, n, j)
}

// purchase reads purchase j of shard n: its record, or, for a purchase made
// on its buyer's home shard and still reserved (it has no record), what the
// buyer's entry and the job say of it.
func (s *Store) purchase(ctx context.Context, item string, n int, j orderJob) (Purchase, error) {
	k := s.keys(item, n)
	var rec, entry *redis.StringCmd
	_, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		rec = p.HGet(ctx, k.Purchases, j.pid)
		if n == j.home {
			entry = p.HGet(ctx, k.Users, j.user)
		}
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return Purchase{}, fmt.Errorf("seckill: read purchase %s: %w", j.pid, err)
	}
	if r, err := rec.Result(); err == nil {
		return decodePurchase(item, n, j.pid, r)
	}
	if entry != nil {
		for _, ref := range parseEntry(entry.Val()) {
			if ref.pid == j.pid && ref.shard == n && ref.qty == j.qty && !ref.released {
				return j.reserved(item), nil
			}
		}
	}
	return Purchase{}, ErrNoPurchase
}

// settleOrder ends a reserved purchase as released, or as confirmed or
// awaiting_payment with order o (then its order.created event is queued,
// and, awaiting payment, its expiry job). It reports whether this call ended
// it, and the record after.
func (s *Store) settleOrder(ctx context.Context, item string, n int, j orderJob, to PurchaseStatus, o Order, now time.Time) (Purchase, bool, error) {
	k := s.keys(item, n)
	payBy, expiry, event := "", "", ""
	if to != Released {
		event = eventJob{typ: orders.Created, at: now, amount: o.Amount, currency: o.Currency, job: j}.String()
	}
	expireAt := ""
	if to == AwaitingPayment {
		payBy, expiry = strconv.FormatInt(o.PayBy.UnixMilli(), 10), expiryJob(j)
		expireAt = strconv.FormatInt(o.PayBy.Add(s.grace).UnixMilli(), 10)
	}
	res, err := settleOrderScript.Run(ctx, s.rdb, []string{k.Meta, k.Purchases, k.Users, k.Due},
		j.pid, string(to), o.ID, now.UnixMilli(), j.user, j.qty, j.created().UnixMilli(), n, payBy, expiry, event, expireAt).Slice()
	if err != nil {
		return Purchase{}, false, fmt.Errorf("seckill: %s purchase %s: %w", to, j.pid, err)
	}
	return settled(item, n, j.pid, res)
}

// settled reads the {code, record} answer of settle_order.lua and
// end_order.lua: the record after, and whether this call changed it.
func settled(item string, n int, pid string, res []any) (Purchase, bool, error) {
	code, _ := res[0].(int64)
	if code == 0 {
		return Purchase{}, false, ErrNoPurchase
	}
	rec, _ := res[1].(string)
	p, err := decodePurchase(item, n, pid, rec)
	return p, code == 1, err
}

// endOrder ends purchase pur, awaiting payment, as its order ended in the
// ledger: paid or expired (its stock back to its shard; the buyer's limit is
// giveBack's). Its order.paid or order.expired event is queued in the same
// step. It reports whether this call ended it, and the record after.
func (s *Store) endOrder(ctx context.Context, pur Purchase, to PurchaseStatus, now time.Time) (Purchase, bool, error) {
	k := s.keys(pur.ItemID, pur.Shard)
	typ := orders.Paid
	if to == Expired {
		typ = orders.Expired
	}
	j := jobOf(pur)
	event := eventJob{typ: typ, at: now, amount: pur.Amount, currency: pur.Currency, job: j}.String()
	res, err := endOrderScript.Run(ctx, s.rdb, []string{k.Meta, k.Purchases, k.Due},
		j.pid, string(to), now.UnixMilli(), expiryJob(j), event).Slice()
	if err != nil {
		return Purchase{}, false, fmt.Errorf("seckill: %s purchase %s: %w", to, j.pid, err)
	}
	p, done, err := settled(pur.ItemID, pur.Shard, j.pid, res)
	p.Amount, p.Currency = pur.Amount, pur.Currency
	return p, done, err
}

// enqueueEvent queues an event job of shard n, due at, unless it is
// queued. A shard that is retired (no longer polled) refuses it; then it
// goes to the events queue, which is always polled.
func (s *Store) enqueueEvent(ctx context.Context, item string, n int, e eventJob) error {
	k := s.keys(item, n)
	job, at := e.String(), e.at.UnixMilli()
	ok, err := enqueueEventScript.Run(ctx, s.rdb, []string{k.Meta, k.Due}, at, job).Int()
	if err != nil {
		return fmt.Errorf("seckill: queue event on %s: %w", k.Tag, err)
	}
	if ok == 1 {
		return nil
	}
	q := s.EventsQueue()
	ek := q.Keys(q.ShardFor(OrderID(e.job.pid)))
	if err := s.rdb.ZAddNX(ctx, ek.Due, redis.Z{Score: float64(at), Member: item + "|" + job}).Err(); err != nil {
		return fmt.Errorf("seckill: queue event on %s: %w", ek.Tag, err)
	}
	return nil
}

// putBack schedules job id of shard n again at due (an early expiry job).
func (s *Store) putBack(ctx context.Context, item string, n int, id string, due time.Time) error {
	k := s.keys(item, n)
	if err := s.rdb.ZAdd(ctx, k.Due, redis.Z{Score: float64(due.UnixMilli()), Member: id}).Err(); err != nil {
		return fmt.Errorf("seckill: put back %s on %s: %w", id, k.Tag, err)
	}
	return nil
}

// decodePurchase reads "status|qty|created|updated|home|requeues|order|user".
func decodePurchase(item string, shard int, pid, rec string) (Purchase, error) {
	f := strings.SplitN(rec, "|", 8)
	if len(f) != 8 {
		return Purchase{}, fmt.Errorf("seckill: purchase %s: bad record %q", pid, rec)
	}
	nums := make([]int64, 5)
	for i := range nums {
		v, err := strconv.ParseInt(f[i+1], 10, 64)
		if err != nil {
			return Purchase{}, fmt.Errorf("seckill: purchase %s: bad record %q", pid, rec)
		}
		nums[i] = v
	}
	p := Purchase{
		ID: pid, ItemID: item, UserID: f[7], Quantity: int(nums[0]), Status: PurchaseStatus(f[0]), OrderID: f[6],
		Shard: shard, Home: int(nums[3]), Requeues: int(nums[4]),
		CreatedAt: time.UnixMilli(nums[1]).UTC(), UpdatedAt: time.UnixMilli(nums[2]).UTC(),
	}
	// An order awaiting payment (and then paid or expired) is
	// "<order id>@<pay by ms>".
	if id, by, ok := strings.Cut(p.OrderID, "@"); ok {
		ms, err := strconv.ParseInt(by, 10, 64)
		if err != nil {
			return Purchase{}, fmt.Errorf("seckill: purchase %s: bad record %q", pid, rec)
		}
		p.OrderID, p.PayBy = id, time.UnixMilli(ms).UTC()
	}
	return p, nil
}

// userPurchases returns the user's purchases from the home shard's entry,
// in the order made.
func (s *Store) userPurchases(ctx context.Context, item string, home int, user string) ([]purchaseRef, error) {
	k := s.keys(item, home)
	entry, err := s.rdb.HGet(ctx, k.Users, user).Result()
	if errors.Is(err, redis.Nil) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("seckill: read buyer: %w", err)
	}
	return parseEntry(entry), nil
}

// purchaseRef is one purchase of a buyer's entry: "<pid>@<shard>:<quantity>",
// "-" for the shard while held (shard -1 here), "!" at the end once released.
type purchaseRef struct {
	pid      string
	shard    int
	qty      int
	released bool
}

// parseEntry reads a buyer's entry, "<total>|<purchase>,<purchase>...".
func parseEntry(entry string) []purchaseRef {
	_, list, _ := strings.Cut(entry, "|")
	var refs []purchaseRef
	for it := range strings.SplitSeq(list, ",") {
		pid, rest, ok := strings.Cut(it, "@")
		if !ok {
			continue
		}
		at, q, _ := strings.Cut(rest, ":")
		ref := purchaseRef{pid: pid, shard: -1}
		q, ref.released = strings.CutSuffix(q, "!")
		if n, err := strconv.Atoi(at); err == nil {
			ref.shard = n
		}
		ref.qty, _ = strconv.Atoi(q)
		refs = append(refs, ref)
	}
	return refs
}

// orderJob is the id of an order job, "<pid>|<quantity>|<home>|<user>": what
// the consumer needs to find a purchase that has no record yet.
type orderJob struct {
	pid  string
	qty  int
	home int
	user string
}

func (j orderJob) String() string {
	return j.pid + "|" + strconv.Itoa(j.qty) + "|" + strconv.Itoa(j.home) + "|" + j.user
}

// created is when the purchase was admitted: its id holds the time.
func (j orderJob) created() time.Time { return purchaseTime(j.pid) }

// reserved is the purchase as it stands before its order is made.
func (j orderJob) reserved(item string) Purchase {
	at := j.created()
	return Purchase{ID: j.pid, ItemID: item, UserID: j.user, Quantity: j.qty, Status: Reserved,
		Shard: j.home, Home: j.home, CreatedAt: at, UpdatedAt: at}
}

func parseOrderJob(id string) (orderJob, error) {
	f := strings.SplitN(id, "|", 4)
	if len(f) == 4 {
		qty, err1 := strconv.Atoi(f[1])
		home, err2 := strconv.Atoi(f[2])
		j := orderJob{pid: f[0], qty: qty, home: home, user: f[3]}
		// Only the form jobOf writes is one: "+1" or "01" would name a job
		// that is not in the queue.
		if err1 == nil && err2 == nil && qty > 0 && qty <= MaxPerUserLimit && home >= 0 && home < MaxShards &&
			!purchaseTime(f[0]).IsZero() && f[3] != "" && j.String() == id {
			return j, nil
		}
	}
	return orderJob{}, fmt.Errorf("%w: order job %q", ErrBadOrderJob, id)
}

// expiryJob is the id of the expiry job of purchase j's order: "ex|" and
// the order job.
func expiryJob(j orderJob) string { return expiryPrefix + j.String() }

// Prefixes of the job ids that are not order jobs (which start "pu_").
const (
	expiryPrefix = "ex|"
	eventPrefix  = "ev|"
)

// eventJob is an order event waiting in the outbox (the item shard's due
// set) to be published: "ev|<type>|<at ms>|<amount>|<currency>|<ref>|" and
// the order job. ref tells events of one type apart (the payment event id
// of a payment.refund_required).
type eventJob struct {
	typ              string
	at               time.Time
	amount, currency string
	ref              string
	job              orderJob
}

func (e eventJob) String() string {
	return eventPrefix + e.typ + "|" + strconv.FormatInt(e.at.UnixMilli(), 10) + "|" + e.amount + "|" + e.currency + "|" +
		e.ref + "|" + e.job.String()
}

func parseEventJob(id string) (eventJob, error) {
	f := strings.SplitN(strings.TrimPrefix(id, eventPrefix), "|", 6)
	if len(f) == 6 && strings.HasPrefix(id, eventPrefix) {
		at, err := strconv.ParseInt(f[1], 10, 64)
		j, jerr := parseOrderJob(f[5])
		e := eventJob{typ: f[0], at: time.UnixMilli(at).UTC(), amount: f[2], currency: f[3], ref: f[4], job: j}
		if err == nil && jerr == nil && e.String() == id {
			return e, nil
		}
	}
	return eventJob{}, fmt.Errorf("%w: event job %q", ErrBadOrderJob, id)
}

// event is the orders.Event of e on an item.
func (e eventJob) event(item string) orders.Event {
	return orders.Event{Type: e.typ, OrderID: OrderID(e.job.pid), PurchaseID: e.job.pid, ItemID: item, UserID: e.job.user,
		Quantity: e.job.qty, Amount: e.amount, Currency: e.currency, At: orders.At(e.at), PaymentEventID: e.ref}
}

// OrderJobID is the id of the order job of p.
func OrderJobID(p Purchase) string { return jobOf(p).String() }

func jobOf(p Purchase) orderJob {
	return orderJob{pid: p.ID, qty: p.Quantity, home: p.Home, user: p.UserID}
}

// ItemStats are an item's counters, summed over its shards.
type ItemStats struct {
	StockLeft int64 `json:"stock_left"`
	Admitted  int64 `json:"admitted"`
	Confirmed int64 `json:"confirmed"`
	// Units of orders awaiting payment, paid, and expired (back in stock).
	AwaitingPayment int64 `json:"awaiting_payment"`
	Paid            int64 `json:"paid"`
	Expired         int64 `json:"expired"`
}

// Stats returns the counters of every registered item.
func (s *Store) Stats(ctx context.Context) (map[string]ItemStats, error) {
	items, err := s.Items(ctx)
	if err != nil {
		return nil, err
	}
	out := make(map[string]ItemStats, len(items))
	for item, reg := range items {
		metas, ok, err := s.metas(ctx, item, reg.Shards)
		if err != nil {
			return nil, err
		}
		if !ok {
			continue
		}
		var st ItemStats
		for _, m := range metas {
			st.StockLeft += m.left
			st.Admitted += m.admitted()
			st.Confirmed += m.confirmd
			st.AwaitingPayment += m.awaiting
			st.Paid += m.paid
			st.Expired += m.expired
		}
		out[item] = st
	}
	return out, nil
}

// Purchases returns every purchase of an item with shards shards, from its
// buyers' entries (a purchase whose stock is still being taken from another
// shard is left out).
func (s *Store) Purchases(ctx context.Context, item string, shards int) ([]Purchase, error) {
	var out []Purchase
	for home := range shards {
		err := s.scanHash(ctx, s.keys(item, home).Users, func(kv []string) error {
			for i := 0; i+1 < len(kv); i += 2 {
				for _, ref := range parseEntry(kv[i+1]) {
					if ref.shard < 0 {
						continue
					}
					p, err := s.purchase(ctx, item, ref.shard, orderJob{pid: ref.pid, qty: ref.qty, home: home, user: kv[i]})
					if err != nil {
						return err
					}
					out = append(out, p)
				}
			}
			return nil
		})
		if err != nil {
			return nil, fmt.Errorf("seckill: list purchases of %s: %w", item, err)
		}
	}
	return out, nil
}

// scanHash runs fn over the fields and values of a hash, 500 fields at a
// time.
func (s *Store) scanHash(ctx context.Context, key string, fn func(kv []string) error) error {
	var cursor uint64
	for {
		kv, next, err := s.rdb.HScan(ctx, key, cursor, "*", 500).Result()
		if err != nil {
			return err
		}
		if err := fn(kv); err != nil {
			return err
		}
		if cursor = next; cursor == 0 {
			return nil
		}
	}
}
