// Package config reads Hourglass's settings from the environment once, at cold
// start, checks them, and fails with a message naming the variable at fault.
package config

import (
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"reflect"
	"strings"
	"time"

	"github.com/caarlos0/env/v11"
	"github.com/shopspring/decimal"

	"github.com/hourglass/hourglass/shared/httpapi"
	"github.com/hourglass/hourglass/shared/ratelimit"
	"github.com/hourglass/hourglass/shared/redisguard"
	"github.com/hourglass/hourglass/shared/signature"
	"github.com/hourglass/hourglass/shared/withdrawal"
)

// Secret is a string that never prints: logs, errors and JSON show
// "[redacted]", however the value or a struct holding it is formatted.
type Secret string

const redacted = "[redacted]"

func (s Secret) String() string { return redacted }

// GoString keeps the secret out of %#v.
func (s Secret) GoString() string { return redacted }

// LogValue keeps the secret out of structured logs.
func (s Secret) LogValue() slog.Value { return slog.StringValue(redacted) }

// MarshalText keeps the secret out of JSON and text encodings.
func (s Secret) MarshalText() ([]byte, error) { return []byte(redacted), nil }

// Bytes returns the secret's value.
func (s Secret) Bytes() []byte { return []byte(s) }

// Config is every setting of SPEC.md "Local stack" and the AWS wiring; each
// function reads the ones it needs.
type Config struct {
	Addr     string `env:"HOURGLASS_ADDR" envDefault:"127.0.0.1:8080"`
	RedisURL Secret `env:"REDIS_URL"`
	// RedisPassword, if set, replaces the password of REDIS_URL; it comes from
	// REDIS_AUTH_SECRET_ID (see app.ResolveSecrets), never from the
	// environment.
	RedisPassword Secret `env:"-"`
	RedisPrefix   string `env:"HOURGLASS_REDIS_PREFIX" envDefault:"hg:"`
	// RedisCommands is the command profile of the Redis the functions talk
	// to (package redisguard): all, or elasticache-serverless, whose guard
	// refuses before sending what ElastiCache Serverless does not serve.
	RedisCommands string `env:"HOURGLASS_REDIS_COMMANDS" envDefault:"all"`
	Auth          string `env:"HOURGLASS_AUTH" envDefault:"dev"`
	AdminToken    Secret `env:"HOURGLASS_ADMIN_TOKEN" envDefault:"dev-admin"`
	LogLevel      string `env:"HOURGLASS_LOG_LEVEL" envDefault:"info"`
	// LogMetrics makes `hourglass serve` write its CloudWatch EMF metric
	// lines beside its logs; without it they feed only the dashboard and
	// /metrics. (A Lambda function always writes them: that is how
	// CloudWatch gets them.)
	LogMetrics bool `env:"HOURGLASS_LOG_METRICS" envDefault:"false"`

	PayoutURL     string        `env:"PAYOUT_URL"`
	PayoutSecret  Secret        `env:"PAYOUT_SIGNING_SECRET" envDefault:"dev-secret"`
	PayoutTimeout time.Duration `env:"PAYOUT_TIMEOUT" envDefault:"10s"`
	// PayoutIdempotencyWindow is how long the provider remembers an
	// idempotency key: a payout request first sent longer ago is never sent
	// again blind (the lookup settles it, or an operator).
	PayoutIdempotencyWindow time.Duration `env:"PAYOUT_IDEMPOTENCY_WINDOW" envDefault:"24h"`
	// PayoutLookup says whether the provider answers the status lookup
	// GET $PAYOUT_URL/{withdrawal_id}; off for one that has none.
	PayoutLookup bool `env:"PAYOUT_LOOKUP" envDefault:"true"`
	// PayoutWebhookSecret authenticates the provider's callbacks
	// (POST /v1/webhooks/payouts).
	PayoutWebhookSecret Secret `env:"PAYOUT_WEBHOOK_SECRET" envDefault:"dev-webhook-secret"`

	FinanceWebhookURL string `env:"FINANCE_WEBHOOK_URL"`
	FinanceSecret     Secret `env:"FINANCE_SIGNING_SECRET" envDefault:"dev-finance-secret"`
	FinanceTopicARN   string `env:"FINANCE_TOPIC_ARN"`

	// PaymentsWebhookSecret authenticates the payment provider's
	// confirmations of flash-sale orders (POST /v1/webhooks/payments).
	PaymentsWebhookSecret Secret `env:"PAYMENTS_WEBHOOK_SECRET" envDefault:"dev-payments-secret"`

	// Order events (package orders): to the SNS topic ORDERS_TOPIC_ARN (AWS)
	// and/or the webhook ORDERS_WEBHOOK_URL signed with
	// ORDERS_SIGNING_SECRET; logged as JSON lines when neither is set.
	OrdersWebhookURL string `env:"ORDERS_WEBHOOK_URL"`
	OrdersSecret     Secret `env:"ORDERS_SIGNING_SECRET" envDefault:"dev-orders-secret"`
	OrdersTopicARN   string `env:"ORDERS_TOPIC_ARN"`

	// Secrets Manager secrets, each named by its name or complete ARN, that
	// replace the setting they name in AWS: the Redis AUTH token, the payout
	// and finance signing secrets, the provider callbacks' secret. Each is
	// read at cold start and again every SecretTTL, and when its key is
	// refused (see package secrets for the rotation format).
	RedisAuthSecretID string `env:"REDIS_AUTH_SECRET_ID"`
	PayoutSecretID    string `env:"PAYOUT_SIGNING_SECRET_ID"`
	FinanceSecretID   string `env:"FINANCE_SIGNING_SECRET_ID"`
	WebhookSecretID   string `env:"PAYOUT_WEBHOOK_SECRET_ID"`
	PaymentsSecretID  string `env:"PAYMENTS_WEBHOOK_SECRET_ID"`
	OrdersSecretID    string `env:"ORDERS_SIGNING_SECRET_ID"`
	// The former names of the first three, still accepted; the _ID name
	// wins, and both set to different secrets is an error.
	RedisAuthSecretARN string `env:"REDIS_AUTH_SECRET_ARN"`
	PayoutSecretARN    string `env:"PAYOUT_SIGNING_SECRET_ARN"`
	FinanceSecretARN   string `env:"FINANCE_SIGNING_SECRET_ARN"`
	// SecretTTL is how long a secret read from Secrets Manager is used
	// before it is read again.
	SecretTTL time.Duration `env:"HOURGLASS_SECRET_TTL" envDefault:"5m"`

	// WorkQueueURL is the SQS queue the poller sends due jobs to (AWS).
	WorkQueueURL string `env:"WORK_QUEUE_URL"`

	PollInterval      time.Duration `env:"HOURGLASS_POLL_INTERVAL" envDefault:"1s"`
	DefaultDelay      time.Duration `env:"HOURGLASS_DEFAULT_DELAY" envDefault:"30m"`
	MaxDelay          time.Duration `env:"HOURGLASS_MAX_DELAY" envDefault:"720h"`
	RetryBase         time.Duration `env:"HOURGLASS_RETRY_BASE" envDefault:"30s"`
	RetryCap          time.Duration `env:"HOURGLASS_RETRY_CAP" envDefault:"30m"`
	MaxAttempts       int           `env:"HOURGLASS_MAX_ATTEMPTS" envDefault:"8"`
	Lease             time.Duration `env:"HOURGLASS_LEASE" envDefault:"30s"`
	ReconcileInterval time.Duration `env:"HOURGLASS_RECONCILE_INTERVAL" envDefault:"2m"`
	// ReconcileGrace is how long past a withdrawal's due time (its
	// attempt's deadline, its outcome) the reconciler leaves alone a job
	// that is not in Redis: it may be in the work queue, waiting or being
	// redelivered. The stack sets it to the work queue's redelivery span
	// (visibility timeout x maxReceiveCount + the consumer's batch window);
	// unset, it is ReconcileInterval: locally the work queue holds nothing
	// Redis does not (a job stays leased until the consumer finished it).
	ReconcileGrace time.Duration `env:"HOURGLASS_RECONCILE_GRACE"`
	QueueShards    int           `env:"HOURGLASS_QUEUE_SHARDS" envDefault:"1"`
	ClaimBatch     int           `env:"HOURGLASS_CLAIM_BATCH" envDefault:"500"`
	// PollerMargin is how long before its Lambda deadline the poller stops.
	PollerMargin time.Duration `env:"HOURGLASS_POLLER_MARGIN" envDefault:"5s"`
	// Visibility is how long the local work-queue stand-in hides a message
	// that failed before delivering it again.
	Visibility time.Duration `env:"HOURGLASS_VISIBILITY_TIMEOUT" envDefault:"5s"`
	// MaxReceives is how often the local stand-in delivers a failing message
	// before it moves the job to the dead set (SQS's maxReceiveCount).
	MaxReceives int `env:"HOURGLASS_MAX_RECEIVES" envDefault:"10"`

	// OrderBacklog bounds a flash-sale item's order jobs waiting for the
	// poller (admitted purchases whose order is not under way yet); past it
	// purchases answer 429 backlog_full.
	OrderBacklog int64 `env:"HOURGLASS_ORDER_BACKLOG" envDefault:"50000"`
	// PaymentGrace is how long after an order's pay-by time a payment the
	// provider signed before it still pays it (judged by its signed time,
	// not its arrival); an unpaid order expires that long after its
	// pay-by time. At most the signatures' tolerance (5m): an older
	// signature is refused anyway. 0 judges payments by their arrival.
	// Unset, it is 0 locally (a walk-through sees its order expire at
	// pay_by) and LambdaPaymentGrace in Lambda.
	PaymentGrace time.Duration `env:"HOURGLASS_PAYMENT_GRACE"`
	// SoldOutMemory is how long a container refuses purchases of an item it
	// saw sold out or ended without asking Redis.
	SoldOutMemory time.Duration `env:"HOURGLASS_SOLDOUT_MEMORY" envDefault:"1s"`
	// CompensationInterval is how often the poller runs the flash-sale
	// compensation pass; ReservedTimeout is how old a purchase without its
	// order must be before that pass acts on it.
	CompensationInterval time.Duration `env:"HOURGLASS_COMPENSATION_INTERVAL" envDefault:"1m"`
	ReservedTimeout      time.Duration `env:"HOURGLASS_RESERVED_TIMEOUT" envDefault:"5m"`

	// Ledger selects the system of record: redis (records beside their queue
	// shard) or dynamodb (the tables below; Redis keeps only the schedule).
	Ledger           string `env:"HOURGLASS_LEDGER" envDefault:"redis"`
	WithdrawalsTable string `env:"HOURGLASS_WITHDRAWALS_TABLE" envDefault:"hourglass-withdrawals"`
	OrdersTable      string `env:"HOURGLASS_ORDERS_TABLE" envDefault:"hourglass-orders"`
	IdempotencyTable string `env:"HOURGLASS_IDEMPOTENCY_TABLE" envDefault:"hourglass-idempotency"`
	// DynamoDBEndpoint overrides DynamoDB's endpoint (dynalite locally).
	DynamoDBEndpoint string `env:"DYNAMODB_ENDPOINT"`
	// CreateTables makes `hourglass serve` create missing ledger tables.
	CreateTables bool `env:"HOURGLASS_CREATE_TABLES" envDefault:"false"`
	// RedisHorizon: with the dynamodb ledger, withdrawals due further ahead
	// live only in the ledger until the reconciler promotes them; at least
	// MinHorizonIntervals x ReconcileInterval.
	RedisHorizon time.Duration `env:"HOURGLASS_REDIS_HORIZON" envDefault:"1h"`

	MaxAmount  string   `env:"HOURGLASS_MAX_AMOUNT" envDefault:"1000000"`
	Currencies []string `env:"HOURGLASS_CURRENCIES" envDefault:"CNY,USD,EUR,JPY" envSeparator:","`

	// AdminRoleARNs are the IAM roles (arn:aws:iam::<account>:role/[<path>/]<name>)
	// whose sessions may call the admin routes in jwt auth mode; the stack
	// fills it from its adminRoleArns context value. Empty refuses every
	// admin call.
	AdminRoleARNs []string `env:"HOURGLASS_ADMIN_ROLE_ARNS" envSeparator:","`

	// JWTScope is the OAuth scope an access token needs for the user routes
	// in jwt auth mode (the CDK authorizer requires the same).
	JWTScope string `env:"HOURGLASS_JWT_SCOPE" envDefault:"hourglass/user"`
	// Rate limits (ratelimit.Parse: "5/s", "30/m:10", "off") of purchase
	// admission, withdrawal creation and the routes on a caller's own
	// records (list, get, reschedule, cancel, purchases/me: the read
	// family), per user and per source address. Unset, they are off
	// locally and LambdaRates in Lambda.
	RatePurchaseUser     string `env:"HOURGLASS_RATE_PURCHASE_USER"`
	RatePurchaseSource   string `env:"HOURGLASS_RATE_PURCHASE_SOURCE"`
	RateWithdrawalUser   string `env:"HOURGLASS_RATE_WITHDRAWAL_USER"`
	RateWithdrawalSource string `env:"HOURGLASS_RATE_WITHDRAWAL_SOURCE"`
	RateWebhookSource    string `env:"HOURGLASS_RATE_WEBHOOK_SOURCE"`
	RateReadUser         string `env:"HOURGLASS_RATE_READ_USER"`
	RateReadSource       string `env:"HOURGLASS_RATE_READ_SOURCE"`
}

