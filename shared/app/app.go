// Package app composes Hourglass's parts from configuration, so that every
// Lambda main and the local stack wire the very same code the same way.
package app

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/secretsmanager"
	"github.com/redis/go-redis/v9"

	"github.com/hourglass/hourglass/shared/clock"
	"github.com/hourglass/hourglass/shared/config"
	"github.com/hourglass/hourglass/shared/consumer"
	"github.com/hourglass/hourglass/shared/delayq"
	"github.com/hourglass/hourglass/shared/finance"
	"github.com/hourglass/hourglass/shared/httpapi"
	"github.com/hourglass/hourglass/shared/ledger"
	"github.com/hourglass/hourglass/shared/metrics"
	"github.com/hourglass/hourglass/shared/ops"
	"github.com/hourglass/hourglass/shared/orders"
	"github.com/hourglass/hourglass/shared/payout"
	"github.com/hourglass/hourglass/shared/poller"
	"github.com/hourglass/hourglass/shared/ratelimit"
	"github.com/hourglass/hourglass/shared/redisconn"
	"github.com/hourglass/hourglass/shared/redisguard"
	"github.com/hourglass/hourglass/shared/seckill"
	"github.com/hourglass/hourglass/shared/secrets"
	"github.com/hourglass/hourglass/shared/snstopic"
	"github.com/hourglass/hourglass/shared/withdrawal"
)

// requestTimeout bounds one API request, so that a hung dependency answers
// 503 rather than holding the caller.
const requestTimeout = 5 * time.Second

// NewLogger returns the JSON logger every process uses, and routes go-redis's
// own messages through it.
func NewLogger(w io.Writer, level slog.Level) *slog.Logger {
	return NewLoggerFrom(slog.NewJSONHandler(w, &slog.HandlerOptions{Level: level}))
}

// NewLoggerFrom is NewLogger over a handler of the caller's.
func NewLoggerFrom(h slog.Handler) *slog.Logger {
	log := slog.New(h)
	redis.SetLogger(redisLogger{log})
	return log
}

type redisLogger struct{ log *slog.Logger }

func (l redisLogger) Printf(ctx context.Context, format string, v ...any) {
	l.log.WarnContext(ctx, "redis client: "+fmt.Sprintf(format, v...))
}

// App holds the parts built once per process.
type App struct {
	Config      config.Config
	Log         *slog.Logger
	Clock       clock.Clock
	Redis       redis.UniversalClient
	Withdrawals *delayq.Queue
	// Ledger is the system of record: *ledger.Redis or *ledger.Dynamo.
	Ledger  withdrawal.Ledger
	Service *withdrawal.Service
	// Dynamo is the DynamoDB client of the dynamodb ledger, else nil.
	Dynamo *dynamodb.Client
	// Items is the flash sale's Redis state, Seckill its API, Orders the
	// order ledger.
	Items   *seckill.Store
	Seckill *seckill.Service
	Orders  seckill.OrderLedger
	// Metrics is shared by every part; it writes nowhere until EmitMetricsTo.
	Metrics *metrics.Emitter
	// Limiter holds the per-user and per-source rate limits of the API.
	Limiter *ratelimit.Limiter
	// Secrets are the signing keys Provider, Notifier and the callback route
	// use: from the configuration (New), or kept fresh from Secrets Manager
	// (OpenSecrets, set by ForLambda).
	Secrets Secrets

	// lambda: built by ForLambda, where no channel may fall back to a log.
	lambda bool

	scheduled atomic.Pointer[func(time.Time)]

	mu          sync.Mutex
	itemQueues  map[string]*delayq.Queue
	itemsListed time.Time
}

// Connect returns the Redis client of cfg.RedisURL, guarded by the command
// profile of HOURGLASS_REDIS_COMMANDS.
func Connect(cfg config.Config, opts ...ConnectOption) (redis.UniversalClient, error) {
	return connect(cfg, redisconn.Options{Password: string(cfg.RedisPassword)}, opts)
}

// ConnectOption tunes Connect and ConnectWith.
type ConnectOption func(*connectOptions)

type connectOptions struct{ log *slog.Logger }

// WithLogger logs the command guard's refusals to log (by default to
// slog.Default()).
func WithLogger(log *slog.Logger) ConnectOption {
	return func(o *connectOptions) { o.log = log }
}

