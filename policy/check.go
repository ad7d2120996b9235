package policy

import (
	"errors"
	"fmt"
	"math"
	"net/netip"
	"path"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"unicode"
	"unicode/utf8"

	"github.com/bmatcuk/doublestar/v4"
	"github.com/goccy/go-yaml"
	"golang.org/x/net/publicsuffix"
)

// The checks below turn one untrusted YAML value into a typed value or a
// *FieldError naming the key as written. Each is small and strict: a string is
// never read as a number, a float never as an integer, a mapping never as a
// list.

// Compiled on first use: a {0,63} repetition is a large program, and every
// start of a binary that links this package would build it for nothing.
var (
	nameRE    = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{0,63}$`) })
	profileRE = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,63}$`) })
)

// Known reports whether t is one of KnownTools.
func (t Tool) Known() bool {
	for _, k := range KnownTools {
		if t == k {
			return true
		}
	}
	return false
}

func knownToolList() string {
	names := make([]string, len(KnownTools))
	for i, t := range KnownTools {
		names[i] = string(t)
	}
	return strings.Join(names, ", ")
}

// describe renders a decoded YAML value for a "got ..." reason.
func describe(v any) string {
	switch v := v.(type) {
	case nil:
		return "nothing (null)"
	case string:
		if len(v) > 80 {
			v = v[:80] + "…"
		}
		return strconv.Quote(v)
	case bool:
		return strconv.FormatBool(v)
	case float64:
		return strconv.FormatFloat(v, 'g', -1, 64)
	case int, int64, uint64:
		return fmt.Sprint(v)
	case []any:
		return "a list"
	case yaml.MapSlice, map[string]any, map[any]any:
		return "a mapping"
	default:
		return fmt.Sprintf("a %T", v)
	}
}

// asInt returns v as an int64 when it is a YAML integer (the decoder yields
// uint64 for non-negative literals, int64 for negative ones, int for !!int).
// Values beyond int64 saturate, which every range check then refuses.
func asInt(v any) (int64, bool) {
	switch n := v.(type) {
	case int:
		return int64(n), true
	case int64:
		return n, true
	case uint64:
		return int64(min(n, math.MaxInt64)), true
	}
	return 0, false
}

// intIn accepts a YAML integer in [lo, hi].
func intIn(key string, v any, lo, hi int64) (int64, error) {
	n, ok := asInt(v)
	if !ok || n < lo || n > hi {
		return 0, fieldErr(key, fmt.Sprintf("must be an integer between %d and %d, got %s", lo, hi, describe(v)))
	}
	return n, nil
}

// stringValue accepts a YAML string.
func stringValue(key string, v any, what string) (string, error) {
	s, ok := v.(string)
	if !ok {
		return "", fieldErr(key, "must be "+what+", got "+describe(v))
	}
	return s, nil
}

// hasControl reports whether s holds a control character (newline, NUL, DEL…).
func hasControl(s string) bool {
	return strings.ContainsFunc(s, unicode.IsControl)
}

func setName(p *Policy, key string, v any) error {
	s, err := stringValue(key, v, "a string")
	if err != nil {
		return err
	}
	if !nameRE().MatchString(s) {
		return fieldErr(key, fmt.Sprintf("must match %s (lower case letters, digits, '.', '_', '-'; at most 64), got %s", nameRE(), describe(s)))
	}
	p.Name = s
	return nil
}

func setVersion(p *Policy, key string, v any) error {
	s, err := stringValue(key, v, `a string (quote numbers: "1.0")`)
	if err != nil {
		return err
	}
	switch {
	case s == "":
		return fieldErr(key, "must not be empty")
	case len(s) > 64:
		return fieldErr(key, "must be at most 64 characters")
	case strings.ContainsFunc(s, func(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) }):
		return fieldErr(key, "must not contain whitespace, got "+describe(s))
	}
	p.Version = s
	return nil
}

func setDescription(p *Policy, key string, v any) error {
	s, err := stringValue(key, v, "a string")
	if err != nil {
		return err
	}
	s = strings.TrimSpace(s)
	if s == "" {
		return fieldErr(key, "must not be empty")
	}
	p.Description = s
	return nil
}

