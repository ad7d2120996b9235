// Package profiletool holds the operator tools for seccomp profiles, the
// work behind `cyberos seccomp lint`, `explain`, `diff`, `import` and
// `record`: it reads profiles with package seccomp's loader, runs their
// compiled filters in a BPF interpreter, and writes profiles back. The
// sandbox never links it; it needs libseccomp, so on platforms other than
// Linux every tool returns ErrUnsupported.
package profiletool

import "errors"

// ErrUnsupported: the operator tools need libseccomp, which only Linux has.
var ErrUnsupported = errors.New("seccomp: profile tools need libseccomp (Linux)")

// LintWarning is one dangerous allowance a profile makes.
type LintWarning struct {
	Syscall string `json:"syscall"`
	Rule    string `json:"rule,omitempty"` // e.g. syscalls[3]
	Message string `json:"message"`
}

// LintReport is what `seccomp lint` found in one file. Error is set when the
// profile would be refused at sandbox start (or does not compile);
// Warnings are allowances that weaken the sandbox but are accepted.
type LintReport struct {
	File     string        `json:"file"`
	Error    string        `json:"error,omitempty"`
	Warnings []LintWarning `json:"warnings"`
	Allowed  int           `json:"allowed_syscalls"` // names of this architecture some rule allows
	// NotNative are the names the profile lists that are not syscalls of
	// this architecture (another ABI's, e.g. i386's _llseek): they decide
	// nothing here and are not counted in Allowed.
	NotNative       []string `json:"not_native,omitempty"`
	BPFInstructions int      `json:"bpf_instructions"` // of the native-architecture filter
}

// ExplainRule is one rule of a profile that names the explained syscall.
type ExplainRule struct {
	Rule       string   `json:"rule"`   // syscalls[i]
	Action     string   `json:"action"` // e.g. SCMP_ACT_ERRNO(ENOSYS)
	Conditions []string `json:"conditions,omitempty"`
	// Ignored says why libcontainer does not apply this rule, if it does not.
	Ignored string `json:"ignored,omitempty"`
}

// Explanation says which rule decides a syscall, and how.
type Explanation struct {
	File    string `json:"file"`
	Syscall string `json:"syscall"`
	Number  int    `json:"number"` // native number; negative when this architecture lacks it
	// Decision: "unconditional" (one rule decides whatever the arguments),
	// "conditional" (rules with argument conditions, else the default),
	// "default" (no rule names it), "enosys" (no rule names it and it is
	// newer than every syscall the profile names: runc answers ENOSYS).
	Decision string        `json:"decision"`
	Rules    []ExplainRule `json:"rules"`
	// Summary says in one line what the conditional rules allow when they
	// are masked tests of one argument, e.g. "ALLOW for every value of
	// arg1's low 32 bits except TIOCSTI (0x5412), TIOCLINUX (0x541c)".
	Summary string `json:"summary,omitempty"`
	Default string `json:"default"`
	// Args and Verdict: with arguments given, what the compiled filter
	// returns for exactly that call.
	Args    []uint64 `json:"args,omitempty"`
	Verdict string   `json:"verdict,omitempty"`
}

// DiffEntry is one syscall whose treatment differs between two profiles.
// Old and New list its effective rules ("ALLOW", "ALLOW if arg0 == 0x1",
// "ERRNO(ENOSYS)"); empty means the default action.
type DiffEntry struct {
	Syscall string   `json:"syscall"`
	Change  string   `json:"change"` // added, removed, changed
	Old     []string `json:"old,omitempty"`
	New     []string `json:"new,omitempty"`
}

// ProfileDiff is `seccomp diff A B`.
type ProfileDiff struct {
	A        string      `json:"a"`
	B        string      `json:"b"`
	Settings []string    `json:"settings,omitempty"` // defaultAction, architectures, flags changes
	Syscalls []DiffEntry `json:"syscalls"`
	// Ignored are names either profile lists that are not syscalls of this
	// architecture: they decide nothing here, so they are not compared.
	Ignored []string `json:"ignored,omitempty"`
}

// Empty reports whether the two profiles decide everything the same way.
func (d ProfileDiff) Empty() bool { return len(d.Settings) == 0 && len(d.Syscalls) == 0 }

// ImportResult is a Docker-format profile converted to ours.
type ImportResult struct {
	Profile []byte   `json:"-"`       // the OCI profile, formatted
	Dropped []string `json:"dropped"` // names libseccomp does not know, or not syscalls of this architecture
	Notes   []string `json:"notes"`
}