// MinHorizonIntervals is the shortest HOURGLASS_REDIS_HORIZON, in
// HOURGLASS_RECONCILE_INTERVALs, the dynamodb ledger accepts. A withdrawal
// due beyond the horizon waits in DynamoDB until a reconciler pass finds it
// due within the horizon: the first pass at or after due - horizon, and
// passes come one interval apart, so that pass comes at least
// horizon - interval before the due time. Two intervals of horizon leave
// one interval of lead: a promotion that fails (Redis unreachable for that
// pass) is made by the next pass, still by the due time. Shorter, the first
// pass may come after the due time and the withdrawal is paid late by up
// to an interval (or more, had the grace for jobs in the work queue held it
// back). The poller starts a pass between its rounds, so up to a round
// (HOURGLASS_POLL_INTERVAL, 1 s) late; at the bound that much comes off the
// lead. The defaults (1 h over 2 m) leave at least 58 min.
const MinHorizonIntervals = 2

// LambdaRates are the rate limits a Lambda function applies when its
// environment names none: a person buys a few times a second at most,
// withdraws a few times a minute and looks at their withdrawals and
// purchases a few times a second (an app polling one, a page of the list);
// an address is allowed room for a NAT of many people. Against the
// routes' own throttle (1,000/s for the reads), one token holder takes at
// most 1% of a read route and one address 10%.
var LambdaRates = map[string]string{
	"HOURGLASS_RATE_PURCHASE_USER":     "5/s",
	"HOURGLASS_RATE_PURCHASE_SOURCE":   "100/s:200",
	"HOURGLASS_RATE_WITHDRAWAL_USER":   "10/m",
	"HOURGLASS_RATE_WITHDRAWAL_SOURCE": "600/m",
	"HOURGLASS_RATE_WEBHOOK_SOURCE":    "50/s:100",
	"HOURGLASS_RATE_READ_USER":         "10/s:20",
	"HOURGLASS_RATE_READ_SOURCE":       "100/s:200",
}

