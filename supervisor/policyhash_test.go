package supervisor

import (
	"encoding/json"
	"fmt"
	"testing"

	"cyberos.dev/audit"
	"cyberos.dev/policy"
)

// policyHash answers from what it remembers exactly what it computes: the
// HashJSON of the policy's encoding, the first time and every time after;
// a policy that differs in any field has its own hash; and what it
// remembers stays within maxPolicyHashes.
func TestPolicyHashRemembered(t *testing.T) {
	want := func(pol *policy.Policy) string {
		b, err := json.Marshal(pol)
		if err != nil {
			t.Fatal(err)
		}
		h, err := audit.HashJSON(b)
		if err != nil {
			t.Fatal(err)
		}
		return h
	}
	a := &policy.Policy{Name: "a", Version: "1", EffortMinutes: 1}
	b := &policy.Policy{Name: "a", Version: "1", EffortMinutes: 2}
	for range 3 {
		for _, pol := range []*policy.Policy{a, b} {
			h, err := policyHash(pol)
			if err != nil || h != want(pol) {
				t.Fatalf("policyHash(%+v) = %q, %v; want %q", pol, h, err, want(pol))
			}
		}
	}
	if ha, _ := policyHash(a); ha == want(b) {
		t.Fatal("two policies that differ share a hash")
	}
	for i := range 2 * maxPolicyHashes {
		pol := &policy.Policy{Name: fmt.Sprintf("s%d", i)}
		if h, err := policyHash(pol); err != nil || h != want(pol) {
			t.Fatalf("policyHash(%s) = %q, %v; want %q", pol.Name, h, err, want(pol))
		}
	}
	policyHashes.Lock()
	n := len(policyHashes.m)
	policyHashes.Unlock()
	if n > maxPolicyHashes {
		t.Errorf("%d policy hashes remembered, want at most %d", n, maxPolicyHashes)
	}
}
