package policy

// The Enforcer judges every tool call a skill makes through the broker
// against its frontmatter. Default deny.
//
// Rules. A call of tool T is allowed iff some allowed rule for T matches it
// and no disallowed rule for T matches it. Disallowed beats allowed; absent
// lists mean nothing.
//
//   - A bare allowed rule ("Read") matches every call of T whose resource
//     passes the frontmatter's list for that resource kind: x-allowed-files for
//     Read/Write/Edit/Glob/Grep, x-allowed-domains for HttpFetch/HttpPost,
//     allowed_memory_scopes for MemoryRead/MemorySearch/MemoryEmit, and any
//     command for Bash. An empty list therefore allows nothing.
//   - A patterned allowed rule ("Read(/srv/data/**)", "Bash(git status:*)") is
//     a self-contained grant: it matches the calls whose resource matches its
//     pattern, whatever the frontmatter's lists say.
//   - A bare disallowed rule denies T entirely (tool_denied).
//   - A patterned disallowed rule denies the calls it matches (tool_denied,
//     for every resource kind: the frontmatter denies them explicitly).
//
// Refusals are *Denial values: unknown_tool for a name outside KnownTools;
// tool_denied for a disallowed hit; tool_not_in_allowed_tools when T has no
// allowed rule at all (or, for Bash, no rule matches the command);
// scope_violation, file_violation or domain_violation when T may be called
// but not on this resource.
//
// Matching. Memory paths are canonicalised with CanonicalMemoryPath and file
// paths cleaned lexically before glob matching (doublestar semantics: "*" does
// not cross "/", "**" does, and "dir/**" also matches "dir" itself). Hosts
// match exactly, or "*.example.com" matches any subdomain of example.com but
// not example.com itself; IP literals must be listed exactly. Every address a
// host resolves to is checked again by CheckAddr before connecting.
//
// A Policy built by Parse is already valid. NewEnforcer re-validates a
// hand-built one and fails closed: an invalid allowed pattern or list entry is
// dropped, an invalid disallowed pattern denies its tool entirely.

import (
	"fmt"
	"net/netip"
	"net/url"
	"path"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/bmatcuk/doublestar/v4"
)

// MaxPathBytes caps a file or memory path a skill may name (Linux PATH_MAX).
// It also bounds the cost of glob matching on every call.
const MaxPathBytes = 4096

// EnforcerOptions are set by the runner's configuration, never by frontmatter.
type EnforcerOptions struct {
	// AllowLoopback lets Http tools reach loopback addresses (127.0.0.0/8,
	// ::1). Set only by the runner's config for tests; never from frontmatter.
	AllowLoopback bool
	// ReservedDirs are host directories no file tool may touch, whatever
	// x-allowed-files says: the supervisor's own state and every input of
	// a policy (audit and memory stores, seccomp profiles, broker sockets,
	// the sandboxes' shared root skeleton, the skills directory, the
	// config's directory). Absolute, clean paths; a path equal to or below
	// one is a file_violation, and so is any file named SKILL.md. Matching is lexical; the file tools never follow a
	// symlink, so a reserved directory is reached only by its own name
	// (give symlinked directories by their target too).
	ReservedDirs []string
}

// Enforcer holds one Policy's rules, compiled once; its checks are safe for
// concurrent use and allocate only on refusal (and where parsing needs to).
type Enforcer struct {
	p     *Policy
	o     EnforcerOptions
	rules [numTools]toolRules
	mcp   mcpRules // mcp__<server>[__<tool>] rules (mcp.go)

	files   []glob     // x-allowed-files
	memory  []glob     // allowed_memory_scopes
	domains []hostRule // x-allowed-domains
}

// numTools is len(KnownTools); toolIndex maps each onto [0, numTools).
const numTools = len(toolTable)

// toolRules are one tool's compiled rules. Only the slices of the tool's
// resource kind are used.
type toolRules struct {
	allowBare, denyBare bool
	allowAny            bool // some valid allowed rule, bare or patterned

	allowGlobs, denyGlobs []glob     // file and memory tools
	allowHosts, denyHosts []hostRule // Http tools
	allowBash, denyBash   []bashRule // Bash
}