func setEntrypoint(p *Policy, key string, v any) error {
	s, err := stringValue(key, v, "a string")
	if err != nil {
		return err
	}
	clean, reason := relativePath(s)
	if reason != "" {
		return fieldErr(key, reason+", got "+describe(s))
	}
	p.Entrypoint = clean
	return nil
}

// relativePath cleans a path relative to the skill folder, or says why it is
// not one.
func relativePath(s string) (clean, reason string) {
	switch {
	case s == "":
		return "", "must not be empty"
	case hasControl(s):
		return "", "must not contain control characters"
	case strings.HasPrefix(s, "/"):
		return "", "must be a path relative to the skill folder, not absolute"
	}
	for _, seg := range strings.Split(s, "/") {
		if seg == ".." {
			return "", `must not contain a ".." segment`
		}
	}
	clean = path.Clean(s)
	if clean == "." {
		return "", "must name a file inside the skill folder"
	}
	return clean, ""
}

func setSeccompProfile(p *Policy, key string, v any) error {
	s, err := stringValue(key, v, "a profile name")
	if err != nil {
		return err
	}
	if !profileRE().MatchString(s) {
		return fieldErr(key, fmt.Sprintf("must be a profile name matching %s, got %s", profileRE(), describe(s)))
	}
	p.SeccompProfile = s
	return nil
}

func setCPU(p *Policy, key string, v any) error {
	var f float64
	switch n := v.(type) {
	case float64:
		f = n
	default:
		i, ok := asInt(v)
		if !ok {
			return fieldErr(key, "must be a number of CPUs greater than 0 and at most 64, got "+describe(v))
		}
		f = float64(i)
	}
	// 0 means no quota; written so that NaN fails too.
	if !(f >= 0 && f <= 64) {
		return fieldErr(key, "must be a number of CPUs greater than 0 and at most 64, got "+describe(v))
	}
	p.CPU = f
	return nil
}

// stringList accepts a YAML list of strings (null = empty) and checks each
// entry with check, which returns the canonical form or a reason.
func stringList(key string, v any, what string, check func(string) (string, string)) ([]string, error) {
	if v == nil {
		return []string{}, nil
	}
	items, ok := v.([]any)
	if !ok {
		return nil, fieldErr(key, "must be a list of "+what+", got "+describe(v))
	}
	out := make([]string, 0, len(items))
	for i, item := range items {
		s, ok := item.(string)
		if !ok {
			return nil, fieldErr(key, fmt.Sprintf("entry %d must be a string, got %s", i+1, describe(item)))
		}
		c, reason := check(s)
		if reason != "" {
			return nil, fieldErr(key, fmt.Sprintf("entry %d %s: %s", i+1, describe(s), reason))
		}
		out = append(out, c)
	}
	return out, nil
}

// toolList accepts a YAML list of tool entries, or one string of entries
// separated by commas or spaces ("Read, Grep, Bash(git status:*)") as other
// agent tools write allowed-tools. null is empty.
func toolList(key string, v any) ([]ToolRule, error) {
	var entries []string
	switch v := v.(type) {
	case nil:
	case string:
		var reason string
		if entries, reason = splitTools(v); reason != "" {
			return nil, fieldErr(key, reason)
		}
	case []any:
		for i, item := range v {
			s, ok := item.(string)
			if !ok {
				return nil, fieldErr(key, fmt.Sprintf("entry %d must be a tool name string, got %s", i+1, describe(item)))
			}
			entries = append(entries, s)
		}
	default:
		return nil, fieldErr(key, "must be a list of tool names, got "+describe(v))
	}
	rules := make([]ToolRule, 0, len(entries))
	for i, e := range entries {
		r, reason := toolRule(strings.TrimSpace(e))
		if reason != "" {
			return nil, fieldErr(key, fmt.Sprintf("entry %d %s: %s", i+1, describe(e), reason))
		}
		rules = append(rules, r)
	}
	return rules, nil
}

