// Package policy turns a skill's SKILL.md frontmatter into a typed, validated
// Policy (untrusted input in, typed values or a FieldError out), and its
// Enforcer judges each tool call against it. LoadDir and LoadSkill read
// SKILL.md from the skill folder and examine the entrypoint there, following
// no symlink inside the folder; everything else works on values in memory.
// It imports nothing else of this module.
package policy

import "encoding/json"

// Tool is the name of a native tool a skill may call through the broker.
type Tool string

// The native tools. A name outside this set is an error in frontmatter.
const (
	ToolBash         Tool = "Bash"
	ToolRead         Tool = "Read"
	ToolWrite        Tool = "Write"
	ToolEdit         Tool = "Edit"
	ToolGlob         Tool = "Glob"
	ToolGrep         Tool = "Grep"
	ToolMemoryRead   Tool = "MemoryRead"
	ToolMemorySearch Tool = "MemorySearch"
	ToolMemoryEmit   Tool = "MemoryEmit"
	ToolHttpFetch    Tool = "HttpFetch"
	ToolHttpPost     Tool = "HttpPost"
)

// toolTable declares every native tool once, with the kind of resource its
// rules name and what its call does outside the supervisor: KnownTools, the
// Enforcer's rule index, kindOf and EffectFree all derive from it, so a tool
// added here is known everywhere at once (and must say its effect).
var toolTable = [...]struct {
	tool   Tool
	kind   int
	effect effect
}{
	{ToolBash, kindBash, effectOutside},
	{ToolRead, kindFile, effectNone},
	{ToolWrite, kindFile, effectOutside},
	{ToolEdit, kindFile, effectOutside},
	{ToolGlob, kindFile, effectNone},
	{ToolGrep, kindFile, effectNone},
	{ToolMemoryRead, kindMemory, effectNone},
	{ToolMemorySearch, kindMemory, effectNone},
	{ToolMemoryEmit, kindMemory, effectOutside},
	{ToolHttpFetch, kindHTTP, effectOutside},
	{ToolHttpPost, kindHTTP, effectOutside},
}

// effect is what a tool's call does outside the supervisor. The zero value
// is no classification: every tool in toolTable must choose one.
type effect uint8

const (
	_ effect = iota // unclassified (TestToolEffects refuses it)
	// effectNone: the call only reads; its reply is its one effect.
	effectNone
	// effectOutside: the call acts on the world (runs a command, writes a
	// file or memory, sends a request) before it replies.
	effectOutside
)

// EffectFree reports whether a call of t has no effect outside the
// supervisor but its reply (Read, Glob, Grep, MemoryRead, MemorySearch).
// The broker may then make the call's started row durable together with
// its completed row, before the reply; any other tool's started row is
// durable before the tool runs. Unknown and unclassified tools are not.
func EffectFree(t Tool) bool {
	i := toolIndex(t)
	return i >= 0 && toolTable[i].effect == effectNone
}

// KnownTools lists every native tool, in a stable order (toolTable's).
var KnownTools = func() []Tool {
	out := make([]Tool, len(toolTable))
	for i, e := range toolTable {
		out[i] = e.tool
	}
	return out
}()

// ToolRule is one entry of allowed_tools / disallowed_tools. A bare tool name
// ("Read") has an empty Pattern and matches every call of that tool; the
// hyphenated rule form ("Bash(git status:*)", "Read(/srv/data/**)") carries a
// Pattern that narrows it: a command prefix for Bash ("git status" with
// Prefix true), a path glob for the file tools, a host glob for the Http tools.
type ToolRule struct {
	Tool    Tool   `json:"tool"`
	Pattern string `json:"pattern,omitempty"`
	// Prefix is true for Bash rules written "cmd:*": the command must start
	// with Pattern followed by end of string or a space.
	Prefix bool `json:"prefix,omitempty"`
}

// Defaults applied where the frontmatter is silent.
const (
	DefaultVersion        = "0.0.0"
	DefaultEffortMinutes  = 5
	DefaultMemoryMB       = 512
	DefaultPidsMax        = 64
	DefaultSeccompProfile = "default"
	DefaultEntrypoint     = "main"
)

// Skill kinds.
const (
	// KindTool: the skill has an entrypoint to run in a sandbox.
	KindTool = "tool"
	// KindInstructions: a SKILL.md of instructions for the agent (and the
	// files of its folder), with nothing to run.
	KindInstructions = "instructions"
)

// DefaultCPU is x-cpu where the frontmatter is silent: one CPU of quota, so
// a skill that spins cannot take the whole host. x-cpu: 0 asks for none.
const DefaultCPU = 1.0

// Policy is the validated frontmatter of one skill. Lists that were absent are
// empty: nothing is allowed. Numeric limits always hold their effective value
// (defaults applied). Policy is immutable after Parse.
type Policy struct {
	Name        string `json:"name"`
	Version     string `json:"version"`
	Description string `json:"description"`
	Entrypoint  string `json:"entrypoint"` // relative to the skill folder, never escaping it

	AllowedTools        []ToolRule `json:"allowed_tools"`
	DisallowedTools     []ToolRule `json:"disallowed_tools"`
	AllowedMemoryScopes []string   `json:"allowed_memory_scopes"` // canonical path globs
	EffortMinutes       int        `json:"effort_minutes"`

	AllowedFiles       []string `json:"x_allowed_files"`   // absolute path globs
	AllowedDomains     []string `json:"x_allowed_domains"` // host globs
	SeccompProfile     string   `json:"x_seccomp_profile"` // a profile name, [a-z0-9_-]+
	MemoryMB           int64    `json:"x_memory_mb"`
	PidsMax            int64    `json:"x_pids_max"`
	CPU                float64  `json:"x_cpu"`                   // CPUs of quota (default 1); 0 = no quota
	RateLimitPerMinute int      `json:"x_rate_limit_per_minute"` // 0 = no limit
	Compensation       bool     `json:"x_compensation"`

	// InputSchema and OutputSchema are x-input-schema and x-output-schema
	// as JSON: the JSON Schemas of the skill's args and result (nil: none).
	InputSchema  json.RawMessage `json:"x_input_schema,omitempty"`
	OutputSchema json.RawMessage `json:"x_output_schema,omitempty"`

	// Kind is KindTool, or KindInstructions for a skill LoadSkill found
	// without an executable.
	Kind string `json:"kind"`

	// Extensions holds the other x- keys, untouched (the open namespace).
	Extensions map[string]any `json:"extensions,omitempty"`
	// Warnings are non-fatal findings (foreign keys tolerated).
	Warnings []string `json:"warnings,omitempty"`

	// given holds the canonical names of the keys the frontmatter set, so a
	// caller can tell a default from an explicit value (Given).
	given map[string]bool
}

// Given reports whether the frontmatter set the key (canonical spelling,
// e.g. "effort_minutes", "x-memory-mb"), rather than leaving its default.
func (p *Policy) Given(key string) bool { return p.given[key] }
