package policy

import (
	"slices"
	"testing"
)

func TestReservedOverlaps(t *testing.T) {
	reserved := []string{"/etc/cyberos", "/tmp/cyberos.yaml", "/tmp/cyberos-state", "/var/lib/cyberos"}
	for _, c := range []struct {
		glob string
		want []string
	}{
		{"/**", reserved},
		{"/tmp/**", []string{"/tmp/cyberos.yaml", "/tmp/cyberos-state"}},
		{"/tmp/*.yaml", []string{"/tmp/cyberos.yaml"}},
		{"/tmp/*.txt", nil},
		{"/tmp/cyberos-state/logs/*", []string{"/tmp/cyberos-state"}},
		{"/etc/cyberos", []string{"/etc/cyberos"}},
		{"/etc/*/seccomp-profiles/*.json", []string{"/etc/cyberos"}},
		{"/etc/hosts", nil},
		{"/srv/data/**", nil},
		{"/var/lib/{cyberos,other}/**", []string{"/var/lib/cyberos"}},
	} {
		p := &Policy{AllowedFiles: []string{c.glob}}
		got := p.ReservedOverlaps(reserved)[c.glob]
		if !slices.Equal(got, c.want) {
			t.Errorf("%s: overlaps %q, want %q", c.glob, got, c.want)
		}
	}
}