// splitTools splits "Read, Grep Bash(git status:*)" on commas and spaces
// outside parentheses.
func splitTools(s string) (entries []string, reason string) {
	depth, start := 0, 0
	flush := func(end int) {
		if e := strings.TrimSpace(s[start:end]); e != "" {
			entries = append(entries, e)
		}
	}
	for i, r := range s {
		switch {
		case r == '(':
			depth++
		case r == ')':
			depth--
			if depth < 0 {
				return nil, fmt.Sprintf("unbalanced parentheses in %q", s)
			}
		case depth == 0 && (r == ',' || unicode.IsSpace(r)):
			flush(i)
			start = i + utf8.RuneLen(r)
		}
	}
	if depth != 0 {
		return nil, fmt.Sprintf("unbalanced parentheses in %q", s)
	}
	flush(len(s))
	return entries, ""
}

// toolRule maps "Read" or "Tool(pattern)" onto a ToolRule.
func toolRule(s string) (ToolRule, string) {
	if s == "" {
		return ToolRule{}, "empty tool name"
	}
	name, pattern, hasPattern := strings.Cut(s, "(")
	t := Tool(name)
	if t.IsMCP() {
		return mcpRule(name, hasPattern)
	}
	if !t.Known() {
		return ToolRule{}, fmt.Sprintf("unknown tool %q; known tools: %s", name, knownToolList())
	}
	if !hasPattern {
		return ToolRule{Tool: t}, ""
	}
	if !strings.HasSuffix(pattern, ")") {
		return ToolRule{}, fmt.Sprintf(`a rule must be written %s(pattern)`, name)
	}
	pattern = strings.TrimSpace(strings.TrimSuffix(pattern, ")"))
	if pattern == "" {
		return ToolRule{}, fmt.Sprintf("empty pattern in %s(): write %s to allow every call", name, name)
	}
	var reason string
	r := ToolRule{Tool: t}
	switch t {
	case ToolBash:
		r.Pattern, r.Prefix, reason = bashPattern(pattern)
	case ToolRead, ToolWrite, ToolEdit, ToolGlob, ToolGrep:
		r.Pattern, reason = fileGlob(pattern)
	case ToolHttpFetch, ToolHttpPost:
		r.Pattern, reason = hostGlob(pattern)
	case ToolMemoryRead, ToolMemorySearch, ToolMemoryEmit:
		r.Pattern, reason = memoryGlob(pattern)
	default:
		reason = fmt.Sprintf("tool %s takes no pattern", name)
	}
	if reason != "" {
		return ToolRule{}, reason
	}
	return r, ""
}

// bashPattern reads "git status:*" (prefix) or "ls -la" (exact command). A
// "*" anywhere else is refused: read literally it would make a
// disallowed_tools rule like Bash(rm *) deny almost nothing.
func bashPattern(p string) (pattern string, prefix bool, reason string) {
	if hasControl(p) {
		return "", false, "a command must not contain control characters"
	}
	if rest, ok := strings.CutSuffix(p, ":*"); ok {
		p, prefix = strings.TrimSpace(rest), true
		if p == "" {
			return "", false, `empty command before ":*"`
		}
	}
	if strings.Contains(p, "*") {
		return "", false, `"*" is only supported as a trailing ":*" (a prefix rule, e.g. Bash(git status:*))`
	}
	return p, prefix, ""
}

// fileGlob checks an absolute path glob and returns it cleaned.
func fileGlob(p string) (string, string) {
	switch {
	case p == "":
		return "", "must not be empty"
	case hasControl(p):
		return "", "must not contain control characters"
	case !strings.HasPrefix(p, "/"):
		return "", "must be an absolute path glob (starting with /)"
	}
	c := path.Clean(p)
	if !doublestar.ValidatePattern(c) {
		return "", "is not a valid glob pattern"
	}
	return c, ""
}

// memoryGlob checks a memory path glob and returns it canonical.
func memoryGlob(p string) (string, string) {
	c, err := CanonicalMemoryPath(p)
	var fe *FieldError
	switch {
	case errors.As(err, &fe):
		return "", fe.Reason
	case err != nil:
		return "", err.Error()
	}
	if !doublestar.ValidatePattern(c) {
		return "", "is not a valid glob pattern"
	}
	return c, ""
}

