package main

import (
	"errors"
	"fmt"
	"net/netip"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Settings is what an operator chooses per deployment, read from CDK context
// (`cdk deploy -c key=value`, or the "context" block of infra/cdk.json).
// DefaultSettings documents every default; docs/deploy.md repeats them.
type Settings struct {
	// JWTIssuer and JWTAudience configure the HTTP API's JWT authorizer:
	// the issuer URL (its /.well-known/openid-configuration must be public)
	// and the audience the app's tokens carry.
	JWTIssuer   string
	JWTAudience string
	// JWTScope is the OAuth scope an access token must grant for the user
	// routes (a Cognito resource server's "<identifier>/<scope>"); the
	// authorizer requires it and the functions check it again
	// (HOURGLASS_JWT_SCOPE), so ID tokens, which carry no scope, are refused.
	JWTScope string
	// FinanceEmail, when set, subscribes that address to the finance topic;
	// AlarmEmail to the ops alarm topic.
	FinanceEmail string
	AlarmEmail   string
	// Profile sizes the deployment (profile.go); RedisNodeType and
	// RedisShards default to its choice.
	Profile Profile
	// RedisNodeType is the ElastiCache node type; RedisShards the number of
	// node groups (cluster-mode shards), each with Profile.RedisReplicas.
	RedisNodeType string
	RedisShards   int
	// QueueShards is HOURGLASS_QUEUE_SHARDS: shards of the withdrawal queue.
	// It is fixed for the life of the data.
	QueueShards int
	// PayoutURL is the payout provider's endpoint; PayoutSecretName is the
	// existing Secrets Manager secret that holds its signing key. Every
	// *SecretName takes a secret's name or its complete ARN (for a secret
	// of another account, or to pin one).
	PayoutURL        string
	PayoutSecretName string
	// PayoutWebhookSecretName is the existing secret that authenticates
	// the provider's callbacks (POST /v1/webhooks/payouts).
	PayoutWebhookSecretName string
	// PayoutLookup: the provider answers the status lookup
	// GET $PAYOUT_URL/{withdrawal_id} (PAYOUT_LOOKUP). PayoutIdempotencyWindow:
	// how long it remembers an idempotency key (PAYOUT_IDEMPOTENCY_WINDOW).
	PayoutLookup            bool
	PayoutIdempotencyWindow string
	// ConsumerMaxConcurrency caps the consumer's SQS event source (2..1000).
	ConsumerMaxConcurrency int
	// FinanceWebhookURL, when set, is finance's HTTPS endpoint the consumer
	// also posts each processed payout to (FINANCE_WEBHOOK_URL), signed with
	// the key in the existing secret FinanceSecretName.
	FinanceWebhookURL string
	FinanceSecretName string
	// OrdersWebhookURL, when set, is the downstream HTTPS endpoint the
	// consumer also posts each order event to (ORDERS_WEBHOOK_URL), signed
	// with the key in the existing secret OrdersSecretName; the orders topic
	// gets every event either way.
	OrdersWebhookURL string
	OrdersSecretName string
	// PaymentsSecretName is the existing secret that authenticates the
	// payment provider's confirmations (POST /v1/webhooks/payments).
	PaymentsSecretName string
	// PollerReservedConcurrency reserves that much of the account's Lambda
	// concurrency for the poller (1..1000); 0 reserves none. Off by
	// default: an account's quota can be as low as 10, and the reservation
	// must leave 10 unreserved, so it fails a first deploy late.
	PollerReservedConcurrency int
	// AdminRoleARNs are the IAM roles whose callers the admin routes serve
	// (HOURGLASS_ADMIN_ROLE_ARNS); with none they refuse every caller.
	AdminRoleARNs []string
	// FinanceReaderARNs and OrdersReaderARNs are the IAM roles (of this
	// account or another) that read the finance queue and the orders queue:
	// the queue's policy and the data key's let them receive and delete
	// messages and decrypt them (through SQS only). A role of another
	// account also needs its own account's IAM policy to allow it.
	FinanceReaderARNs []string
	OrdersReaderARNs  []string
	// EnqueueReservedConcurrency and SeckillReservedConcurrency reserve (and
	// cap at) that much of the account's Lambda concurrency for the two API
	// functions (1..1000); 0 reserves none. A cap keeps a flash sale from
	// taking the concurrency the poller and the consumer need.
	EnqueueReservedConcurrency int
	SeckillReservedConcurrency int
	// WebhookSourceCIDRs, when given, are the payment and payout
	// providers' source address ranges: the webhooks' REST API admits no
	// one else (WAF and its resource policy, webhooks.go).
	WebhookSourceCIDRs []string
	// CacheMaxStorageGB and CacheMaxECPUPerSecond are the serverless
	// profile's ElastiCache Serverless usage limits: the most data it
	// stores (GB) and the most ECPUs it serves a second. They bound what a
	// runaway (a leak, a flood) can bill: at the defaults, 5 GB is at most
	// $307 a month and 50,000 ECPU/s at most $302. At the storage limit
	// writes are refused (and keys with a TTL evicted); at the ECPU limit
	// commands are throttled. Other profiles have neither.
	CacheMaxStorageGB     int
	CacheMaxECPUPerSecond int
}

// Context keys, as operators type them.
const (
	ctxJWTIssuer              = "jwtIssuer"
	ctxJWTAudience            = "jwtAudience"
	ctxJWTScope               = "jwtScope"
	ctxFinanceEmail           = "financeEmail"
	ctxAlarmEmail             = "alarmEmail"
	ctxRedisNodeType          = "redisNodeType"
	ctxRedisShards            = "redisShards"
	ctxQueueShards            = "queueShards"
	ctxPayoutURL              = "payoutUrl"
	ctxPayoutSecretName       = "payoutSecretName"
	ctxWebhookSecretName      = "payoutWebhookSecretName"
	ctxPayoutLookup           = "payoutLookup"
	ctxIdempotencyWindow      = "payoutIdempotencyWindow"
	ctxConsumerMaxConcurrency = "consumerMaxConcurrency"
	ctxFinanceWebhookURL      = "financeWebhookUrl"
	ctxFinanceSecretName      = "financeSecretName"
	ctxOrdersWebhookURL       = "ordersWebhookUrl"
	ctxOrdersSecretName       = "ordersSecretName"
	ctxPaymentsSecretName     = "paymentsSecretName"
	ctxPollerReserved         = "pollerReservedConcurrency"
	ctxAdminRoleARNs          = "adminRoleArns"
	ctxFinanceReaderARNs      = "financeReaderArns"
	ctxOrdersReaderARNs       = "ordersReaderArns"
	ctxEnqueueReserved        = "enqueueReservedConcurrency"
	ctxSeckillReserved        = "seckillReservedConcurrency"
	ctxWebhookSourceCIDRs     = "webhookSourceCidrs"
	ctxCacheMaxStorageGB      = "cacheMaxStorageGb"
	ctxCacheMaxECPU           = "cacheMaxEcpuPerSecond"
)

// Placeholders: a deployment with them synthesizes (so `make synth` works
// from a clean clone) but cannot authenticate users or pay anyone, and the
// stack says so in a synthesis warning.
const (
	placeholderIssuer    = "https://issuer.example.com/"
	placeholderAudience  = "placeholder-audience"
	placeholderPayoutURL = "https://payouts.example.com/v1/payouts"
)

// DefaultSettings returns the value of every setting no context names.
func DefaultSettings() Settings {
	return Settings{
		JWTIssuer:               placeholderIssuer,
		JWTAudience:             placeholderAudience,
		JWTScope:                "hourglass/user",
		Profile:                 profiles[profileProd],
		RedisNodeType:           profiles[profileProd].RedisNodeType,
		RedisShards:             profiles[profileProd].RedisShards,
		QueueShards:             4,
		CacheMaxStorageGB:       5,
		CacheMaxECPUPerSecond:   50_000,
		PayoutURL:               placeholderPayoutURL,
		PayoutSecretName:        "hourglass/payout-signing-secret",
		PayoutWebhookSecretName: "hourglass/payout-webhook",
		PayoutLookup:            true,
		PayoutIdempotencyWindow: "24h",
		ConsumerMaxConcurrency:  20,
		FinanceSecretName:       "hourglass/finance-signing",
		OrdersSecretName:        "hourglass/orders-signing",
		PaymentsSecretName:      "hourglass/payments-webhook",
	}
}

// Placeholders lists the settings still at a placeholder value.
func (s Settings) Placeholders() []string {
	var names []string
	if s.JWTIssuer == placeholderIssuer {
		names = append(names, ctxJWTIssuer)
	}
	if s.JWTAudience == placeholderAudience {
		names = append(names, ctxJWTAudience)
	}
	if s.PayoutURL == placeholderPayoutURL {
		names = append(names, ctxPayoutURL)
	}
	return names
}

// SettingsFrom reads Settings through get (a context lookup: nil when the
// key is absent, a string from -c, a string or number from cdk.json) and
// reports every value that cannot work, naming its context key.
func SettingsFrom(get func(key string) any) (Settings, error) {
	s := DefaultSettings()
	var errs []error
	if err := s.applyProfile(get(ctxProfile)); err != nil {
		errs = append(errs, err)
	}
	str := func(key string, dst *string) {
		switch v := get(key).(type) {
		case nil:
		case string:
			*dst = strings.TrimSpace(v)
		default:
			errs = append(errs, fmt.Errorf("context %s: want a string, got %v", key, v))
		}
	}
	num := func(key string, dst *int, lo, hi int) {
		var n int
		switch v := get(key).(type) {
		case nil:
			n = *dst
		case float64:
			if v != float64(int(v)) {
				errs = append(errs, fmt.Errorf("context %s: %v is not a whole number", key, v))
				return
			}
			n = int(v)
		case string:
			i, err := strconv.Atoi(strings.TrimSpace(v))
			if err != nil {
				errs = append(errs, fmt.Errorf("context %s: %q is not a whole number", key, v))
				return
			}
			n = i
		default:
			errs = append(errs, fmt.Errorf("context %s: want a number, got %v", key, v))
			return
		}
		if n < lo || n > hi {
			errs = append(errs, fmt.Errorf("context %s: %d is outside %d..%d", key, n, lo, hi))
			return
		}
		*dst = n
	}
	str(ctxJWTIssuer, &s.JWTIssuer)
	str(ctxJWTAudience, &s.JWTAudience)
	str(ctxJWTScope, &s.JWTScope)
	str(ctxFinanceEmail, &s.FinanceEmail)
	str(ctxAlarmEmail, &s.AlarmEmail)
	str(ctxRedisNodeType, &s.RedisNodeType)
	str(ctxPayoutURL, &s.PayoutURL)
	str(ctxPayoutSecretName, &s.PayoutSecretName)
	str(ctxWebhookSecretName, &s.PayoutWebhookSecretName)
	str(ctxIdempotencyWindow, &s.PayoutIdempotencyWindow)
	str(ctxFinanceWebhookURL, &s.FinanceWebhookURL)
	str(ctxFinanceSecretName, &s.FinanceSecretName)
	str(ctxOrdersWebhookURL, &s.OrdersWebhookURL)
	str(ctxOrdersSecretName, &s.OrdersSecretName)
	str(ctxPaymentsSecretName, &s.PaymentsSecretName)
	// roles reads a comma-separated list of IAM role ARNs.
	roles := func(key string, dst *[]string) {
		var list string
		str(key, &list)
		for _, a := range strings.Split(list, ",") {
			if a = strings.TrimSpace(a); a == "" {
				continue
			}
			if !roleARNPattern.MatchString(a) {
				errs = append(errs, fmt.Errorf("context %s: %q is not an IAM role ARN (arn:aws:iam::<account>:role/<name>)", key, a))
				continue
			}
			*dst = append(*dst, a)
		}
	}
	roles(ctxAdminRoleARNs, &s.AdminRoleARNs)
	roles(ctxFinanceReaderARNs, &s.FinanceReaderARNs)
	roles(ctxOrdersReaderARNs, &s.OrdersReaderARNs)
	var cidrs string
	str(ctxWebhookSourceCIDRs, &cidrs)
	for _, c := range strings.Split(cidrs, ",") {
		if c = strings.TrimSpace(c); c == "" {
			continue
		}
		if err := webhookCIDR(c); err != nil {
			errs = append(errs, fmt.Errorf("context %s: %w", ctxWebhookSourceCIDRs, err))
			continue
		}
		if !slices.Contains(s.WebhookSourceCIDRs, c) {
			s.WebhookSourceCIDRs = append(s.WebhookSourceCIDRs, c)
		}
	}
	switch v := get(ctxPayoutLookup).(type) {
	case nil:
	case bool:
		s.PayoutLookup = v
	case string:
		b, err := strconv.ParseBool(strings.TrimSpace(v))
		if err != nil {
			errs = append(errs, fmt.Errorf("context %s: %q is not true or false", ctxPayoutLookup, v))
		}
		s.PayoutLookup = b
	default:
		errs = append(errs, fmt.Errorf("context %s: want true or false, got %v", ctxPayoutLookup, v))
	}
	// ElastiCache allows 1..500 node groups; the withdrawal queue 1..1024
	// shards (HOURGLASS_QUEUE_SHARDS); SQS event sources 2..1000.
	if !s.Profile.RedisServerless { // no shards to count (refused below)
		num(ctxRedisShards, &s.RedisShards, 1, 500)
	}
	num(ctxQueueShards, &s.QueueShards, 1, 1024)
	num(ctxConsumerMaxConcurrency, &s.ConsumerMaxConcurrency, 2, 1000)
	// Lambda reserves 1..1000 (the account quota is the real bound); 0 is off.
	num(ctxPollerReserved, &s.PollerReservedConcurrency, 0, 1000)
	num(ctxEnqueueReserved, &s.EnqueueReservedConcurrency, 0, 1000)
	num(ctxSeckillReserved, &s.SeckillReservedConcurrency, 0, 1000)
	// ElastiCache Serverless takes 1..5,000 GB and 1,000..15,000,000 ECPU/s.
	num(ctxCacheMaxStorageGB, &s.CacheMaxStorageGB, 1, 5000)
	num(ctxCacheMaxECPU, &s.CacheMaxECPUPerSecond, 1000, 15_000_000)
	// A setting the profile has no use for would silently do nothing.
	for _, k := range []string{ctxRedisNodeType, ctxRedisShards, ctxCacheMaxStorageGB, ctxCacheMaxECPU} {
		nodes := k == ctxRedisNodeType || k == ctxRedisShards
		if get(k) != nil && nodes == s.Profile.RedisServerless {
			errs = append(errs, fmt.Errorf("context %s: the %s profile has no use for it (%s)", k, s.Profile.Name, profileUse(nodes)))
		}
	}

	if u, err := url.Parse(s.JWTIssuer); err != nil || u.Scheme != "https" || u.Host == "" {
		errs = append(errs, fmt.Errorf("context %s: %q is not an https URL (API Gateway requires one)", ctxJWTIssuer, s.JWTIssuer))
	}
	if s.JWTAudience == "" {
		errs = append(errs, fmt.Errorf("context %s: must not be empty", ctxJWTAudience))
	}
	if !scopePattern.MatchString(s.JWTScope) {
		errs = append(errs, fmt.Errorf("context %s: %q is not one OAuth scope (printable, no spaces or quotes)", ctxJWTScope, s.JWTScope))
	}
	if _, err := payoutPort(s.PayoutURL); err != nil {
		errs = append(errs, fmt.Errorf("context %s: %w", ctxPayoutURL, err))
	}
	for _, e := range []struct{ key, v string }{{ctxFinanceEmail, s.FinanceEmail}, {ctxAlarmEmail, s.AlarmEmail}} {
		if e.v != "" && !emailPattern.MatchString(e.v) {
			errs = append(errs, fmt.Errorf("context %s: %q is not an e-mail address", e.key, e.v))
		}
	}
	if !s.Profile.RedisServerless && !nodeTypePattern.MatchString(s.RedisNodeType) {
		errs = append(errs, fmt.Errorf("context %s: %q is not an ElastiCache node type (cache.<family>.<size>)", ctxRedisNodeType, s.RedisNodeType))
	}
	for _, u := range []struct{ key, v string }{{ctxFinanceWebhookURL, s.FinanceWebhookURL}, {ctxOrdersWebhookURL, s.OrdersWebhookURL}} {
		if u.v == "" {
			continue
		}
		if _, err := payoutPort(u.v); err != nil {
			errs = append(errs, fmt.Errorf("context %s: %w", u.key, err))
		}
	}
	for _, n := range []struct{ key, v string }{
		{ctxPayoutSecretName, s.PayoutSecretName}, {ctxWebhookSecretName, s.PayoutWebhookSecretName}, {ctxFinanceSecretName, s.FinanceSecretName},
		{ctxOrdersSecretName, s.OrdersSecretName}, {ctxPaymentsSecretName, s.PaymentsSecretName},
	} {
		if !isSecretID(n.v) {
			errs = append(errs, fmt.Errorf("context %s: %q is neither a Secrets Manager secret name nor a complete secret ARN", n.key, n.v))
		}
	}
	// One secret per channel: a key that signs payouts and also verifies
	// the provider's callbacks (or confirms payments) lets whoever holds
	// it for one forge the other. Each function checks its own secrets at
	// cold start; only the stack sees them all.
	used := []struct{ key, v string }{
		{ctxPayoutSecretName, s.PayoutSecretName}, {ctxWebhookSecretName, s.PayoutWebhookSecretName},
		{ctxPaymentsSecretName, s.PaymentsSecretName},
	}
	if s.FinanceWebhookURL != "" {
		used = append(used, struct{ key, v string }{ctxFinanceSecretName, s.FinanceSecretName})
	}
	if s.OrdersWebhookURL != "" {
		used = append(used, struct{ key, v string }{ctxOrdersSecretName, s.OrdersSecretName})
	}
	for i, a := range used {
		for _, b := range used[:i] {
			if a.v == b.v {
				errs = append(errs, fmt.Errorf("context %s: names the same secret as %s (%q): give each channel a secret of its own",
					a.key, b.key, a.v))
			}
		}
	}
	if d, err := time.ParseDuration(s.PayoutIdempotencyWindow); err != nil || d <= 0 {
		errs = append(errs, fmt.Errorf("context %s: %q is not a positive duration (24h)", ctxIdempotencyWindow, s.PayoutIdempotencyWindow))
	}
	if err := errors.Join(errs...); err != nil {
		return Settings{}, err
	}
	return s, nil
}

var (
	emailPattern      = regexp.MustCompile(`^[^@\s]+@[^@\s]+\.[^@\s]+$`)
	scopePattern      = regexp.MustCompile(`^[\x21\x23-\x5b\x5d-\x7e]{1,256}$`) // RFC 6749 3.3
	nodeTypePattern   = regexp.MustCompile(`^cache\.[a-z0-9-]+\.[a-z0-9]+$`)
	secretNamePattern = regexp.MustCompile(`^[A-Za-z0-9/_+=.@-]{1,512}$`)
	// A complete secret ARN ends in the hyphen and six characters Secrets
	// Manager appends to the name; a partial one (without them) is refused,
	// as Secrets Manager may read its last seven characters as that suffix.
	secretARNPattern = regexp.MustCompile(`^arn:aws[a-z-]*:secretsmanager:[a-z0-9-]+:[0-9]{12}:secret:[A-Za-z0-9/_+=.@-]+-[A-Za-z0-9]{6}$`)
	roleARNPattern   = regexp.MustCompile(`^arn:aws[-a-z]*:iam::[0-9]{12}:role/[A-Za-z0-9+=,.@_/-]{1,512}$`)
)

// isSecretID: a secret's name or its complete ARN, the two forms the
// functions pass to GetSecretValue as they are (the *_SECRET_ID variables).
func isSecretID(id string) bool {
	if strings.HasPrefix(id, "arn:") {
		return secretARNPattern.MatchString(id)
	}
	return secretNamePattern.MatchString(id)
}

// webhookCIDR checks one of webhookSourceCidrs as WAF's IP sets take it:
// an IPv4 or IPv6 range in CIDR notation, its address the range's first
// (no host bits), narrower than everything.
func webhookCIDR(c string) error {
	p, err := netip.ParsePrefix(c)
	switch {
	case err != nil:
		return fmt.Errorf("%q is not an address range in CIDR notation (203.0.113.0/24, 2001:db8::/32)", c)
	case p.Bits() == 0:
		return fmt.Errorf("%q admits every address: leave webhookSourceCidrs out instead", c)
	case p.Addr().Zone() != "" || p.Addr().Is4In6():
		return fmt.Errorf("%q is not a plain IPv4 or IPv6 range", c)
	case p.Masked() != p:
		return fmt.Errorf("%q has host bits set: did you mean %s?", c, p.Masked())
	}
	return nil
}

// payoutPort is the TCP port the functions reach the payout provider on: the
// only destination outside AWS their security group lets them reach.
func payoutPort(raw string) (int, error) {
	u, err := url.Parse(raw)
	// Withdrawals and their signatures never travel in clear text.
	if err != nil || u.Scheme != "https" || u.Hostname() == "" {
		return 0, fmt.Errorf("%q is not an https URL", raw)
	}
	if p := u.Port(); p != "" {
		n, err := strconv.Atoi(p)
		if err != nil || n < 1 || n > 65535 {
			return 0, fmt.Errorf("%q has a bad port", raw)
		}
		return n, nil
	}
	return 443, nil
}
