// Package costprofile is bench/profiles.json: what each deployment
// profile of infra/profile.go runs whatever the load, as the cost model
// (bench) prices it and the infra tests count it in each profile's
// synthesized template.
package costprofile

import (
	"encoding/json"
	"fmt"
	"os"
)

// Profile is one profile's line.
type Profile struct {
	Name string `json:"name"`
	// CacheNodes of CacheNodePrice (a prices.json key), or a Serverless cache.
	CacheNodes     int    `json:"cache_nodes"`
	CacheNodePrice string `json:"cache_node_price"`
	Serverless     bool   `json:"serverless_cache"`
	NatGateways    int    `json:"nat_gateways"`
	// InterfaceEndpoints, each with a network interface in EndpointAZs AZs;
	// with none, the functions reach SQS, SNS and Secrets Manager through
	// the NAT gateways (or over IPv6), billed per GB through NAT.
	InterfaceEndpoints int     `json:"interface_endpoints"`
	EndpointAZs        int     `json:"endpoint_azs"`
	PollerMemoryMB     float64 `json:"poller_memory_mb"`
	KMSKeys            int     `json:"kms_keys"`
	// Secrets the stack creates (the Redis users' passwords), and the
	// operator's it reads (the payout, callback and payment keys; finance's
	// and the order events' too with their webhooks).
	Secrets         int `json:"secrets"`
	OperatorSecrets int `json:"operator_secrets"`
	Dashboards      int `json:"dashboards"`
	// Alarms counts the metrics the alarms read, as CloudWatch bills them.
	Alarms     int `json:"alarms"`
	WAFWebACLs int `json:"waf_web_acls"`
	WAFRules   int `json:"waf_rules"`
	// GivesUp is what the profile gives up against prod, in a phrase.
	GivesUp string `json:"gives_up"`
}

// Read reads the profiles file at path, prod first.
func Read(path string) ([]Profile, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var f struct {
		Profiles []Profile `json:"profiles"`
	}
	if err := json.Unmarshal(b, &f); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	for _, p := range f.Profiles {
		if p.Name == "" || p.PollerMemoryMB <= 0 || (p.CacheNodes > 0) == p.Serverless || p.GivesUp == "" {
			return nil, fmt.Errorf("%s: profile %q: want a name, poller memory, nodes or a serverless cache (not both) and what it gives up", path, p.Name)
		}
	}
	if len(f.Profiles) == 0 || f.Profiles[0].Name != "prod" {
		return nil, fmt.Errorf("%s: want prod first", path)
	}
	return f.Profiles, nil
}
