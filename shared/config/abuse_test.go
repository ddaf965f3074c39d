package config_test

import (
	"strings"
	"testing"

	"github.com/hourglass/hourglass/shared/config"
	"github.com/hourglass/hourglass/shared/ratelimit"
)

// TestRateLimitDefaults: off locally, config.LambdaRates in Lambda; a set
// value wins, "off" turns a Lambda default off.
func TestRateLimitDefaults(t *testing.T) {
	for _, tc := range []struct {
		name    string
		profile config.Profile
		vars    map[string]string
		want    map[ratelimit.Family][2]string
	}{
		{"local, unset", config.Local, nil, map[ratelimit.Family][2]string{
			ratelimit.Purchase: {"off", "off"}, ratelimit.Withdrawal: {"off", "off"}}},
		{"lambda, unset", config.Lambda, nil, map[ratelimit.Family][2]string{
			ratelimit.Purchase: {"5/s", "100/s:200"}, ratelimit.Withdrawal: {"10/m", "600/m"}}},
		{"lambda, set", config.Lambda, map[string]string{"HOURGLASS_RATE_PURCHASE_USER": "2/s:4", "HOURGLASS_RATE_PURCHASE_SOURCE": "off",
			"HOURGLASS_RATE_WITHDRAWAL_USER": "0", "HOURGLASS_RATE_WITHDRAWAL_SOURCE": ""}, map[ratelimit.Family][2]string{
			ratelimit.Purchase: {"2/s:4", "off"}, ratelimit.Withdrawal: {"off", "600/m"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			setEnv(t, tc.vars)
			rules, err := load(t, tc.profile).RateRules()
			if err != nil {
				t.Fatal(err)
			}
			for f, want := range tc.want {
				got := [2]string{ratelimit.Format(rules[f].User), ratelimit.Format(rules[f].Source)}
				if got != want {
					t.Errorf("%s: %v, want %v", f, got, want)
				}
			}
		})
	}
}

func TestAbuseSettingsAreChecked(t *testing.T) {
	setEnv(t, map[string]string{
		"HOURGLASS_RATE_PURCHASE_USER": "fast", "HOURGLASS_RATE_WITHDRAWAL_SOURCE": "5/d",
		"HOURGLASS_AUTH": "jwt", "HOURGLASS_JWT_SCOPE": "two scopes",
	})
	_, err := config.Load(config.Local)
	if err == nil {
		t.Fatal("bad settings accepted")
	}
	for _, name := range []string{"HOURGLASS_RATE_PURCHASE_USER", "HOURGLASS_RATE_WITHDRAWAL_SOURCE", "HOURGLASS_JWT_SCOPE"} {
		if !strings.Contains(err.Error(), name) {
			t.Errorf("error does not name %s: %v", name, err)
		}
	}
	setEnv(t, map[string]string{"HOURGLASS_AUTH": "jwt"})
	if got := load(t, config.Local).JWTScope; got != "hourglass/user" {
		t.Errorf("default scope %q", got)
	}
}
