package config

import (
	"fmt"
	"net/url"
	"slices"
)

// Channel is one secret's use: the setting that holds it locally, the
// *_SECRET_ID that names it in Secrets Manager, and its public
// development default.
type Channel struct {
	// Setting holds the key locally (PAYMENTS_WEBHOOK_SECRET); IDSetting
	// names its secret in AWS (PAYMENTS_WEBHOOK_SECRET_ID); ID is that
	// setting's value.
	Setting, IDSetting, ID string
	// What says what the key authenticates, for errors.
	What string
	// Dev is the public default of Setting ("" when it has none).
	Dev string
	// URLSetting, if set, is the outbound endpoint the key signs for: the
	// key is needed when that URL is set.
	URLSetting, URL string
}

// Channels lists every secret a function may use, its Redis user's
// password first.
func (c Config) Channels() []Channel {
	return []Channel{
		{Setting: "REDIS_URL's password", IDSetting: "REDIS_AUTH_SECRET_ID", ID: c.RedisAuthSecretID,
			What: "its Redis user's password"},
		{Setting: "PAYOUT_SIGNING_SECRET", IDSetting: "PAYOUT_SIGNING_SECRET_ID", ID: c.PayoutSecretID,
			What: "the signing key of payout requests", Dev: "dev-secret", URLSetting: "PAYOUT_URL", URL: c.PayoutURL},
		{Setting: "FINANCE_SIGNING_SECRET", IDSetting: "FINANCE_SIGNING_SECRET_ID", ID: c.FinanceSecretID,
			What: "the signing key of finance's webhook", Dev: "dev-finance-secret",
			URLSetting: "FINANCE_WEBHOOK_URL", URL: c.FinanceWebhookURL},
		{Setting: "PAYOUT_WEBHOOK_SECRET", IDSetting: "PAYOUT_WEBHOOK_SECRET_ID", ID: c.WebhookSecretID,
			What: "the key of the payout provider's callbacks", Dev: "dev-webhook-secret"},
		{Setting: "PAYMENTS_WEBHOOK_SECRET", IDSetting: "PAYMENTS_WEBHOOK_SECRET_ID", ID: c.PaymentsSecretID,
			What: "the key of the payment provider's confirmations", Dev: "dev-payments-secret"},
		{Setting: "ORDERS_SIGNING_SECRET", IDSetting: "ORDERS_SIGNING_SECRET_ID", ID: c.OrdersSecretID,
			What: "the signing key of the order events' webhook", Dev: "dev-orders-secret",
			URLSetting: "ORDERS_WEBHOOK_URL", URL: c.OrdersWebhookURL},
	}
}

// DevSecrets are the public defaults of the secret settings (and of
// HOURGLASS_ADMIN_TOKEN): anyone who reads this code knows them, so a key
// equal to one of them authenticates no one.
func DevSecrets() []string {
	return []string{"dev-secret", "dev-finance-secret", "dev-webhook-secret", "dev-payments-secret", "dev-orders-secret", "dev-admin"}
}

// IsDevSecret reports whether key is one of DevSecrets.
func IsDevSecret(key string) bool { return slices.Contains(DevSecrets(), key) }

// CheckDeployed reports what makes c unsafe in a function that faces the
// network (a Lambda function), where the local stack's conveniences would
// let anyone in: every secret the function uses must come from Secrets
// Manager (its *_SECRET_ID), not from the public defaults; every outbound
// URL must be https; no two channels may share one secret, so that a key
// leaked or misused on one cannot sign for another. uses names the
// *_SECRET_ID settings the function needs whatever else is set (the
// withdrawal API's callback keys); a secret that signs for an outbound URL
// is needed when that URL is set. The values of secrets are never quoted;
// Secrets.Check (package app) judges the keys once read.
func (c Config) CheckDeployed(uses ...string) error {
	var ps []problem
	bad := func(name, format string, args ...any) {
		ps = append(ps, problem{name, fmt.Sprintf(format, args...)})
	}
	for _, u := range []struct{ name, url string }{
		{"PAYOUT_URL", c.PayoutURL}, {"FINANCE_WEBHOOK_URL", c.FinanceWebhookURL}, {"ORDERS_WEBHOOK_URL", c.OrdersWebhookURL},
		{"DYNAMODB_ENDPOINT", c.DynamoDBEndpoint},
	} {
		if pu, err := url.Parse(u.url); u.url != "" && err == nil && pu.Scheme != "https" {
			bad(u.name, "must be an https URL in a Lambda function (it is %s://…): what it carries and its "+
				"signature must not travel in clear text; give the endpoint's https URL", pu.Scheme)
		}
	}
	seen := map[string]string{} // secret id -> the setting that named it first
	for _, ch := range c.Channels() {
		needed := slices.Contains(uses, ch.IDSetting) || (ch.URLSetting != "" && ch.URL != "")
		switch {
		case ch.ID == "" && needed && ch.URLSetting != "":
			bad(ch.IDSetting, "must be set in a Lambda function that sends to %s: without it %s is %s, whose "+
				"default is public; set %s to the name or ARN of the Secrets Manager secret holding the key (the stack does)",
				ch.URLSetting, ch.What, ch.Setting, ch.IDSetting)
		case ch.ID == "" && needed:
			bad(ch.IDSetting, "must be set in a Lambda function: without it %s is %s, whose default is public, so "+
				"anyone could forge what it authenticates; set %s to the name or ARN of the Secrets Manager secret "+
				"holding the key (the stack does)", ch.What, ch.Setting, ch.IDSetting)
		case ch.ID == "":
		case seen[ch.ID] != "":
			bad(ch.IDSetting, "names the same secret as %s: give each channel a secret of its own, so that a key "+
				"leaked or misused on one cannot sign for the other", seen[ch.ID])
		default:
			seen[ch.ID] = ch.IDSetting
		}
	}
	return join(ps)
}

// Require reports the named settings that are empty; functions call it for
// what they cannot run without (the poller's WORK_QUEUE_URL, say). A
// *_SECRET_ID among names is left to CheckDeployed, which says why.
func (c Config) Require(names ...string) error {
	values := map[string]string{
		"REDIS_URL": string(c.RedisURL), "PAYOUT_URL": c.PayoutURL, "WORK_QUEUE_URL": c.WorkQueueURL,
		"FINANCE_TOPIC_ARN": c.FinanceTopicARN, "FINANCE_WEBHOOK_URL": c.FinanceWebhookURL,
		"ORDERS_TOPIC_ARN": c.OrdersTopicARN, "ORDERS_WEBHOOK_URL": c.OrdersWebhookURL,
	}
	var ps []problem
	for _, n := range names {
		v, known := values[n]
		switch {
		case known && v == "":
			ps = append(ps, problem{n, "must be set"})
		case !known && !slices.ContainsFunc(c.Channels(), func(ch Channel) bool { return ch.IDSetting == n }):
			ps = append(ps, problem{n, "is not a setting Require knows"})
		}
	}
	return join(ps)
}