func connect(cfg config.Config, ro redisconn.Options, opts []ConnectOption) (redis.UniversalClient, error) {
	if cfg.RedisURL == "" {
		return nil, errors.New("app: REDIS_URL is not set")
	}
	var o connectOptions
	for _, f := range opts {
		f(&o)
	}
	p, err := redisguard.ParseProfile(cfg.RedisCommands)
	if err != nil {
		return nil, fmt.Errorf("app: HOURGLASS_REDIS_COMMANDS: %w", err)
	}
	ro.Guard = redisguard.New(p, o.log)
	return redisconn.New(string(cfg.RedisURL), ro)
}

// Secrets are the sources of the secrets that rotate. Redis is nil when the
// AUTH token is REDIS_URL's own.
type Secrets struct {
	Redis, Payout, Finance, Webhook secrets.Source
	// Payments authenticates the payment provider's confirmations; Orders
	// signs the order events' webhook.
	Payments, Orders secrets.Source
}

// ConfiguredSecrets are cfg's secrets as constants: the local stack's, from
// the environment.
func ConfiguredSecrets(cfg config.Config) Secrets {
	s := Secrets{
		Payout:   secrets.Static{Current: string(cfg.PayoutSecret)},
		Finance:  secrets.Static{Current: string(cfg.FinanceSecret)},
		Webhook:  secrets.Static{Current: string(cfg.PayoutWebhookSecret)},
		Payments: secrets.Static{Current: string(cfg.PaymentsWebhookSecret)},
		Orders:   secrets.Static{Current: string(cfg.OrdersSecret)},
	}
	if cfg.RedisPassword != "" {
		s.Redis = secrets.Static{Current: string(cfg.RedisPassword)}
	}
	return s
}

// OpenSecrets returns the sources of cfg's secrets: each one cfg names by a
// *_SECRET_ID is read from Secrets Manager through api (nil: the SDK's
// client of the environment) now, so that a cold start that cannot read it
// fails, and again every HOURGLASS_SECRET_TTL and when its key is refused;
// the others are constants from cfg.
func OpenSecrets(ctx context.Context, cfg config.Config, log *slog.Logger, api secrets.Getter) (Secrets, error) {
	s := ConfiguredSecrets(cfg)
	wanted := []struct {
		id  string
		dst *secrets.Source
	}{
		{cfg.RedisAuthSecretID, &s.Redis},
		{cfg.PayoutSecretID, &s.Payout},
		{cfg.FinanceSecretID, &s.Finance},
		{cfg.WebhookSecretID, &s.Webhook},
		{cfg.PaymentsSecretID, &s.Payments},
		{cfg.OrdersSecretID, &s.Orders},
	}
	for _, w := range wanted {
		if w.id == "" {
			continue
		}
		if api == nil {
			awsCfg, err := AWSConfig(ctx)
			if err != nil {
				return Secrets{}, err
			}
			api = secretsmanager.NewFromConfig(awsCfg)
		}
		src := secrets.NewCached(api, w.id, secrets.CachedOptions{TTL: cfg.SecretTTL, Logger: log})
		if _, err := src.Keys(ctx); err != nil {
			return Secrets{}, err
		}
		*w.dst = src
	}
	return s, nil
}

// CheckDeployed judges the keys read from Secrets Manager (those cfg names
// by a *_SECRET_ID) as a deployed function must: none may be one of the
// public development defaults (config.DevSecrets), and no key may serve
// two channels (a payout callback's key that also confirms payments lets
// whoever holds one forge the other). Errors name the settings, never a
// key.
func (s Secrets) CheckDeployed(ctx context.Context, cfg config.Config) error {
	sources := []secrets.Source{s.Redis, s.Payout, s.Finance, s.Webhook, s.Payments, s.Orders}
	var errs []error
	owner := map[string]string{} // key -> the setting whose secret holds it
	for i, ch := range cfg.Channels() {
		if ch.ID == "" || sources[i] == nil {
			continue
		}
		k, err := sources[i].Keys(ctx)
		if err != nil {
			return fmt.Errorf("secrets: %s: %w", ch.IDSetting, err)
		}
		for _, key := range k.All() {
			switch {
			case config.IsDevSecret(string(key)):
				errs = append(errs, fmt.Errorf("config: %s: the secret %s holds a public development default "+
					"as %s: put a random key in it (at least 32 bytes) and give it to the other party", ch.IDSetting, ch.ID, ch.What))
			case owner[string(key)] != "" && owner[string(key)] != ch.IDSetting:
				errs = append(errs, fmt.Errorf("config: %s: its secret holds a key that %s's secret holds too: "+
					"give each channel a key of its own, so that one leaked or misused cannot sign for the other",
					ch.IDSetting, owner[string(key)]))
			default:
				owner[string(key)] = ch.IDSetting
			}
		}
	}
	return errors.Join(errs...)
}

