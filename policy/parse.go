package policy

import (
	"bytes"
	"fmt"
	"regexp"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/goccy/go-yaml"
	"github.com/goccy/go-yaml/ast"
	"github.com/goccy/go-yaml/parser"
)

// MaxFrontmatterBytes caps the YAML between the two "---" lines.
const MaxFrontmatterBytes = 64 << 10

// maxNesting caps flow ("[", "{") and compact ("- - -") nesting. The YAML
// parser's time grows with the square of the nesting depth (seconds for a
// 64 KiB "[[[[…"); no frontmatter needs more than a few levels.
const maxNesting = 64

// Parse reads SKILL.md content and returns its validated Policy. The
// frontmatter is the YAML between a first line "---" and the next "---" line
// (CRLF line ends and a UTF-8 byte order mark are tolerated); the body after
// it is ignored.
//
// Every error matches ErrInvalid. A missing or unterminated frontmatter
// matches ErrNoFrontmatter; everything else is a *FieldError naming the key as
// written in the file ("frontmatter" for the YAML as a whole).
func Parse(data []byte) (*Policy, error) {
	fm, err := frontmatter(data)
	if err != nil {
		return nil, err
	}
	top, plain, err := decodeFrontmatter(fm)
	if err != nil {
		return nil, err
	}
	return build(top, plain)
}

var utf8BOM = []byte{0xEF, 0xBB, 0xBF}

// frontmatter returns the bytes between the opening and the closing "---"
// lines, with CRLF turned into LF.
func frontmatter(data []byte) ([]byte, error) {
	data = bytes.TrimPrefix(data, utf8BOM)
	first, rest, _ := cutLine(data)
	if !isDelimiter(first) {
		return nil, fmt.Errorf(`%w: SKILL.md must begin with a "---" line`, ErrNoFrontmatter)
	}
	off := 0
	for {
		if off > MaxFrontmatterBytes {
			return nil, fieldErr("frontmatter", fmt.Sprintf("is larger than %d KiB", MaxFrontmatterBytes>>10))
		}
		line, _, more := cutLine(rest[off:])
		if isDelimiter(line) {
			fm := rest[:off]
			if !utf8.Valid(fm) {
				return nil, fieldErr("frontmatter", "is not valid UTF-8")
			}
			return bytes.ReplaceAll(fm, []byte("\r\n"), []byte("\n")), nil
		}
		if !more {
			return nil, fmt.Errorf(`%w: no "---" line closes the frontmatter`, ErrNoFrontmatter)
		}
		off += bytes.IndexByte(rest[off:], '\n') + 1
	}
}

// cutLine splits off the first line (without its "\n" or "\r\n"); more is
// false when there was no newline.
func cutLine(b []byte) (line, rest []byte, more bool) {
	line, rest, more = bytes.Cut(b, []byte("\n"))
	return bytes.TrimSuffix(line, []byte("\r")), rest, more
}

func isDelimiter(line []byte) bool {
	return string(bytes.TrimRight(line, " \t")) == "---"
}

// decodeFrontmatter parses the YAML and returns its top-level mapping in file
// order and, when there are x- keys, the same mapping as plain maps (the form
// Extensions hold).
func decodeFrontmatter(fm []byte) (top yaml.MapSlice, plain map[string]any, err error) {
	// The YAML library is third-party code fed untrusted input: a panic in it
	// must become an error, not take the daemon down.
	defer func() {
		if r := recover(); r != nil {
			top, plain, err = nil, nil, fieldErr("frontmatter", fmt.Sprintf("invalid YAML: parser failed: %v", r))
		}
	}()

	if nestsTooDeep(fm) {
		return nil, nil, fieldErr("frontmatter", fmt.Sprintf("nests more than %d levels deep", maxNesting))
	}
	// The parser rejects duplicate keys at every level. The frontmatter
	// begins on SKILL.md's second line: one blank line before it makes the
	// parser's line numbers SKILL.md's.
	file, perr := parser.ParseBytes(append([]byte("\n"), fm...), 0)
	if perr != nil {
		return nil, nil, yamlErr(perr)
	}
	if len(file.Docs) > 1 {
		return nil, nil, fieldErr("frontmatter", "must be a single YAML document")
	}
	var body ast.Node
	if len(file.Docs) == 1 {
		body = file.Docs[0].Body
	}
	if body == nil {
		return nil, nil, fieldErr("frontmatter", "is empty: name and description are required")
	}
	var v any
	if err := yaml.NodeToValue(body, &v, yaml.UseOrderedMap()); err != nil {
		return nil, nil, yamlErr(err)
	}
	top, ok := v.(yaml.MapSlice)
	if !ok {
		return nil, nil, fieldErr("frontmatter", "must be a mapping of keys to values, got "+describe(v))
	}

	// Extensions keep their value as a plain map[string]any tree, decoded a
	// second time rather than converted, so aliases stay shared and a
	// "billion laughs" value costs no more than its text.
	for _, item := range top {
		if k, ok := item.Key.(string); ok && strings.HasPrefix(k, "x-") {
			if err := yaml.NodeToValue(body, &plain); err != nil {
				return nil, nil, yamlErr(err)
			}
			break
		}
	}
	return top, plain, nil
}

