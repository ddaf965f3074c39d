package main

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestCdkJSONDocumentsTheDefaults: infra/cdk.json lists every setting at
// its default, so an operator sees (and edits) them there, except those
// whose default is the profile's.
func TestCdkJSONDocumentsTheDefaults(t *testing.T) {
	ctx, err := fileContext("cdk.json")
	if err != nil {
		t.Fatal(err)
	}
	got, err := SettingsFrom(func(key string) any { return ctx[key] })
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(DefaultSettings(), got); diff != "" {
		t.Errorf("cdk.json context differs from DefaultSettings (-code +cdk.json):\n%s", diff)
	}
	// redisNodeType and redisShards are not there: a value in cdk.json
	// would win over the profile's choice (-c profile=dev). Nor are the
	// serverless usage limits (cacheMaxStorageGb, cacheMaxEcpuPerSecond):
	// the node profiles refuse them.
	keys := []string{ctxProfile, ctxJWTIssuer, ctxJWTAudience, ctxJWTScope, ctxFinanceEmail, ctxAlarmEmail,
		ctxQueueShards, ctxPayoutURL, ctxPayoutSecretName, ctxWebhookSecretName, ctxPayoutLookup, ctxIdempotencyWindow,
		ctxConsumerMaxConcurrency, ctxFinanceWebhookURL, ctxFinanceSecretName, ctxPollerReserved, ctxAdminRoleARNs,
		ctxOrdersWebhookURL, ctxOrdersSecretName, ctxPaymentsSecretName, ctxFinanceReaderARNs, ctxOrdersReaderARNs,
		ctxEnqueueReserved, ctxSeckillReserved, ctxWebhookSourceCIDRs}
	for _, k := range keys {
		if _, ok := ctx[k]; !ok {
			t.Errorf("cdk.json does not document %s", k)
		}
	}
	// Besides the CDK's feature flags (TestCdkJSONSetsTheRecommendedFeatureFlags).
	n := 0
	for k := range ctx {
		if !strings.HasPrefix(k, "@aws-cdk") {
			n++
		}
	}
	if n != len(keys) {
		t.Errorf("cdk.json has %d context keys, the app reads %d", n, len(keys))
	}
}

func TestSettingsFrom(t *testing.T) {
	tests := []struct {
		name    string
		ctx     map[string]any
		want    func(*Settings)
		wantErr []string
	}{
		{name: "defaults", ctx: map[string]any{}, want: func(*Settings) {}},
		{
			name: "strings from -c",
			ctx: map[string]any{
				"jwtIssuer": "https://cognito-idp.eu-west-1.amazonaws.com/eu-west-1_abc", "jwtAudience": "app-client", "jwtScope": "payments/app",
				"financeEmail": "finance@example.com", "alarmEmail": " ops@example.com ", "redisNodeType": "cache.r7g.xlarge",
				"redisShards": "3", "queueShards": "16", "payoutUrl": "https://pay.example.com/payouts",
				"payoutSecretName": "prod/payout", "consumerMaxConcurrency": "100",
			},
			want: func(s *Settings) {
				s.JWTIssuer, s.JWTAudience = "https://cognito-idp.eu-west-1.amazonaws.com/eu-west-1_abc", "app-client"
				s.JWTScope = "payments/app"
				s.FinanceEmail, s.AlarmEmail, s.RedisNodeType = "finance@example.com", "ops@example.com", "cache.r7g.xlarge"
				s.RedisShards, s.QueueShards, s.ConsumerMaxConcurrency = 3, 16, 100
				s.PayoutURL, s.PayoutSecretName = "https://pay.example.com/payouts", "prod/payout"
			},
		},
		{
			name: "numbers from cdk.json",
			ctx:  map[string]any{"redisShards": 4.0, "queueShards": 1.0},
			want: func(s *Settings) { s.RedisShards, s.QueueShards = 4, 1 },
		},
		{
			name: "everything wrong at once",
			ctx: map[string]any{
				"jwtIssuer": "http://issuer.example.com", "jwtAudience": "", "financeEmail": "finance", "jwtScope": "a b",
				"redisNodeType": "r7g.large", "redisShards": "0", "queueShards": 2.5, "payoutUrl": "http://pay.example.com",
				"payoutSecretName": "bad name", "consumerMaxConcurrency": 1.0, "alarmEmail": 7.0,
				"financeWebhookUrl": "ftp://finance", "financeSecretName": "arn:aws:secretsmanager:x", "pollerReservedConcurrency": 1001.0,
				"adminRoleArns": "root", "ordersWebhookUrl": "http://orders.example.com", "ordersSecretName": "",
				"paymentsSecretName": "bad name",
			},
			wantErr: []string{"jwtIssuer", "jwtAudience", "jwtScope", "financeEmail", "alarmEmail", "redisNodeType", "redisShards",
				"queueShards", "payoutUrl", "payoutSecretName", "consumerMaxConcurrency", "financeWebhookUrl", "financeSecretName",
				"pollerReservedConcurrency", "adminRoleArns", "ordersWebhookUrl", "ordersSecretName", "paymentsSecretName"},
		},
		{name: "shards out of range", ctx: map[string]any{"queueShards": "2000"}, wantErr: []string{"queueShards: 2000 is outside 1..1024"}},
		{
			name: "order events' webhook and the payments secret",
			ctx: map[string]any{"ordersWebhookUrl": " https://orders.example.com/hook ", "ordersSecretName": "ops/orders",
				"paymentsSecretName": "ops/payments"},
			want: func(s *Settings) {
				s.OrdersWebhookURL, s.OrdersSecretName, s.PaymentsSecretName = "https://orders.example.com/hook", "ops/orders", "ops/payments"
			},
		},
		{name: "bad payout port", ctx: map[string]any{"payoutUrl": "https://pay.example.com:99999/"}, wantErr: []string{"payoutUrl"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := SettingsFrom(func(key string) any { return tt.ctx[key] })
			if tt.wantErr != nil {
				if err == nil {
					t.Fatalf("no error; want one naming %v", tt.wantErr)
				}
				for _, w := range tt.wantErr {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("error %q does not name %s", err, w)
					}
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			want := DefaultSettings()
			tt.want(&want)
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("settings (-want +got):\n%s", diff)
			}
		})
	}
}

func TestPlaceholders(t *testing.T) {
	if got := DefaultSettings().Placeholders(); !cmp.Equal(got, []string{"jwtIssuer", "jwtAudience", "payoutUrl"}) {
		t.Errorf("placeholders %v", got)
	}
	if got := optSettings.Placeholders(); got != nil {
		t.Errorf("placeholders %v of real settings", got)
	}
}

func TestPayoutPort(t *testing.T) {
	for url, want := range map[string]int{
		"https://pay.example.com/x": 443, "https://pay.example.com:8443/x": 8443,
	} {
		if got, err := payoutPort(url); err != nil || got != want {
			t.Errorf("payoutPort(%q) = %d, %v; want %d", url, got, err, want)
		}
	}
}