// ConnectWith returns the Redis client of cfg.RedisURL that authenticates
// with s.Redis, if set, and follows its rotations.
func ConnectWith(cfg config.Config, s Secrets, opts ...ConnectOption) (redis.UniversalClient, error) {
	return connect(cfg, redisconn.Options{Secret: s.Redis}, opts)
}

// ResolveSecrets reads the secrets cfg names from Secrets Manager (the
// ElastiCache AUTH token, the payout and finance signing secrets, the
// callbacks' secret) into cfg, once: for short-lived processes (the CLI).
// Functions use OpenSecrets, which follows rotations.
func ResolveSecrets(ctx context.Context, cfg *config.Config) error {
	wanted := []struct {
		arn string
		dst *config.Secret
	}{
		{cfg.RedisAuthSecretID, &cfg.RedisPassword},
		{cfg.PayoutSecretID, &cfg.PayoutSecret},
		{cfg.FinanceSecretID, &cfg.FinanceSecret},
		{cfg.WebhookSecretID, &cfg.PayoutWebhookSecret},
		{cfg.PaymentsSecretID, &cfg.PaymentsWebhookSecret},
		{cfg.OrdersSecretID, &cfg.OrdersSecret},
	}
	var api *secretsmanager.Client
	for _, w := range wanted {
		if w.arn == "" {
			continue
		}
		if api == nil {
			awsCfg, err := AWSConfig(ctx)
			if err != nil {
				return err
			}
			api = secretsmanager.NewFromConfig(awsCfg)
		}
		v, err := secrets.Value(ctx, api, w.arn)
		if err != nil {
			return err
		}
		*w.dst = config.Secret(v)
	}
	return nil
}

// New builds the withdrawal parts on rdb.
func New(cfg config.Config, log *slog.Logger, rdb redis.UniversalClient) (*App, error) {
	q, err := delayq.New(rdb, delayq.Options{
		Prefix: cfg.RedisPrefix, Name: withdrawal.QueueName, Kind: withdrawal.JobKind, Shards: cfg.QueueShards,
	})
	if err != nil {
		return nil, err
	}
	rules, err := cfg.WithdrawalRules()
	if err != nil {
		return nil, err
	}
	a := &App{Config: cfg, Log: log, Clock: clock.System{}, Redis: rdb, Withdrawals: q,
		Items: seckill.NewStore(rdb, cfg.RedisPrefix, seckill.WithEventShards(cfg.QueueShards),
			seckill.WithPaymentGrace(cfg.PaymentGrace)),
		itemQueues: map[string]*delayq.Queue{},
		Secrets:    ConfiguredSecrets(cfg)}
	rates, err := cfg.RateRules()
	if err != nil {
		return nil, err
	}
	a.Limiter = ratelimit.New(rdb, cfg.RedisPrefix, rates, a.Clock)
	a.Metrics = metrics.New(io.Discard, a.Clock)
	// A job the poller handed to the work queue is out of Redis until the
	// consumer is done with it: the reconciler leaves it that long.
	grace := cmp.Or(cfg.ReconcileGrace, cfg.ReconcileInterval)
	switch cfg.Ledger {
	case "dynamodb":
		if a.Dynamo, err = DynamoClient(cfg); err != nil {
			return nil, err
		}
		d := ledger.NewDynamo(a.Dynamo, a.Tables(), q, ledger.DynamoOptions{
			Horizon: cfg.RedisHorizon, Grace: grace, Logger: log,
		})
		a.Ledger, a.Orders = d, d
	default:
		r := ledger.NewRedis(rdb, q)
		r.Grace = grace
		a.Ledger, a.Orders = r, ledger.NewRedisOrders(rdb, cfg.RedisPrefix)
	}
	a.Service, err = withdrawal.NewService(withdrawal.Config{
		Ledger: a.Ledger, Clock: a.Clock, Rules: rules, ShardFor: q.ShardFor, OnScheduled: a.notifyScheduled,
		Logger: log, Metrics: a.Metrics,
	})
	if err != nil {
		return nil, err
	}
	a.Seckill, err = seckill.NewService(seckill.Config{
		Store: a.Items, Clock: a.Clock, Logger: log, Backlog: cfg.OrderBacklog, Memory: cfg.SoldOutMemory,
		OnScheduled: a.notifyScheduled, Metrics: a.Metrics, Prices: rules.Money(),
	})
	if err != nil {
		return nil, err
	}
	return a, nil
}