// LambdaPaymentGrace is HOURGLASS_PAYMENT_GRACE in a Lambda function whose
// environment names none: the signatures' tolerance, the longest a
// confirmation signed in time can take to arrive and still be accepted.
const LambdaPaymentGrace = signature.DefaultTolerance

// rates lists the rate settings with the field each fills.
func (c *Config) rates() []struct {
	name string
	dst  *string
} {
	return []struct {
		name string
		dst  *string
	}{
		{"HOURGLASS_RATE_PURCHASE_USER", &c.RatePurchaseUser},
		{"HOURGLASS_RATE_PURCHASE_SOURCE", &c.RatePurchaseSource},
		{"HOURGLASS_RATE_WITHDRAWAL_USER", &c.RateWithdrawalUser},
		{"HOURGLASS_RATE_WITHDRAWAL_SOURCE", &c.RateWithdrawalSource},
		{"HOURGLASS_RATE_WEBHOOK_SOURCE", &c.RateWebhookSource},
		{"HOURGLASS_RATE_READ_USER", &c.RateReadUser},
		{"HOURGLASS_RATE_READ_SOURCE", &c.RateReadSource},
	}
}

// secretAliases pairs each secret's _ID setting with its former _ARN name.
func (c *Config) secretAliases() []struct {
	name, alias string
	id, arn     *string
} {
	return []struct {
		name, alias string
		id, arn     *string
	}{
		{"REDIS_AUTH_SECRET_ID", "REDIS_AUTH_SECRET_ARN", &c.RedisAuthSecretID, &c.RedisAuthSecretARN},
		{"PAYOUT_SIGNING_SECRET_ID", "PAYOUT_SIGNING_SECRET_ARN", &c.PayoutSecretID, &c.PayoutSecretARN},
		{"FINANCE_SIGNING_SECRET_ID", "FINANCE_SIGNING_SECRET_ARN", &c.FinanceSecretID, &c.FinanceSecretARN},
	}
}