// yamlPos is the "[line:column] " the YAML library puts before a message;
// compiled on first use (see nameRE).
var yamlPos = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^\[(\d+):(\d+)\] `) })

// maxSnippetLines bounds the SKILL.md lines a YAML error shows.
const maxSnippetLines = 8

// yamlErr words a YAML error for the author: where in SKILL.md (line and
// column), what, and the lines around it with a caret, as the library
// prints them.
func yamlErr(err error) *FieldError {
	text := yaml.FormatError(err, false, true)
	msg, snippet, _ := strings.Cut(text, "\n")
	if m := yamlPos().FindStringSubmatch(msg); m != nil {
		msg = fmt.Sprintf("SKILL.md line %s, column %s: %s", m[1], m[2], msg[len(m[0]):])
	}
	lines := strings.Split(strings.TrimRight(snippet, "\n"), "\n")
	if len(lines) > maxSnippetLines {
		lines = lines[len(lines)-maxSnippetLines:]
	}
	reason := "invalid YAML at " + msg
	if snippet != "" {
		reason += "\n" + strings.Join(lines, "\n")
	}
	return fieldErr("frontmatter", reason)
}

// nestsTooDeep over-approximates nesting depth without parsing: brackets are
// counted even inside quoted strings, which only matters for text with more
// than maxNesting unclosed brackets.
func nestsTooDeep(fm []byte) bool {
	depth := 0
	for _, c := range fm {
		switch c {
		case '[', '{':
			if depth++; depth > maxNesting {
				return true
			}
		case ']', '}':
			depth = max(depth-1, 0)
		}
	}
	// Runs of "- " with only blanks between them, as in "k: - - - x".
	run := 0
	for i, c := range fm {
		switch {
		case c == '-' && (i == 0 || isBlank(fm[i-1])) && i+1 < len(fm) && isBlank(fm[i+1]):
			if run++; run > maxNesting {
				return true
			}
		case !isBlank(c):
			run = 0
		}
	}
	return false
}

func isBlank(c byte) bool { return c == ' ' || c == '\t' }

// field is one policy key: its canonical spelling, an accepted alias, and the
// setter that validates its value into the Policy.
type field struct {
	name  string // canonical: underscores for typed keys, hyphens for x- keys
	alias string // the other accepted spelling, or ""
	set   func(p *Policy, key string, v any) error
}

// fields lists every policy key. Keys near these (after normalising) are
// errors, never silently ignored.
var fields = []field{
	{"name", "", setName},
	{"version", "", setVersion},
	{"description", "", setDescription},
	{"entrypoint", "", setEntrypoint},
	{"allowed_tools", "allowed-tools", func(p *Policy, k string, v any) (err error) {
		p.AllowedTools, err = toolList(k, v)
		return err
	}},
	{"disallowed_tools", "disallowed-tools", func(p *Policy, k string, v any) (err error) {
		p.DisallowedTools, err = toolList(k, v)
		return err
	}},
	{"allowed_memory_scopes", "allowed-memory-scopes", func(p *Policy, k string, v any) (err error) {
		p.AllowedMemoryScopes, err = stringList(k, v, "memory path globs", memoryGlob)
		return err
	}},
	{"effort_minutes", "effort-minutes", func(p *Policy, k string, v any) error {
		n, err := intIn(k, v, 1, 1440)
		p.EffortMinutes = int(n)
		return err
	}},
	{"x-allowed-files", "", func(p *Policy, k string, v any) (err error) {
		p.AllowedFiles, err = stringList(k, v, "absolute path globs", fileGlob)
		return err
	}},
	{"x-allowed-domains", "", func(p *Policy, k string, v any) (err error) {
		p.AllowedDomains, err = stringList(k, v, "host names", hostGlob)
		return err
	}},
	{"x-seccomp-profile", "", setSeccompProfile},
	{"x-memory-mb", "", func(p *Policy, k string, v any) (err error) {
		p.MemoryMB, err = intIn(k, v, 16, 65536)
		return err
	}},
	{"x-pids-max", "", func(p *Policy, k string, v any) (err error) {
		p.PidsMax, err = intIn(k, v, 8, 4096)
		return err
	}},
	{"x-cpu", "", setCPU},
	{"x-rate-limit-per-minute", "", func(p *Policy, k string, v any) error {
		n, err := intIn(k, v, 1, 100000)
		p.RateLimitPerMinute = int(n)
		return err
	}},
	{"x-input-schema", "", setInputSchema},
	{"x-output-schema", "", setOutputSchema},
	{"x-compensation", "", func(p *Policy, k string, v any) error {
		b, ok := v.(bool)
		if !ok {
			return fieldErr(k, "must be true or false, got "+describe(v))
		}
		p.Compensation = b
		return nil
	}},
}

// spellings maps every accepted key spelling to its field.
var spellings = func() map[string]*field {
	m := make(map[string]*field, 2*len(fields))
	for i := range fields {
		f := &fields[i]
		m[f.name] = f
		if f.alias != "" {
			m[f.alias] = f
		}
	}
	return m
}()

// build applies the top-level keys, in file order, over the defaults.
func build(top yaml.MapSlice, plain map[string]any) (*Policy, error) {
	p := &Policy{
		Kind:                KindTool,
		Version:             DefaultVersion,
		Entrypoint:          DefaultEntrypoint,
		AllowedTools:        []ToolRule{},
		DisallowedTools:     []ToolRule{},
		AllowedMemoryScopes: []string{},
		EffortMinutes:       DefaultEffortMinutes,
		AllowedFiles:        []string{},
		AllowedDomains:      []string{},
		SeccompProfile:      DefaultSeccompProfile,
		MemoryMB:            DefaultMemoryMB,
		PidsMax:             DefaultPidsMax,
		CPU:                 DefaultCPU,
	}
	seen := map[*field]string{} // field → the spelling that set it
	for _, item := range top {
		key, ok := item.Key.(string)
		if !ok {
			key = fmt.Sprint(item.Key)
		}
		if f, ok := spellings[key]; ok {
			if prev, dup := seen[f]; dup {
				if prev == key {
					return nil, fieldErr(key, "is given twice")
				}
				return nil, fieldErr(key, fmt.Sprintf("is given twice, also as %q", prev))
			}
			seen[f] = key
			if p.given == nil {
				p.given = map[string]bool{}
			}
			p.given[f.name] = true
			if err := f.set(p, key, item.Value); err != nil {
				return nil, err
			}
			continue
		}
		if suggestion, near := nearMiss(key); near {
			return nil, fieldErr(key, fmt.Sprintf("unknown key; did you mean %q?", suggestion))
		}
		if strings.HasPrefix(key, "x-") {
			if p.Extensions == nil {
				p.Extensions = map[string]any{}
			}
			p.Extensions[key] = plain[key]
			continue
		}
		p.Warnings = append(p.Warnings, fmt.Sprintf("unknown key %q ignored", key))
	}
	if p.Name == "" {
		return nil, fieldErr("name", "is required")
	}
	if p.Description == "" {
		return nil, fieldErr("description", "is required")
	}
	return p, nil
}

// nearMiss reports whether key is within edit distance 2 of a policy key,
// comparing lower-cased with "-" read as "_", and returns the accepted
// spelling closest to what was written.
func nearMiss(key string) (suggestion string, near bool) {
	norm := normaliseKey(key)
	best := 3
	for i := range fields {
		f := &fields[i]
		d := editDistance(norm, normaliseKey(f.name), 2)
		if d >= best {
			continue
		}
		best, suggestion = d, f.name
		if f.alias != "" && editDistance(strings.ToLower(key), f.alias, 64) < editDistance(strings.ToLower(key), f.name, 64) {
			suggestion = f.alias
		}
	}
	return suggestion, best <= 2
}

func normaliseKey(k string) string {
	return strings.ReplaceAll(strings.ToLower(k), "-", "_")
}

// editDistance is the optimal-string-alignment (restricted Damerau-
// Levenshtein) distance between a and b, by bytes; once it is certain to
// exceed limit it returns limit+1.
func editDistance(a, b string, limit int) int {
	if d := len(a) - len(b); d > limit || -d > limit {
		return limit + 1
	}
	prev2 := make([]int, len(b)+1)
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		rowMin := cur[0]
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				cur[j] = min(cur[j], prev2[j-2]+1)
			}
			rowMin = min(rowMin, cur[j])
		}
		if rowMin > limit {
			return limit + 1
		}
		prev2, prev, cur = prev, cur, prev2
	}
	return min(prev[len(b)], limit+1)
}
