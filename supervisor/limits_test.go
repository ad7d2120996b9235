package supervisor

import (
	"testing"

	"cyberos.dev/policy"
)

// The cost bounds: the operator's defaults (else the built-in ones); a
// frontmatter rate may lower the operator's, never raise it.
func TestCostLimits(t *testing.T) {
	pol := func(rate int) *policy.Policy { return &policy.Policy{RateLimitPerMinute: rate} }
	for _, tc := range []struct {
		name string
		pol  *policy.Policy
		d    *Defaults
		want limits
	}{
		{"built-in", pol(0), nil, limits{DefaultRateLimitPerMinute, DefaultMaxBrokerConnections, DefaultMaxAuditRows}},
		{"operator", pol(0), &Defaults{RateLimitPerMinute: 60, MaxBrokerConnections: 4, MaxAuditRows: 200}, limits{60, 4, 200}},
		{"operator's zero is the built-in", pol(0), &Defaults{MaxAuditRows: 200}, limits{DefaultRateLimitPerMinute, DefaultMaxBrokerConnections, 200}},
		{"frontmatter lowers", pol(120), nil, limits{120, DefaultMaxBrokerConnections, DefaultMaxAuditRows}},
		{"frontmatter cannot raise", pol(100000), &Defaults{RateLimitPerMinute: 60}, limits{60, DefaultMaxBrokerConnections, DefaultMaxAuditRows}},
	} {
		if got := costLimits(tc.pol, tc.d); got != tc.want {
			t.Errorf("%s: %+v, want %+v", tc.name, got, tc.want)
		}
	}
}