// Tables names the DynamoDB ledger's tables.
func (a *App) Tables() ledger.Tables {
	return ledger.Tables{Withdrawals: a.Config.WithdrawalsTable, Orders: a.Config.OrdersTable, Idempotency: a.Config.IdempotencyTable}
}

// DynamoClient returns the DynamoDB client of cfg: the SDK's configuration,
// with DYNAMODB_ENDPOINT (dynalite locally) when set, where any credentials
// do and the region defaults to us-east-1.
func DynamoClient(cfg config.Config) (*dynamodb.Client, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	awsCfg, err := AWSConfig(ctx)
	if err != nil {
		return nil, err
	}
	if cfg.DynamoDBEndpoint == "" {
		return dynamodb.NewFromConfig(awsCfg), nil
	}
	awsCfg.Region = cmp.Or(awsCfg.Region, "us-east-1")
	if _, err := awsCfg.Credentials.Retrieve(ctx); err != nil {
		awsCfg.Credentials = credentials.NewStaticCredentialsProvider("local", "local", "")
	}
	return dynamodb.NewFromConfig(awsCfg, func(o *dynamodb.Options) { o.BaseEndpoint = aws.String(cfg.DynamoDBEndpoint) }), nil
}

// CreateTables creates the DynamoDB ledger's missing tables (local use).
func (a *App) CreateTables(ctx context.Context) error {
	if a.Dynamo == nil {
		return nil
	}
	return ledger.CreateTables(ctx, a.Dynamo, a.Tables())
}

// Reconcile runs the ledger's reconciler (every withdrawal not done with gets
// its job back if it lost it; with DynamoDB also what Redis forgot) and the
// flash-sale compensation pass.
func (a *App) Reconcile(ctx context.Context, now time.Time) (ledger.Reconciliation, seckill.Report, error) {
	var rec ledger.Reconciliation
	var err error
	if r, ok := a.Ledger.(reconciler); ok {
		rec, err = r.Reconcile(ctx, now)
		a.emitReconciled(rec)
	}
	rep, cerr := a.Compensation().Run(ctx, now)
	return rec, rep, errors.Join(err, cerr)
}

// emitReconciled emits a reconciler pass: its repairs (Reconciled, which
// alarms) apart from its promotions of long delays into Redis (Promoted,
// normal traffic).
func (a *App) emitReconciled(rec ledger.Reconciliation) {
	a.Metrics.Emit(nil, metrics.Of(metrics.Reconciled, metrics.Count, float64(rec.Total())),
		metrics.Of(metrics.Promoted, metrics.Count, float64(rec.Promoted)))
}

type reconciler interface {
	Reconcile(ctx context.Context, now time.Time) (ledger.Reconciliation, error)
}

type keyPurger interface {
	PurgeExpiredKeys(ctx context.Context, now time.Time) (int, error)
}

// EmitMetricsTo makes every part write its CloudWatch EMF lines to w.
func (a *App) EmitMetricsTo(w io.Writer) { a.Metrics.SetOutput(w) }

func (a *App) notifyScheduled(due time.Time) {
	if f := a.scheduled.Load(); f != nil {
		(*f)(due)
	}
}

// OnScheduled sets what hears of every newly scheduled due time.
func (a *App) OnScheduled(f func(time.Time)) { a.scheduled.Store(&f) }

// itemsTTL is how long the list of flash-sale items (and so of their order
// queues) is trusted before it is read again.
const itemsTTL = time.Second