// RateRules returns the rate limits of each route family.
func (c Config) RateRules() (map[ratelimit.Family]ratelimit.Rule, error) {
	var errs []error
	parse := func(name, v string) ratelimit.Limit {
		l, err := ratelimit.Parse(v)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", name, err))
		}
		return l
	}
	rules := map[ratelimit.Family]ratelimit.Rule{
		ratelimit.Purchase: {
			User:   parse("HOURGLASS_RATE_PURCHASE_USER", c.RatePurchaseUser),
			Source: parse("HOURGLASS_RATE_PURCHASE_SOURCE", c.RatePurchaseSource),
		},
		ratelimit.Withdrawal: {
			User:   parse("HOURGLASS_RATE_WITHDRAWAL_USER", c.RateWithdrawalUser),
			Source: parse("HOURGLASS_RATE_WITHDRAWAL_SOURCE", c.RateWithdrawalSource),
		},
		ratelimit.Webhook: {Source: parse("HOURGLASS_RATE_WEBHOOK_SOURCE", c.RateWebhookSource)},
		ratelimit.Read: {
			User:   parse("HOURGLASS_RATE_READ_USER", c.RateReadUser),
			Source: parse("HOURGLASS_RATE_READ_SOURCE", c.RateReadSource),
		},
	}
	return rules, errors.Join(errs...)
}