// CanonicalMemoryPath returns the canonical form of a memory path (or path
// glob): "." and empty segments dropped, ".." removing the segment before it,
// a leading "/" stripped. A path whose ".." would climb above the memory root,
// an empty result, control characters and invalid UTF-8 are errors (a
// *FieldError with Field "path"). Globs are matched against canonical paths,
// so "notes/../people/x" is checked as "people/x".
func CanonicalMemoryPath(p string) (string, error) {
	switch {
	case !utf8.ValidString(p):
		return "", fieldErr("path", "is not valid UTF-8")
	case hasControl(p):
		return "", fieldErr("path", "must not contain control characters")
	}
	var parts []string
	for _, seg := range strings.Split(p, "/") {
		switch seg {
		case "", ".":
		case "..":
			if len(parts) == 0 {
				return "", fieldErr("path", `climbs above the memory root with ".."`)
			}
			parts = parts[:len(parts)-1]
		default:
			parts = append(parts, seg)
		}
	}
	if len(parts) == 0 {
		return "", fieldErr("path", "is empty")
	}
	return strings.Join(parts, "/"), nil
}

// hostGlob checks a host pattern: an exact host name, "*.example.com" for
// every subdomain of example.com, or an exact IP literal. It returns the
// pattern lower-cased (IP literals in canonical form, without brackets).
func hostGlob(h string) (string, string) {
	h = strings.ToLower(h)
	switch {
	case h == "":
		return "", "must not be empty"
	case h == "*" || h == "*.*" || h == "**":
		return "", "a bare wildcard would allow every host; list the hosts"
	case strings.ContainsFunc(h, func(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) }):
		return "", "must not contain spaces or control characters"
	case strings.Contains(h, "://"):
		return "", "must be a host name, not a URL (drop the scheme)"
	case strings.Contains(h, "/"):
		return "", "must be a host name without a path"
	case strings.Contains(h, "@"):
		return "", "must be a host name without user info"
	case !utf8.ValidString(h) || strings.ContainsFunc(h, func(r rune) bool { return r > unicode.MaxASCII }):
		return "", "must be ASCII (write internationalised names in their xn-- form)"
	}
	if inner, ok := strings.CutPrefix(h, "["); ok {
		inner, ok = strings.CutSuffix(inner, "]")
		a, err := netip.ParseAddr(inner)
		if !ok || err != nil || !a.Is6() || a.Zone() != "" {
			return "", "is not a valid IPv6 address in brackets (a port is not allowed)"
		}
		return a.String(), ""
	}
	if a, err := netip.ParseAddr(h); err == nil {
		if a.Zone() != "" {
			return "", "must not carry an IPv6 zone"
		}
		return a.String(), ""
	}
	if strings.Contains(h, ":") {
		return "", "must be a host name without a port"
	}
	if rest, ok := strings.CutPrefix(h, "*."); ok {
		if reason := hostName(rest); reason != "" {
			return "", reason
		}
		if strings.Count(rest, ".") < 1 {
			return "", `a wildcard needs at least two labels after "*." ("*.example.com", not "*.com")`
		}
		if ps, _ := publicsuffix.PublicSuffix(rest); ps == rest {
			return "", fmt.Sprintf("a wildcard over the public suffix %q would allow hosts of unrelated owners", rest)
		}
		return h, ""
	}
	if reason := hostName(h); reason != "" {
		return "", reason
	}
	return h, ""
}

// hostName checks a lower-case DNS name without wildcards.
func hostName(h string) string {
	if strings.Contains(h, "*") {
		return `a wildcard is only allowed as a leading "*." label`
	}
	if len(h) > 253 {
		return "is longer than 253 characters"
	}
	labels := strings.Split(h, ".")
	for _, l := range labels {
		if l == "" || len(l) > 63 {
			return "is not a valid host name (empty or over-long label)"
		}
		if l[0] == '-' || l[len(l)-1] == '-' {
			return "is not a valid host name (a label starts or ends with '-')"
		}
		for i := 0; i < len(l); i++ {
			c := l[i]
			if !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-' || c == '_') {
				return fmt.Sprintf("is not a valid host name (character %q)", c)
			}
		}
	}
	if strings.Trim(labels[len(labels)-1], "0123456789") == "" {
		return "is neither a valid IP address nor a host name"
	}
	return ""
}

// DomainProblem says why s is not an x-allowed-domains entry ("" when it
// is one): the same check as a SKILL.md's, for other lists of domains (an
// MCP server's).
func DomainProblem(s string) string {
	_, reason := hostGlob(s)
	return reason
}