// glob is a validated doublestar pattern; a literal one is compared as a
// string.
type glob struct {
	pattern string
	literal bool
}

func newGlob(p string) glob {
	return glob{pattern: p, literal: !strings.ContainsAny(p, `*?[]{}\`)}
}

func (g glob) match(name string) bool {
	if g.literal {
		return g.pattern == name
	}
	return doublestar.MatchUnvalidated(g.pattern, name)
}

func matchGlobs(gs []glob, name string) bool {
	for _, g := range gs {
		if g.match(name) {
			return true
		}
	}
	return false
}

// hostRule is an exact host (or canonical IP literal), or, when suffix is
// set, every host ending in suffix (".example.com" for "*.example.com").
type hostRule struct {
	exact  string
	suffix string
}

func (h hostRule) match(host string) bool {
	if h.suffix != "" {
		return len(host) > len(h.suffix) && strings.HasSuffix(host, h.suffix)
	}
	return h.exact == host
}

func matchHosts(hs []hostRule, host string) bool {
	for _, h := range hs {
		if h.match(host) {
			return true
		}
	}
	return false
}

// bashRule is a Bash(pattern) rule: the exact command, or with prefix the
// command itself or followed by a space and arguments.
type bashRule struct {
	cmd    string
	prefix bool
}

// match reports whether cmd matches r. clean is false when it matches only
// by ignoring shell syntax: a prefix rule's arguments hold some, or the rule's
// command is followed directly by some ("git status; rm -rf /",
// "ls -la && rm -rf /" for an exact rule "ls -la").
func (r bashRule) match(cmd string) (matched, clean bool) {
	if cmd == r.cmd {
		return true, true
	}
	rest, ok := strings.CutPrefix(cmd, r.cmd)
	if !ok {
		return false, false
	}
	if r.prefix && rest[0] == ' ' {
		return true, !hasShellSyntax(rest)
	}
	rest = strings.TrimLeft(rest, " \t")
	if rest != "" && (hasShellSyntax(rest[:1]) || strings.HasPrefix(rest, "$(")) {
		return true, false
	}
	return false, false
}

// hasShellSyntax reports whether s holds something that would let the shell
// run more than the one command an allowed prefix names: a command separator
// or pipe (; & | newline), a substitution (` $( ), a redirection (< >), or any
// other control character.
func hasShellSyntax(s string) bool {
	for i := 0; i < len(s); i++ {
		switch c := s[i]; c {
		case ';', '&', '|', '`', '<', '>':
			return true
		case '$':
			if i+1 < len(s) && s[i+1] == '(' {
				return true
			}
		default:
			if (c < 0x20 && c != '\t') || c == 0x7f {
				return true
			}
		}
	}
	return false
}

// shellBreaks are the bytes that may start a new simple command in a shell
// line; a disallowed Bash rule is matched against every piece between them.
const shellBreaks = ";&|\n\r`(){}!<>"

// toolIndex is t's position in toolTable, -1 for a name outside it.
func toolIndex(t Tool) int {
	for i := range toolTable {
		if toolTable[i].tool == t {
			return i
		}
	}
	return -1
}

// resource kinds
const (
	kindBash = iota
	kindFile
	kindMemory
	kindHTTP
)

// kindOf is t's resource kind from toolTable (kindBash for an unknown t).
func kindOf(t Tool) int {
	if i := toolIndex(t); i >= 0 {
		return toolTable[i].kind
	}
	return kindBash
}

// NewEnforcer compiles p's rules. A nil p allows nothing.
func NewEnforcer(p *Policy, o EnforcerOptions) *Enforcer {
	if p == nil {
		p = &Policy{}
	}
	e := &Enforcer{p: p, o: o}
	for _, s := range p.AllowedFiles {
		if c, reason := fileGlob(s); reason == "" {
			e.files = append(e.files, newGlob(c))
		}
	}
	for _, s := range p.AllowedMemoryScopes {
		if c, reason := memoryGlob(s); reason == "" {
			e.memory = append(e.memory, newGlob(c))
		}
	}
	for _, s := range p.AllowedDomains {
		if h, ok := compileHost(s); ok {
			e.domains = append(e.domains, h)
		}
	}
	for _, r := range p.AllowedTools {
		e.addRule(r, true)
	}
	for _, r := range p.DisallowedTools {
		e.addRule(r, false)
	}
	return e
}

// addRule compiles one rule into e.rules. An invalid pattern is dropped from
// an allowed list and denies the whole tool in a disallowed one.
func (e *Enforcer) addRule(r ToolRule, allow bool) {
	if r.Tool.IsMCP() {
		e.mcp.add(r, allow)
		return
	}
	i := toolIndex(r.Tool)
	if i < 0 {
		return // CheckTool refuses unknown tools anyway
	}
	tr := &e.rules[i]
	if r.Pattern == "" {
		if allow {
			tr.allowBare, tr.allowAny = true, true
		} else {
			tr.denyBare = true
		}
		return
	}
	ok := true
	switch kindOf(r.Tool) {
	case kindBash:
		cmd := strings.TrimSpace(r.Pattern)
		ok = cmd != "" && !hasControl(cmd)
		if ok && allow {
			tr.allowBash = append(tr.allowBash, bashRule{cmd: cmd, prefix: r.Prefix})
		} else if ok {
			tr.denyBash = append(tr.denyBash, bashRule{cmd: cmd, prefix: r.Prefix})
		}
	case kindFile, kindMemory:
		check := fileGlob
		if kindOf(r.Tool) == kindMemory {
			check = memoryGlob
		}
		var c, reason string
		if r.Prefix {
			reason = "prefix rules are Bash only"
		} else {
			c, reason = check(r.Pattern)
		}
		ok = reason == ""
		if ok && allow {
			tr.allowGlobs = append(tr.allowGlobs, newGlob(c))
		} else if ok {
			tr.denyGlobs = append(tr.denyGlobs, newGlob(c))
		}
	case kindHTTP:
		var h hostRule
		h, ok = compileHost(r.Pattern)
		ok = ok && !r.Prefix
		if ok && allow {
			tr.allowHosts = append(tr.allowHosts, h)
		} else if ok {
			tr.denyHosts = append(tr.denyHosts, h)
		}
	}
	switch {
	case ok && allow:
		tr.allowAny = true
	case !ok && !allow:
		tr.denyBare = true // fail closed
	}
}

// compileHost validates a host pattern as Parse does and compiles it.
func compileHost(s string) (hostRule, bool) {
	c, reason := hostGlob(s)
	if reason != "" {
		return hostRule{}, false
	}
	if rest, ok := strings.CutPrefix(c, "*"); ok {
		return hostRule{suffix: rest}, true // rest starts with "."
	}
	return hostRule{exact: c}, true
}

// Policy returns the Policy the Enforcer was built from.
func (e *Enforcer) Policy() *Policy { return e.p }

// Tools lists the tools this skill may call at all (some allowed rule, and
// no bare disallowed rule), in KnownTools order.
func (e *Enforcer) Tools() []Tool {
	var out []Tool
	for _, t := range KnownTools {
		if r := &e.rules[toolIndex(t)]; r.allowAny && !r.denyBare {
			out = append(out, t)
		}
	}
	return out
}

// CheckTool reports whether t may be called at all: unknown names are
// unknown_tool, a bare disallowed rule is tool_denied, a tool without any
// allowed rule is tool_not_in_allowed_tools. Each resource check below
// includes it.
func (e *Enforcer) CheckTool(t Tool) error {
	if t.IsMCP() {
		return e.mcp.check(t)
	}
	_, err := e.toolRules(t)
	return err
}

func (e *Enforcer) toolRules(t Tool) (*toolRules, error) {
	i := toolIndex(t)
	if i < 0 {
		return nil, &Denial{Reason: ReasonUnknownTool, Tool: t}
	}
	r := &e.rules[i]
	switch {
	case r.denyBare:
		return nil, &Denial{Reason: ReasonToolDenied, Tool: t, Detail: "listed in disallowed_tools"}
	case !r.allowAny:
		return nil, &Denial{Reason: ReasonToolNotAllowed, Tool: t}
	}
	return r, nil
}

// toolRulesOf is toolRules for a tool that must be of kind k; any other tool
// is refused (a caller's mistake, failing closed).
func (e *Enforcer) toolRulesOf(t Tool, k int, check string) (*toolRules, error) {
	if toolIndex(t) >= 0 && kindOf(t) != k {
		return nil, &Denial{Reason: ReasonToolNotAllowed, Tool: t, Detail: check + " does not apply to this tool"}
	}
	return e.toolRules(t)
}

// CheckBash judges a Bash command (surrounding whitespace trimmed). A
// disallowed Bash rule matching the command, or any piece of it between
// shell control characters, is tool_denied; such rules are best effort, since
// no denylist over shell text is complete (the sandbox is the boundary). The
// command is allowed by a bare allowed rule, by an exact rule equal to it, or
// by a prefix rule "p:*" when it is p or starts with "p " and the rest holds
// no shell syntax (; & | ` $( < > newline or other control characters):
// otherwise "git status; rm -rf /" would pass, and it is tool_denied. A
// command no rule matches is tool_not_in_allowed_tools.
func (e *Enforcer) CheckBash(cmd string) error {
	r, err := e.toolRules(ToolBash)
	if err != nil {
		return err
	}
	cmd = strings.TrimSpace(cmd)
	if bashDenied(r.denyBash, cmd) {
		return &Denial{Reason: ReasonToolDenied, Tool: ToolBash, Detail: "command matches a disallowed_tools rule"}
	}
	if r.allowBare {
		return nil
	}
	smuggled := false
	for _, b := range r.allowBash {
		matched, clean := b.match(cmd)
		if matched && clean {
			return nil
		}
		smuggled = smuggled || matched
	}
	if smuggled {
		return &Denial{Reason: ReasonToolDenied, Tool: ToolBash, Detail: "shell syntax after an allowed command prefix"}
	}
	return &Denial{Reason: ReasonToolNotAllowed, Tool: ToolBash, Detail: "command matches no allowed Bash rule"}
}

// bashDenied reports whether a disallowed rule matches cmd or one of its
// pieces between shellBreaks.
func bashDenied(rules []bashRule, cmd string) bool {
	if len(rules) == 0 {
		return false
	}
	matches := func(s string) bool {
		s = strings.TrimSpace(s)
		for _, b := range rules {
			if m, _ := b.match(s); m {
				return true
			}
		}
		return false
	}
	if matches(cmd) {
		return true
	}
	for rest := cmd; ; {
		i := strings.IndexAny(rest, shellBreaks)
		if i < 0 {
			return matches(rest)
		}
		if matches(rest[:i]) {
			return true
		}
		rest = rest[i+1:]
	}
}

// CheckMemory judges a MemoryRead/MemorySearch/MemoryEmit path and returns
// its canonical form (CanonicalMemoryPath). A malformed path, or one climbing
// above the memory root, is scope_violation "malformed path".
func (e *Enforcer) CheckMemory(t Tool, p string) (string, error) {
	r, err := e.toolRulesOf(t, kindMemory, "CheckMemory")
	if err != nil {
		return "", err
	}
	if len(p) > MaxPathBytes {
		return "", &Denial{Reason: ReasonScope, Tool: t, Detail: "path too long"}
	}
	c, err := CanonicalMemoryPath(p)
	if err != nil {
		return "", &Denial{Reason: ReasonScope, Tool: t, Detail: "malformed path"}
	}
	if matchGlobs(r.denyGlobs, c) {
		return "", &Denial{Reason: ReasonToolDenied, Tool: t, Detail: fmt.Sprintf("memory path %q matches a disallowed_tools rule", c)}
	}
	if r.allowBare && matchGlobs(e.memory, c) || matchGlobs(r.allowGlobs, c) {
		return c, nil
	}
	return "", &Denial{Reason: ReasonScope, Tool: t, Detail: fmt.Sprintf("memory path %q is not in allowed_memory_scopes", c)}
}

// MemoryScopes returns the canonical globs a MemorySearch by t may see:
// allowed_memory_scopes if a bare rule allows t, plus t's patterned allowed
// rules. Empty means nothing. Disallowed patterns are not subtracted: the
// search excludes MemoryExcludes, and every result is checked with
// CheckMemory.
func (e *Enforcer) MemoryScopes(t Tool) []string {
	r, err := e.toolRulesOf(t, kindMemory, "MemoryScopes")
	if err != nil {
		return nil
	}
	return r.globs(e.memory)
}

// MemoryExcludes returns the canonical globs of t's disallowed_tools
// patterns: what a MemorySearch by t must never return, whatever
// MemoryScopes allows.
func (e *Enforcer) MemoryExcludes(t Tool) []string {
	r, err := e.toolRulesOf(t, kindMemory, "MemoryExcludes")
	if err != nil {
		return nil
	}
	out := make([]string, 0, len(r.denyGlobs))
	for _, g := range r.denyGlobs {
		out = append(out, g.pattern)
	}
	return out
}

func (r *toolRules) globs(list []glob) []string {
	var out []string
	if r.allowBare {
		for _, g := range list {
			out = append(out, g.pattern)
		}
	}
	for _, g := range r.allowGlobs {
		out = append(out, g.pattern)
	}
	return out
}

// CheckFile judges a Read/Write/Edit/Glob/Grep path and returns it cleaned.
// The path must be absolute and free of NUL bytes; it is cleaned lexically
// ("/tmp/../etc/passwd" is judged as "/etc/passwd"). Symlinks are the tools'
// concern: they open the returned path without following any.
func (e *Enforcer) CheckFile(t Tool, p string) (string, error) {
	r, err := e.toolRulesOf(t, kindFile, "CheckFile")
	if err != nil {
		return "", err
	}
	switch {
	case len(p) > MaxPathBytes:
		return "", &Denial{Reason: ReasonFile, Tool: t, Detail: "path too long"}
	case strings.IndexByte(p, 0) >= 0:
		return "", &Denial{Reason: ReasonFile, Tool: t, Detail: "malformed path"}
	case !strings.HasPrefix(p, "/"):
		return "", &Denial{Reason: ReasonFile, Tool: t, Detail: "not absolute"}
	}
	// Paths inside the sandbox are slash-separated whatever the host OS.
	c := path.Clean(p)
	if e.reserved(c) {
		return "", &Denial{Reason: ReasonFile, Tool: t, Detail: fmt.Sprintf("path %q is reserved to the supervisor", c)}
	}
	if matchGlobs(r.denyGlobs, c) {
		return "", &Denial{Reason: ReasonToolDenied, Tool: t, Detail: fmt.Sprintf("path %q matches a disallowed_tools rule", c)}
	}
	if r.allowBare && matchGlobs(e.files, c) || matchGlobs(r.allowGlobs, c) {
		return c, nil
	}
	return "", &Denial{Reason: ReasonFile, Tool: t, Detail: fmt.Sprintf("path %q is not in x-allowed-files", c)}
}

// SkillFile is the name of a skill's policy file. A directory holding one is
// a skill folder; the file tools never touch a file of that name in any
// case (IsSkillFileName), nor anything in a skill folder (supervisor/internal/tools
// checks the folders on disk).
const SkillFile = "SKILL.md"

// IsSkillFileName reports whether name is SKILL.md in any case, Unicode
// simple folding included ("skill.md", "SKILL.MD", "ſkill.md"): in a
// casefold directory each of them is the SKILL.md of a skill folder.
func IsSkillFileName(name string) bool { return strings.EqualFold(name, SkillFile) }

// Reserved reports whether the absolute path p (cleaned lexically) is one
// no file tool may touch whatever the globs say: a file named SKILL.md in
// any case, or a path equal to or below one of EnforcerOptions.ReservedDirs.
// Directory walks use it to skip whole subtrees.
func (e *Enforcer) Reserved(p string) bool {
	return e.reserved(path.Clean(p))
}

func (e *Enforcer) reserved(c string) bool {
	if IsSkillFileName(path.Base(c)) {
		return true
	}
	for _, d := range e.o.ReservedDirs {
		if c == d || d == "/" || strings.HasPrefix(c, d+"/") {
			return true
		}
	}
	return false
}

// FileGlobs returns the absolute globs t may touch (x-allowed-files if a bare
// rule allows t, plus t's patterned allowed rules), for Glob and Grep to
// bound their walk. Disallowed patterns are not subtracted: check every path
// with CheckFile.
func (e *Enforcer) FileGlobs(t Tool) []string {
	r, err := e.toolRulesOf(t, kindFile, "FileGlobs")
	if err != nil {
		return nil
	}
	return r.globs(e.files)
}

// CheckURL judges an HttpFetch/HttpPost URL and returns it parsed, with its
// host in the canonical form it was judged in (lower case, no trailing dot).
// Only absolute http and https URLs with a host and no user info are
// accepted; the host must be an ASCII DNS name or an IP literal (internationalised
// names must be written in their xn-- form; percent-encoding, IPv6 zones and
// numeric forms such as "127.1" or "0x7f000001" are refused). A port is allowed
// (1–65535) but matching is on the host only.
func (e *Enforcer) CheckURL(t Tool, raw string) (*url.URL, error) {
	r, err := e.toolRulesOf(t, kindHTTP, "CheckURL")
	if err != nil {
		return nil, err
	}
	refuse := func(detail string) (*url.URL, error) {
		return nil, &Denial{Reason: ReasonDomain, Tool: t, Detail: detail}
	}
	u, err := url.Parse(raw)
	switch {
	case err != nil:
		return refuse("malformed URL")
	case u.Scheme != "http" && u.Scheme != "https":
		return refuse("scheme must be http or https")
	case u.Opaque != "" || u.Host == "":
		return refuse("URL has no host")
	case u.User != nil || strings.Contains(u.Host, "@"):
		return refuse("URL must not carry user info")
	}
	host, port := u.Hostname(), u.Port()
	if port != "" {
		if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
			return refuse("invalid port")
		}
	}
	host, ok := canonicalHost(host, strings.HasPrefix(u.Host, "["))
	if !ok {
		return refuse("invalid host")
	}
	if matchHosts(r.denyHosts, host) {
		return nil, &Denial{Reason: ReasonToolDenied, Tool: t, Detail: fmt.Sprintf("host %q matches a disallowed_tools rule", host)}
	}
	if !(r.allowBare && matchHosts(e.domains, host) || matchHosts(r.allowHosts, host)) {
		return refuse(fmt.Sprintf("host %q is not in x-allowed-domains", host))
	}
	hp := host
	if strings.Contains(host, ":") {
		hp = "[" + host + "]"
	}
	if port != "" {
		hp += ":" + port
	}
	u.Host = hp
	return u, nil
}

// canonicalHost lower-cases a URL host, strips one trailing dot and checks
// it: an IP literal in canonical form (IPv6 only in brackets, no zone) or a
// DNS name as hostName accepts it that no resolver would read as a number.
func canonicalHost(h string, bracketed bool) (string, bool) {
	if h == "" || len(h) > 254 {
		return "", false
	}
	for i := 0; i < len(h); i++ {
		if h[i] >= utf8.RuneSelf || h[i] == '%' {
			return "", false // non-ASCII (IDNA) or percent-encoded
		}
	}
	if bracketed {
		a, err := netip.ParseAddr(h)
		if err != nil || !a.Is6() || a.Zone() != "" {
			return "", false
		}
		return a.String(), true
	}
	h = strings.ToLower(h)
	if a, err := netip.ParseAddr(h); err == nil {
		if !a.Is4() {
			return "", false // IPv6 outside brackets
		}
		return a.String(), true
	}
	h = strings.TrimSuffix(h, ".")
	if hostName(h) != "" || numericHost(h) {
		return "", false
	}
	return h, true
}

// numericHost reports whether every label of h is a number as inet_aton
// reads them (decimal, 0-octal, 0x-hex), so that a resolver might take h as
// an IPv4 address ("0x7f.1", "0177.0.0.1", "2130706433").
func numericHost(h string) bool {
	labels := 0
	for l := range strings.SplitSeq(h, ".") {
		labels++
		if labels > 4 {
			return false
		}
		digits := l
		if rest, ok := strings.CutPrefix(l, "0x"); ok {
			digits = rest
			if strings.Trim(digits, "0123456789abcdef") != "" {
				return false
			}
			continue
		}
		if digits == "" || strings.Trim(digits, "0123456789") != "" {
			return false
		}
	}
	return true
}

// addrClass is a refused address block and its name in denials.
type addrClass struct {
	name   string
	prefix netip.Prefix
}

// refusedV4 and refusedV6 are checked in order; the first hit names the
// class. Loopback is handled separately (EnforcerOptions.AllowLoopback).
//
// They hold every block of the IANA "IPv4 Special-Purpose Address Registry"
// and "IPv6 Special-Purpose Address Registry" (iana-ipv4-special-registry,
// iana-ipv6-special-registry, RFC 6890) whose "Globally Reachable" is not
// True, plus what those registries leave to others: multicast, the cloud
// metadata addresses, and the deprecated IPv6 site-local, IPv4-compatible
// and IPv4-translated forms. The registries' globally reachable blocks inside
// a refused one are in globalV4 and globalV6. 192.0.0.0/24 and 192.88.99.0/24
// are refused whole: their globally reachable /32s are anycast services an
// Http tool has no business calling.
var (
	refusedV4 = []addrClass{
		{"metadata", netip.MustParsePrefix("169.254.169.254/32")},
		{"metadata", netip.MustParsePrefix("100.100.100.200/32")},
		{"broadcast", netip.MustParsePrefix("255.255.255.255/32")},
		{"unspecified", netip.MustParsePrefix("0.0.0.0/8")}, // "this network"
		{"private", netip.MustParsePrefix("10.0.0.0/8")},
		{"cgnat", netip.MustParsePrefix("100.64.0.0/10")}, // shared address space
		{"link-local", netip.MustParsePrefix("169.254.0.0/16")},
		{"private", netip.MustParsePrefix("172.16.0.0/12")},
		{"special-purpose", netip.MustParsePrefix("192.0.0.0/24")}, // IETF protocol assignments
		{"documentation", netip.MustParsePrefix("192.0.2.0/24")},   // TEST-NET-1
		{"6to4-relay", netip.MustParsePrefix("192.88.99.0/24")},    // deprecated 6to4 relay anycast
		{"private", netip.MustParsePrefix("192.168.0.0/16")},
		{"benchmarking", netip.MustParsePrefix("198.18.0.0/15")},
		{"documentation", netip.MustParsePrefix("198.51.100.0/24")}, // TEST-NET-2
		{"documentation", netip.MustParsePrefix("203.0.113.0/24")},  // TEST-NET-3
		{"multicast", netip.MustParsePrefix("224.0.0.0/4")},
		{"reserved", netip.MustParsePrefix("240.0.0.0/4")},
	}
	refusedV6 = []addrClass{
		{"metadata", netip.MustParsePrefix("fd00:ec2::254/128")},
		{"unspecified", netip.MustParsePrefix("::/128")},
		{"ipv4-compatible", netip.MustParsePrefix("::/96")},
		{"ipv4-translated", netip.MustParsePrefix("::ffff:0:0:0/96")},
		{"discard", netip.MustParsePrefix("100::/64")},
		{"dummy", netip.MustParsePrefix("100:0:0:1::/64")},
		{"nat64-local", netip.MustParsePrefix("64:ff9b:1::/48")},
		{"teredo", netip.MustParsePrefix("2001::/32")},
		{"benchmarking", netip.MustParsePrefix("2001:2::/48")},
		{"special-purpose", netip.MustParsePrefix("2001::/23")}, // IETF protocol assignments
		{"documentation", netip.MustParsePrefix("2001:db8::/32")},
		{"6to4", netip.MustParsePrefix("2002::/16")},
		{"documentation", netip.MustParsePrefix("3fff::/20")},
		{"srv6-sid", netip.MustParsePrefix("5f00::/16")},
		{"unique-local", netip.MustParsePrefix("fc00::/7")},
		{"link-local", netip.MustParsePrefix("fe80::/10")},
		{"site-local", netip.MustParsePrefix("fec0::/10")},
		{"multicast", netip.MustParsePrefix("ff00::/8")},
	}
	// globalV6 are the blocks inside 2001::/23 that the IPv6 registry marks
	// globally reachable; they are not refused.
	globalV6 = []netip.Prefix{
		netip.MustParsePrefix("2001:1::1/128"),   // PCP anycast
		netip.MustParsePrefix("2001:1::2/128"),   // TURN anycast
		netip.MustParsePrefix("2001:1::3/128"),   // DNS-SD SRP anycast
		netip.MustParsePrefix("2001:3::/32"),     // AMT
		netip.MustParsePrefix("2001:4:112::/48"), // AS112-v6
		netip.MustParsePrefix("2001:20::/28"),    // ORCHIDv2
		netip.MustParsePrefix("2001:30::/28"),    // drone remote ID entity tags
	}
	loopbackV4 = netip.MustParsePrefix("127.0.0.0/8")
	loopbackV6 = netip.IPv6Loopback()
	nat64      = netip.MustParsePrefix("64:ff9b::/96")
)

// CheckAddr judges one address host resolved to (or host's IP literal)
// before an Http tool connects to it. Refused (domain_violation): loopback
// (unless AllowLoopback), every IANA special-purpose block that is not
// globally reachable (private, unique-local, link-local, CGNAT,
// documentation, benchmarking, reserved, 0.0.0.0/8, broadcast, ...; see
// refusedV4 and refusedV6), multicast, cloud metadata, site-local, 6to4,
// Teredo, IPv4-compatible and local-use NAT64 addresses entirely, IPv6
// zones, and any IPv4-mapped or NAT64 (64:ff9b::/96) address embedding a
// refused IPv4 one (NAT64 never counts as loopback). The denial names the
// class, not the address: DNS answers stay on the host. The host's own
// addresses are judged by the Http tools' dialer (supervisor/internal/tools), which
// can see them.
func (e *Enforcer) CheckAddr(t Tool, host string, ip netip.Addr) error {
	if _, err := e.toolRulesOf(t, kindHTTP, "CheckAddr"); err != nil {
		return err
	}
	if class := refusedClass(ip, e.o.AllowLoopback); class != "" {
		return &Denial{Reason: ReasonDomain, Tool: t, Detail: fmt.Sprintf("host %q resolves to a refused address (%s)", host, class)}
	}
	return nil
}

// refusedClass names the refused class ip falls in, or returns "".
func refusedClass(ip netip.Addr, allowLoopback bool) string {
	switch {
	case !ip.IsValid():
		return "invalid"
	case ip.Zone() != "":
		return "scoped"
	}
	ip = ip.Unmap()
	if ip.Is4() {
		if loopbackV4.Contains(ip) {
			if allowLoopback {
				return ""
			}
			return "loopback"
		}
		return firstClass(refusedV4, ip)
	}
	if ip == loopbackV6 {
		if allowLoopback {
			return ""
		}
		return "loopback"
	}
	if nat64.Contains(ip) {
		b := ip.As16()
		if c := refusedClass(netip.AddrFrom4([4]byte(b[12:])), false); c != "" {
			return "nat64 of " + c
		}
		return ""
	}
	for _, p := range globalV6 {
		if p.Contains(ip) {
			return ""
		}
	}
	return firstClass(refusedV6, ip)
}

func firstClass(classes []addrClass, ip netip.Addr) string {
	for _, c := range classes {
		if c.prefix.Contains(ip) {
			return c.name
		}
	}
	return ""
}