// Profile picks the defaults that differ between the local stack and Lambda.
type Profile int

// Profiles.
const (
	Local Profile = iota
	Lambda
)

// Load reads and checks the configuration. In the Lambda profile the identity
// is JWT: a function deployed without HOURGLASS_AUTH must not trust X-User-Id
// headers, and one deployed with HOURGLASS_AUTH=dev fails its cold start
// (dev auth trusts X-User-Id and opens the admin routes to a token whose
// default is public).
func Load(p Profile) (Config, error) {
	var c Config
	var problems []problem
	failed := map[string]bool{}
	if err := env.Parse(&c); err != nil {
		var agg env.AggregateError
		if !errors.As(err, &agg) {
			return Config{}, fmt.Errorf("config: %w", err)
		}
		for _, e := range agg.Errors {
			var pe env.ParseError
			if !errors.As(e, &pe) {
				return Config{}, fmt.Errorf("config: %w", e)
			}
			name := envName(pe.Name)
			failed[name] = true
			problems = append(problems, problem{name, fmt.Sprintf("cannot read %q as %s", os.Getenv(name), pe.Type)})
		}
	}
	// Set but empty counts as unset: a Lambda must not fall back to dev auth.
	if p == Lambda && os.Getenv("HOURGLASS_AUTH") == "" {
		c.Auth = "jwt"
	}
	if p == Lambda && c.Auth == "dev" {
		failed["HOURGLASS_AUTH"] = true
		problems = append(problems, problem{"HOURGLASS_AUTH", "dev auth (X-User-Id, X-Admin-Token) is for the local stack only; " +
			"a Lambda function takes jwt (unset HOURGLASS_AUTH or set it to jwt)"})
	}
	if p == Lambda && strings.TrimSpace(os.Getenv("HOURGLASS_PAYMENT_GRACE")) == "" {
		c.PaymentGrace = LambdaPaymentGrace
	}
	if p == Lambda {
		for _, r := range c.rates() {
			if strings.TrimSpace(*r.dst) == "" {
				*r.dst = LambdaRates[r.name]
			}
		}
	}
	if os.Getenv("HOURGLASS_RECONCILE_GRACE") == "" {
		c.ReconcileGrace = c.ReconcileInterval
	}
	for i, cur := range c.Currencies {
		c.Currencies[i] = strings.TrimSpace(cur)
	}
	for _, a := range c.secretAliases() {
		if *a.id == "" {
			*a.id = *a.arn
		}
	}
	for _, pr := range c.problems() {
		if !failed[pr.name] {
			problems = append(problems, pr)
		}
	}
	if err := join(problems); err != nil {
		return Config{}, err
	}
	return c, nil
}

// envName is the variable behind a Config field.
func envName(field string) string {
	if f, ok := reflect.TypeOf(Config{}).FieldByName(field); ok {
		if tag := f.Tag.Get("env"); tag != "" {
			return tag
		}
	}
	return field
}

type problem struct{ name, msg string }