// Queues lists the delay queues the poller drains: withdrawals, the order
// queue of every registered flash-sale item (over every shard that may
// still hold jobs) and the flash sale's events queue.
func (a *App) Queues(ctx context.Context) ([]*delayq.Queue, error) {
	if err := a.refreshItems(ctx, false); err != nil {
		return nil, err
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	qs := make([]*delayq.Queue, 0, 1+len(a.itemQueues))
	qs = append(qs, a.Withdrawals)
	for _, q := range a.itemQueues {
		qs = append(qs, q)
	}
	return qs, nil
}

func (a *App) refreshItems(ctx context.Context, force bool) error {
	now := a.Clock.Now()
	a.mu.Lock()
	fresh := !force && now.Sub(a.itemsListed) < itemsTTL
	a.mu.Unlock()
	if fresh {
		return nil
	}
	all, err := a.Items.Queues(ctx)
	if err != nil {
		return err
	}
	qs := make(map[string]*delayq.Queue, len(all))
	for _, q := range all {
		qs[q.Name()] = q
	}
	a.mu.Lock()
	a.itemQueues, a.itemsListed = qs, now
	a.mu.Unlock()
	return nil
}

func (a *App) queue(ctx context.Context, name string) (*delayq.Queue, error) {
	if name == a.Withdrawals.Name() {
		return a.Withdrawals, nil
	}
	for attempt := range 2 {
		a.mu.Lock()
		q, ok := a.itemQueues[name]
		a.mu.Unlock()
		if ok {
			return q, nil
		}
		if attempt == 0 {
			if err := a.refreshItems(ctx, true); err != nil {
				return nil, err
			}
		}
	}
	return nil, fmt.Errorf("app: no queue %q", name)
}

// Router returns the whole HTTP API, as the local stack serves it.
func (a *App) Router() *httpapi.Router {
	return a.router(a.withdrawalRoutes, a.webhookRoutes, a.seckillRoutes, a.opsRoutes)
}

// WithdrawalAPI returns the enqueue function's routes: withdrawals, the
// payout provider's callbacks, and the operator and health routes every API
// function answers.
func (a *App) WithdrawalAPI() *httpapi.Router {
	return a.router(a.withdrawalRoutes, a.webhookRoutes, a.opsRoutes)
}

// SeckillAPI returns the seckill function's routes: the flash sale, and the
// operator and health routes every API function answers.
func (a *App) SeckillAPI() *httpapi.Router { return a.router(a.seckillRoutes, a.opsRoutes) }

// OperatorAPI returns the operator function's router: the routes register
// adds, under the admin routes' identity rules, each request given timeout
// (a command may take longer than an API request's requestTimeout).
func (a *App) OperatorAPI(timeout time.Duration, register func(*httpapi.Router)) *httpapi.Router {
	return a.routerWithin(timeout, register)
}

func (a *App) router(parts ...func(*httpapi.Router)) *httpapi.Router {
	return a.routerWithin(requestTimeout, parts...)
}

func (a *App) routerWithin(timeout time.Duration, parts ...func(*httpapi.Router)) *httpapi.Router {
	roles, _ := httpapi.ParseAdminRoles(a.Config.AdminRoleARNs) // config.Load checked them
	rt := httpapi.NewRouter(httpapi.Auth{
		Mode: httpapi.AuthMode(a.Config.Auth), AdminToken: string(a.Config.AdminToken), Scope: a.Config.JWTScope,
		AdminRoles: roles,
	}, a.Log, timeout)
	for _, register := range parts {
		register(rt)
	}
	return rt
}

func (a *App) withdrawalRoutes(rt *httpapi.Router) {
	httpapi.Withdrawals{Service: a.Service, Limiter: a.Limiter, LimitFailsClosed: a.Config.Ledger == "dynamodb"}.Register(rt)
}

func (a *App) webhookRoutes(rt *httpapi.Router) {
	httpapi.PayoutWebhooks{Service: a.Service, Keys: a.Secrets.Webhook, Clock: a.Clock,
		Limiter: a.Limiter}.Register(rt)
	httpapi.PaymentWebhooks{Orders: a.orderProcessor(), Keys: a.Secrets.Payments, Clock: a.Clock,
		Limiter: a.Limiter}.Register(rt)
}

func (a *App) seckillRoutes(rt *httpapi.Router) {
	httpapi.Seckill{Service: a.Seckill, Limiter: a.Limiter}.Register(rt)
}

func (a *App) opsRoutes(rt *httpapi.Router) {
	httpapi.Ops{
		Queues: a.Queues, Items: a.Items, Clock: a.Clock,
		Ping:    func(ctx context.Context) error { return redisconn.Ping(ctx, a.Redis) },
		Limiter: a.Limiter,
	}.Register(rt)
}

// Provider returns the payout provider: the HTTP client of PAYOUT_URL, or,
// where simulated is allowed (the local stack), a simulated one.
func (a *App) Provider(simulated bool) (withdrawal.Provider, error) {
	if a.Config.PayoutURL == "" {
		if !simulated {
			return nil, errors.New("app: PAYOUT_URL must be set")
		}
		a.Log.Warn("PAYOUT_URL is not set: payouts are simulated")
		return &payout.Simulated{Logger: a.Log}, nil
	}
	return payout.New(payout.Config{
		URL: a.Config.PayoutURL, Keys: a.Secrets.Payout, Timeout: a.Config.PayoutTimeout, Clock: a.Clock,
		NoLookup: !a.Config.PayoutLookup,
	})
}

// Notifier returns finance's channel: the SNS topic of FINANCE_TOPIC_ARN and
// the webhook of FINANCE_WEBHOOK_URL (both, in that order, when both are
// set), or, where neither is and logOK (the local stack), JSON lines on out.
func (a *App) Notifier(ctx context.Context, out io.Writer, logOK bool) (withdrawal.Notifier, error) {
	all, err := channels(ctx, a.Config.FinanceTopicARN, func(api snstopic.API) (withdrawal.Notifier, error) {
		return finance.NewSNS(api, a.Config.FinanceTopicARN)
	}, a.Config.FinanceWebhookURL, func() (withdrawal.Notifier, error) {
		return finance.NewWebhook(finance.WebhookConfig{URL: a.Config.FinanceWebhookURL, Keys: a.Secrets.Finance, Clock: a.Clock})
	})
	if err != nil {
		return nil, err
	}
	switch {
	case len(all) == 1:
		return all[0], nil
	case len(all) > 1:
		// In AWS the topic is always there; a webhook is told as well.
		return finance.Both(all), nil
	case logOK:
		return finance.NewLog(out), nil
	}
	return nil, errors.New("app: set FINANCE_TOPIC_ARN or FINANCE_WEBHOOK_URL: finance must receive every payout")
}

// Processor returns the payout step.
func (a *App) Processor(p withdrawal.Provider, n withdrawal.Notifier) (*withdrawal.Processor, error) {
	return withdrawal.NewProcessor(withdrawal.ProcessorConfig{
		Ledger: a.Ledger, Provider: p, Notifier: n, Clock: a.Clock, Logger: a.Log,
		MaxAttempts: a.Config.MaxAttempts, RetryBase: a.Config.RetryBase, RetryCap: a.Config.RetryCap,
		// An attempt may be taken over once its provider calls have surely
		// ended: a lookup and a payout call within their timeouts, plus
		// room for the ledger writes around them. The deadline also cuts
		// every call short (withdrawal.WithCallDeadline): a lookup or call
		// resent after a 401 gets what is left, never more.
		AttemptTimeout:    2*a.Config.PayoutTimeout + 5*time.Second,
		IdempotencyWindow: a.Config.PayoutIdempotencyWindow,
		Metrics:           a.Metrics,
	})
}

// Consumer returns the job-message handler. With ack (the local stand-in),
// each finished job's lease is acked.
func (a *App) Consumer(p *withdrawal.Processor, ack bool) *consumer.Handler {
	op := a.orderProcessor()
	op.Publisher = &lazyPublisher{open: a.orderPublisher}
	cfg := consumer.Config{
		Jobs: map[string]consumer.JobFunc{
			withdrawal.JobKind: consumer.Withdrawals(p),
			seckill.JobKind:    consumer.Orders(op),
		},
		Logger:  a.Log,
		Metrics: a.Metrics,
		Clock:   a.Clock,
	}
	if ack {
		cfg.Ack = a.Ack
	}
	return consumer.New(cfg)
}

// orderProcessor returns the flash sale's order step (order, expiry and
// event jobs; payment confirmations).
func (a *App) orderProcessor() *seckill.OrderProcessor {
	p := seckill.NewOrderProcessor(a.Items, a.Orders, a.Clock, a.Log)
	p.Metrics = a.Metrics
	return p
}

// lazyPublisher opens the order events' channel on the first event (with
// its context; an error fails that event, which is delivered again, and
// the next event tries again).
type lazyPublisher struct {
	open func(ctx context.Context) (orders.Publisher, error)
	mu   sync.Mutex
	pub  orders.Publisher
}

func (l *lazyPublisher) Publish(ctx context.Context, e orders.Event) error {
	l.mu.Lock()
	pub := l.pub
	if pub == nil {
		var err error
		if pub, err = l.open(ctx); err != nil {
			l.mu.Unlock()
			return err
		}
		l.pub = pub
	}
	l.mu.Unlock()
	return pub.Publish(ctx, e)
}

// Ack finishes a job's lease.
func (a *App) Ack(ctx context.Context, job delayq.Job) error {
	q, err := a.queue(ctx, job.Queue)
	if err != nil {
		return err
	}
	_, err = q.Ack(ctx, job.Shard, job.Lease, job.ID)
	return err
}

// Kill moves a job that kept failing to its queue's dead set.
func (a *App) Kill(ctx context.Context, job delayq.Job) error {
	q, err := a.queue(ctx, job.Queue)
	if err != nil {
		return err
	}
	return q.Kill(ctx, job.Shard, job.ID, job.Lease, a.Clock.Now())
}

// Poller returns the poller over d. With ack, the poller acks what d accepts
// (SQS); without, the consumer acks (the local stand-in).
func (a *App) Poller(d poller.Dispatcher, ack bool) (*poller.Poller, error) {
	return poller.New(poller.Config{
		Queues: a.Queues, Dispatcher: d, Clock: a.Clock, Logger: a.Log,
		Batch: a.Config.ClaimBatch, Lease: a.Config.Lease, Interval: a.Config.PollInterval, Ack: ack,
		Metrics: a.Metrics,
		Tasks:   a.tasks(),
	})
}

// tasks are the poller's housekeeping.
func (a *App) tasks() []poller.Task {
	tasks := []poller.Task{
		{Name: "queue-metrics", Every: 10 * time.Second, Run: a.emitQueueMetrics},
		{Name: "seckill-compensation", Every: a.Config.CompensationInterval, Run: func(ctx context.Context, now time.Time) error {
			_, err := a.Compensation().Run(ctx, now)
			return err
		}},
	}
	if p, ok := a.Ledger.(keyPurger); ok {
		tasks = append(tasks, poller.Task{Name: "purge-idempotency-keys", Every: time.Minute,
			Run: func(ctx context.Context, now time.Time) error {
				n, err := p.PurgeExpiredKeys(ctx, now)
				if n > 0 {
					a.Log.Info("expired idempotency keys purged", "keys", n)
				}
				return err
			}})
	}
	if r, ok := a.Ledger.(reconciler); ok {
		tasks = append(tasks, poller.Task{Name: "reconcile", Every: a.Config.ReconcileInterval,
			Run: func(ctx context.Context, now time.Time) error {
				rec, err := r.Reconcile(ctx, now)
				a.emitReconciled(rec)
				return err
			}})
	}
	return tasks
}

// Compensation returns the flash-sale compensation pass.
func (a *App) Compensation() *seckill.Compensation {
	return &seckill.Compensation{Store: a.Items, Orders: a.Orders, Clock: a.Clock, Log: a.Log, ReservedTimeout: a.Config.ReservedTimeout,
		Metrics: a.Metrics}
}

// emitQueueMetrics emits the gauges operators watch: per queue family
// (withdrawals, seckill) the backlog, lag, in-flight and dead jobs, and each
// item's stock left.
func (a *App) emitQueueMetrics(ctx context.Context, now time.Time) error {
	qs, err := a.Queues(ctx)
	if err != nil {
		return err
	}
	snap, err := ops.Collect(ctx, now, qs, a.Items)
	if err != nil {
		return err
	}
	families := map[string]delayq.Stats{withdrawal.QueueName: {}, "seckill": {}}
	for name, st := range snap.Queues {
		family := withdrawal.QueueName
		if strings.HasPrefix(name, seckill.QueuePrefix) || name == seckill.EventsQueue {
			family = "seckill"
		}
		f := families[family]
		f.Due += st.Due
		f.DueNow += st.DueNow
		f.Inflight += st.Inflight
		f.Dead += st.Dead
		f.OldestDueLagMS = max(f.OldestDueLagMS, st.OldestDueLagMS)
		families[family] = f
	}
	for family, st := range families {
		a.Metrics.Emit(map[string]string{"Queue": family},
			metrics.Of(metrics.DueBacklog, metrics.Count, float64(st.Due)),
			metrics.Of(metrics.DueNow, metrics.Count, float64(st.DueNow)),
			metrics.Of(metrics.OldestDueLagMs, metrics.Milliseconds, float64(st.OldestDueLagMS)),
			metrics.Of(metrics.Inflight, metrics.Count, float64(st.Inflight)),
			metrics.Of(metrics.Dead, metrics.Count, float64(st.Dead)))
	}
	for item, st := range snap.Items {
		a.Metrics.Emit(map[string]string{"Item": item}, metrics.Of(metrics.StockLeft, metrics.Count, float64(st.StockLeft)))
	}
	return nil
}

// AWSConfig loads the AWS SDK configuration of the Lambda environment.
func AWSConfig(ctx context.Context) (aws.Config, error) {
	cfg, err := awsconfig.LoadDefaultConfig(ctx)
	if err != nil {
		return aws.Config{}, fmt.Errorf("app: AWS configuration: %w", err)
	}
	return cfg, nil
}

// ForLambda builds the App of a Lambda function at cold start: GOMAXPROCS
// from the function's share of vCPUs (lambdaProcs), configuration from the
// environment (Lambda profile), the JSON logger, the Redis client.
// A cold start that cannot work logs why and exits, so Lambda reports an init
// error instead of serving with a broken setup. require names settings the
// function cannot run without, the *_SECRET_ID of each key it uses among
// them (see OpenLambda).
func ForLambda(require ...string) *App {
	if n := lambdaProcs(os.Getenv); n > 0 {
		runtime.GOMAXPROCS(n)
	}
	cfg, err := config.Load(config.Lambda)
	log := NewLogger(os.Stdout, cfg.SlogLevel())
	if err != nil {
		Fatal(log, "bad configuration", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	a, err := OpenLambda(ctx, cfg, log, nil, require...)
	if err != nil {
		Fatal(log, "cold start refused", err)
	}
	a.EmitMetricsTo(os.Stdout)
	return a
}

// OpenLambda is ForLambda's work on cfg (read in the Lambda profile), its
// secrets read through api (nil: the SDK's Secrets Manager client). It
// refuses what would let anyone in on a function that faces the network
// (config.CheckDeployed): a key the function uses not named by its
// *_SECRET_ID, so on its public default; a plain http:// outbound URL;
// one secret for two channels; then, once the secrets are read, a key that
// is a public default or that two channels share (Secrets.CheckDeployed).
// Every error names the setting and the way out, never a key.
func OpenLambda(ctx context.Context, cfg config.Config, log *slog.Logger, api secrets.Getter, require ...string) (*App, error) {
	if err := errors.Join(cfg.Require(require...), cfg.CheckDeployed(require...)); err != nil {
		return nil, err
	}
	sec, err := OpenSecrets(ctx, cfg, log, api)
	if err != nil {
		return nil, fmt.Errorf("secrets: %w", err)
	}
	if err := sec.CheckDeployed(ctx, cfg); err != nil {
		return nil, err
	}
	rdb, err := ConnectWith(cfg, sec, WithLogger(log))
	if err != nil {
		return nil, fmt.Errorf("redis: %w", err)
	}
	a, err := New(cfg, log, rdb)
	if err != nil {
		_ = rdb.Close()
		return nil, fmt.Errorf("wiring: %w", err)
	}
	a.Secrets = sec
	a.lambda = true
	return a, nil
}

// Fatal logs err and exits: the one way a main reports a broken cold start.
func Fatal(log *slog.Logger, msg string, err error) {
	log.Error(msg, "error", err.Error())
	os.Exit(1)
}
