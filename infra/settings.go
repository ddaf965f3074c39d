package main

import (
	"errors"
	"fmt"
	"net/url"
	"regexp"
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
	// RedisNodeType is the ElastiCache node type; RedisShards the number of
	// node groups (cluster-mode shards), each with one replica.
	RedisNodeType string
	RedisShards   int
	// QueueShards is HOURGLASS_QUEUE_SHARDS: shards of the withdrawal queue.
	// It is fixed for the life of the data.
	QueueShards int
	// PayoutURL is the payout provider's endpoint; PayoutSecretName names
	// the existing Secrets Manager secret that holds its signing key.
	PayoutURL        string
	PayoutSecretName string
	// PayoutWebhookSecretName names the existing secret that authenticates
	// the provider's callbacks (POST /v1/webhooks/payouts).
	PayoutWebhookSecretName string
	// PayoutLookup: the provider answers the status lookup
	// GET $PAYOUT_URL/{withdrawal_id} (PAYOUT_LOOKUP). PayoutIdempotencyWindow:
	// how long it remembers an idempotency key (PAYOUT_IDEMPOTENCY_WINDOW).
	PayoutLookup            bool
	PayoutIdempotencyWindow string
	// ConsumerMaxConcurrency caps the consumer's SQS event source (2..1000).
	ConsumerMaxConcurrency int
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
)

// Placeholders: a deployment with them synthesizes (so `make synth` works
// from a clean clone) but cannot authenticate users or pay anyone, and the
// stack says so in a synthesis warning.
const (
	placeholderIssuer    = "https://issuer.example.com/"
	placeholderPayoutURL = "https://payouts.example.com/v1/payouts"
)

// DefaultSettings returns the value of every setting no context names.
func DefaultSettings() Settings {
	return Settings{
		JWTIssuer:        placeholderIssuer,
		JWTAudience:      "hourglass-app",
		JWTScope:         "hourglass/user",
		RedisNodeType:    "cache.r7g.large",
		RedisShards:      2,
		QueueShards:      4,
		PayoutURL:        placeholderPayoutURL,
		PayoutSecretName: "hourglass/payout-signing-secret",
		// Not "-secret": a name ending in a hyphen and six characters reads
		// as a complete ARN to Secrets Manager.
		PayoutWebhookSecretName: "hourglass/payout-webhook",
		PayoutLookup:            true,
		PayoutIdempotencyWindow: "24h",
		ConsumerMaxConcurrency:  20,
	}
}

// Placeholders lists the settings still at a placeholder value.
func (s Settings) Placeholders() []string {
	var names []string
	if s.JWTIssuer == placeholderIssuer {
		names = append(names, ctxJWTIssuer)
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
	num(ctxRedisShards, &s.RedisShards, 1, 500)
	num(ctxQueueShards, &s.QueueShards, 1, 1024)
	num(ctxConsumerMaxConcurrency, &s.ConsumerMaxConcurrency, 2, 1000)

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
	if !nodeTypePattern.MatchString(s.RedisNodeType) {
		errs = append(errs, fmt.Errorf("context %s: %q is not an ElastiCache node type (cache.<family>.<size>)", ctxRedisNodeType, s.RedisNodeType))
	}
	for _, n := range []struct{ key, v string }{{ctxPayoutSecretName, s.PayoutSecretName}, {ctxWebhookSecretName, s.PayoutWebhookSecretName}} {
		if !secretNamePattern.MatchString(n.v) {
			errs = append(errs, fmt.Errorf("context %s: %q is not a Secrets Manager secret name", n.key, n.v))
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
)

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
