package cli

import (
	"bytes"
	"testing"

	"cyberos.dev/supervisor/internal/seccomp/profiletool"
)

// TestPrintExplanationSummary: rules a summary line stands for print as
// that line, rules that repeat the default action still print on their
// own, and --rules lists every rule with the summary after them.
func TestPrintExplanationSummary(t *testing.T) {
	ex := profiletool.Explanation{
		File: "p.json", Syscall: "ioctl", Number: 16, Decision: "conditional", Default: "SCMP_ACT_ERRNO(EPERM)",
		Summary: "ALLOW for every value of arg1's low 32 bits except TIOCSTI (0x5412)",
		Rules: []profiletool.ExplainRule{
			{Rule: "syscalls[2]", Action: "SCMP_ACT_ALLOW", Conditions: []string{"arg1 & 0x1 == 0x1"}},
			{Rule: "syscalls[3]", Action: "SCMP_ACT_ERRNO(EPERM)", Conditions: []string{"arg1 == 0x0"}, Ignored: "same as the default action"},
			{Rule: "syscalls[5]", Action: "SCMP_ACT_ALLOW", Conditions: []string{"arg1 & 0x1 == 0x0"}},
		},
		Args: []uint64{0, 0x5412}, Verdict: "ERRNO(EPERM)",
	}
	for _, c := range []struct {
		allRules bool
		want     string
	}{
		{false, `ioctl (number 16) in p.json
  syscalls[2] to syscalls[5] (2 rules; --rules lists them): ALLOW for every value of arg1's low 32 bits except TIOCSTI (0x5412)
  syscalls[3]: SCMP_ACT_ERRNO(EPERM) when arg1 == 0x0 [no effect: same as the default action]
decided by those rules: the values they except get the default action SCMP_ACT_ERRNO(EPERM)
ioctl(0x0, 0x5412) → ERRNO(EPERM)
`},
		{true, `ioctl (number 16) in p.json
  syscalls[2]: SCMP_ACT_ALLOW when arg1 & 0x1 == 0x1
  syscalls[3]: SCMP_ACT_ERRNO(EPERM) when arg1 == 0x0 [no effect: same as the default action]
  syscalls[5]: SCMP_ACT_ALLOW when arg1 & 0x1 == 0x0
in short: ALLOW for every value of arg1's low 32 bits except TIOCSTI (0x5412); those: default action SCMP_ACT_ERRNO(EPERM)
decided by the conditional rules above (any one whose conditions all hold applies); when none matches: default action SCMP_ACT_ERRNO(EPERM)
ioctl(0x0, 0x5412) → ERRNO(EPERM)
`},
	} {
		var b bytes.Buffer
		printExplanation(&b, ex, c.allRules)
		if b.String() != c.want {
			t.Errorf("rules %v:\n%s\nwant\n%s", c.allRules, b.String(), c.want)
		}
	}
}