func join(ps []problem) error {
	errs := make([]error, len(ps))
	for i, p := range ps {
		errs[i] = fmt.Errorf("config: %s: %s", p.name, p.msg)
	}
	return errors.Join(errs...)
}

// Check reports every setting that cannot work.
func (c Config) Check() error { return join(c.problems()) }

func (c Config) problems() []problem {
	var ps []problem
	bad := func(name, format string, args ...any) {
		ps = append(ps, problem{name, fmt.Sprintf(format, args...)})
	}
	if c.Auth != "dev" && c.Auth != "jwt" {
		bad("HOURGLASS_AUTH", "%q is neither dev nor jwt", c.Auth)
	}
	if c.Ledger != "redis" && c.Ledger != "dynamodb" {
		bad("HOURGLASS_LEDGER", "%q is neither redis nor dynamodb", c.Ledger)
	}
	if c.Ledger == "dynamodb" && (c.WithdrawalsTable == "" || c.OrdersTable == "" || c.IdempotencyTable == "") {
		bad("HOURGLASS_WITHDRAWALS_TABLE/HOURGLASS_ORDERS_TABLE/HOURGLASS_IDEMPOTENCY_TABLE", "must be set with the dynamodb ledger")
	}
	if c.DynamoDBEndpoint != "" {
		if u, err := url.Parse(c.DynamoDBEndpoint); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			bad("DYNAMODB_ENDPOINT", "must be an http(s) URL")
		}
	}
	if c.Auth == "dev" && c.AdminToken == "" {
		bad("HOURGLASS_ADMIN_TOKEN", "must be set in dev auth mode")
	}
	if c.RedisPrefix == "" || strings.ContainsAny(c.RedisPrefix, "{}") {
		bad("HOURGLASS_REDIS_PREFIX", "must be non-empty and hold no braces (they make hash tags)")
	}
	if _, err := redisguard.ParseProfile(c.RedisCommands); err != nil {
		bad("HOURGLASS_REDIS_COMMANDS", "%q is neither %s nor %s", c.RedisCommands, redisguard.All, redisguard.ElastiCacheServerless)
	}
	if _, err := slogLevel(c.LogLevel); err != nil {
		bad("HOURGLASS_LOG_LEVEL", "%v", err)
	}
	for _, d := range []struct {
		name string
		d    time.Duration
	}{
		{"PAYOUT_TIMEOUT", c.PayoutTimeout}, {"PAYOUT_IDEMPOTENCY_WINDOW", c.PayoutIdempotencyWindow},
		{"HOURGLASS_POLL_INTERVAL", c.PollInterval},
		{"HOURGLASS_MAX_DELAY", c.MaxDelay}, {"HOURGLASS_RETRY_BASE", c.RetryBase}, {"HOURGLASS_RETRY_CAP", c.RetryCap},
		{"HOURGLASS_LEASE", c.Lease}, {"HOURGLASS_RECONCILE_INTERVAL", c.ReconcileInterval},
		{"HOURGLASS_VISIBILITY_TIMEOUT", c.Visibility},
		{"HOURGLASS_COMPENSATION_INTERVAL", c.CompensationInterval}, {"HOURGLASS_RESERVED_TIMEOUT", c.ReservedTimeout},
		{"HOURGLASS_REDIS_HORIZON", c.RedisHorizon}, {"HOURGLASS_SECRET_TTL", c.SecretTTL},
	} {
		if d.d <= 0 {
			bad(d.name, "must be a positive duration, got %s", d.d)
		}
	}
	// Unset, the grace is the interval, which is reported itself.
	if c.ReconcileGrace <= 0 && c.ReconcileInterval > 0 {
		bad("HOURGLASS_RECONCILE_GRACE", "must be a positive duration, got %s", c.ReconcileGrace)
	}
	if c.Ledger == "dynamodb" && c.ReconcileInterval > 0 && c.RedisHorizon > 0 &&
		c.RedisHorizon < MinHorizonIntervals*c.ReconcileInterval {
		bad("HOURGLASS_REDIS_HORIZON", "must be at least %d x HOURGLASS_RECONCILE_INTERVAL (%s) with the dynamodb ledger, got %s: "+
			"a withdrawal due beyond the horizon reaches Redis only at a reconciler pass, which must come one interval "+
			"before it is due", MinHorizonIntervals, MinHorizonIntervals*c.ReconcileInterval, c.RedisHorizon)
	}
	for _, a := range c.secretAliases() {
		if *a.id != "" && *a.arn != "" && *a.id != *a.arn {
			bad(a.name, "and %s (its former name) name different secrets; set one", a.alias)
		}
	}
	if c.DefaultDelay < 0 || c.DefaultDelay > c.MaxDelay {
		bad("HOURGLASS_DEFAULT_DELAY", "must lie within 0..HOURGLASS_MAX_DELAY (%s)", c.MaxDelay)
	}
	if c.RetryCap < c.RetryBase {
		bad("HOURGLASS_RETRY_CAP", "must be at least HOURGLASS_RETRY_BASE (%s)", c.RetryBase)
	}
	if c.PollerMargin < 0 {
		bad("HOURGLASS_POLLER_MARGIN", "must not be negative")
	}
	if c.PaymentGrace < 0 || c.PaymentGrace > signature.DefaultTolerance {
		bad("HOURGLASS_PAYMENT_GRACE", "must lie within 0..%s (the signatures' tolerance), got %s", signature.DefaultTolerance, c.PaymentGrace)
	}
	if c.SoldOutMemory < 0 {
		bad("HOURGLASS_SOLDOUT_MEMORY", "must not be negative")
	}
	if c.OrderBacklog < 1 {
		bad("HOURGLASS_ORDER_BACKLOG", "must be at least 1")
	}
	if c.MaxAttempts < 1 {
		bad("HOURGLASS_MAX_ATTEMPTS", "must be at least 1")
	}
	if c.MaxReceives < 1 {
		bad("HOURGLASS_MAX_RECEIVES", "must be at least 1")
	}
	if c.QueueShards < 1 || c.QueueShards > 1024 {
		bad("HOURGLASS_QUEUE_SHARDS", "must lie within 1..1024")
	}
	if c.ClaimBatch < 1 || c.ClaimBatch > 1000 {
		bad("HOURGLASS_CLAIM_BATCH", "must lie within 1..1000")
	}
	if _, err := c.WithdrawalRules(); err != nil {
		bad("HOURGLASS_CURRENCIES/HOURGLASS_MAX_AMOUNT", "%v", err)
	}
	for _, r := range c.rates() {
		if _, err := ratelimit.Parse(*r.dst); err != nil {
			bad(r.name, "%v", err)
		}
	}
	// An OAuth scope is one token of printable ASCII without spaces or
	// quotes (RFC 6749 3.3).
	if c.Auth == "jwt" && (c.JWTScope == "" || strings.ContainsFunc(c.JWTScope, func(r rune) bool {
		return r <= ' ' || r >= 0x7f || r == '"' || r == '\\'
	})) {
		bad("HOURGLASS_JWT_SCOPE", "must be one OAuth scope (printable, no spaces) in jwt auth mode")
	}
	if _, err := httpapi.ParseAdminRoles(c.AdminRoleARNs); err != nil {
		bad("HOURGLASS_ADMIN_ROLE_ARNS", "%v", err)
	}
	for _, u := range []struct{ name, url string }{
		{"PAYOUT_URL", c.PayoutURL}, {"FINANCE_WEBHOOK_URL", c.FinanceWebhookURL}, {"ORDERS_WEBHOOK_URL", c.OrdersWebhookURL},
	} {
		if u.url == "" {
			continue
		}
		if pu, err := url.Parse(u.url); err != nil || (pu.Scheme != "http" && pu.Scheme != "https") || pu.Host == "" {
			bad(u.name, "must be an http(s) URL")
		}
	}
	return ps
}

// WithdrawalRules returns the validation rules of withdrawal requests.
func (c Config) WithdrawalRules() (withdrawal.Rules, error) {
	max, err := decimal.NewFromString(c.MaxAmount)
	if err != nil {
		return withdrawal.Rules{}, fmt.Errorf("maximum amount %q is not a decimal", c.MaxAmount)
	}
	r := withdrawal.Rules{Currencies: c.Currencies, MaxAmount: max, DefaultDelay: c.DefaultDelay, MaxDelay: c.MaxDelay}
	if err := r.Check(); err != nil {
		return withdrawal.Rules{}, err
	}
	return r, nil
}

// SlogLevel is the configured log level.
func (c Config) SlogLevel() slog.Level {
	l, _ := slogLevel(c.LogLevel)
	return l
}

func slogLevel(s string) (slog.Level, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(s)); err != nil {
		return 0, fmt.Errorf("%q is not debug, info, warn or error", s)
	}
	return l, nil
}
