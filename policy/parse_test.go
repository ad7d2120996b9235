package policy

import (
	"errors"
	"reflect"
	"strings"
	"testing"
)

// doc wraps YAML in the "---" lines of a SKILL.md, with a body after it.
func doc(yaml string) string {
	return "---\n" + yaml + "\n---\n# Body\n\nNot frontmatter: name: Bad Name\n"
}

// base is the smallest valid frontmatter; cases append the key under test.
const base = "name: demo\ndescription: A demo skill.\n"

const fullYAML = `name: repo-helper
version: 1.2.3-rc.1
description: |
  Summarise a repository.
entrypoint: ./bin//run
allowed_tools:
  - Read
  - Bash(git status:*)
  - Bash(ls -la)
  - Read(/srv/data/**)
  - HttpFetch(API.example.com)
  - MemoryRead(/notes/./a/../**)
disallowed_tools: [Write, Bash]
allowed_memory_scopes: ["notes/**", "/team/*/summary", "a/./b//c/../d"]
effort_minutes: 30
x-allowed-files: ["/srv/data/**", "/tmp//x/../y"]
x-allowed-domains: [API.Example.com, "*.example.org", 10.0.0.1, "[::1]"]
x-seccomp-profile: strict_net
x-memory-mb: 1024
x-pids-max: 128
x-cpu: 1.5
x-rate-limit-per-minute: 60
x-compensation: true
x-team: {owner: infra, tags: [a, b]}
license: MIT
`

func TestParseFullExample(t *testing.T) {
	p, err := Parse([]byte(doc(fullYAML)))
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	want := &Policy{
		Name:        "repo-helper",
		Version:     "1.2.3-rc.1",
		Description: "Summarise a repository.",
		Entrypoint:  "bin/run",
		Kind:        KindTool,
		AllowedTools: []ToolRule{
			{Tool: ToolRead},
			{Tool: ToolBash, Pattern: "git status", Prefix: true},
			{Tool: ToolBash, Pattern: "ls -la"},
			{Tool: ToolRead, Pattern: "/srv/data/**"},
			{Tool: ToolHttpFetch, Pattern: "api.example.com"},
			{Tool: ToolMemoryRead, Pattern: "notes/**"},
		},
		DisallowedTools:     []ToolRule{{Tool: ToolWrite}, {Tool: ToolBash}},
		AllowedMemoryScopes: []string{"notes/**", "team/*/summary", "a/b/d"},
		EffortMinutes:       30,
		AllowedFiles:        []string{"/srv/data/**", "/tmp/y"},
		AllowedDomains:      []string{"api.example.com", "*.example.org", "10.0.0.1", "::1"},
		SeccompProfile:      "strict_net",
		MemoryMB:            1024,
		PidsMax:             128,
		CPU:                 1.5,
		RateLimitPerMinute:  60,
		Compensation:        true,
		Extensions: map[string]any{
			"x-team": map[string]any{"owner": "infra", "tags": []any{"a", "b"}},
		},
		Warnings: []string{`unknown key "license" ignored`},
	}
	if !p.Given("effort_minutes") || !p.Given("x-memory-mb") || p.Given("x-no-such") {
		t.Errorf("Given: effort_minutes %v x-memory-mb %v", p.Given("effort_minutes"), p.Given("x-memory-mb"))
	}
	p.given = nil // compared through Given above
	if !reflect.DeepEqual(p, want) {
		t.Errorf("Parse mismatch\n got: %#v\nwant: %#v", p, want)
	}
}

func TestParseDefaults(t *testing.T) {
	p, err := Parse([]byte(doc(base)))
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	want := &Policy{
		Name:                "demo",
		Version:             DefaultVersion,
		Description:         "A demo skill.",
		Entrypoint:          DefaultEntrypoint,
		Kind:                KindTool,
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
	if p.Given("effort_minutes") || p.Given("x-memory-mb") || !p.Given("name") {
		t.Errorf("Given on a default-only policy: %v", p.given)
	}
	p.given = nil
	if !reflect.DeepEqual(p, want) {
		t.Errorf("defaults mismatch\n got: %#v\nwant: %#v", p, want)
	}
	// Absent lists are empty, never nil: nil must never be read as "all".
	if p.AllowedTools == nil || p.DisallowedTools == nil || p.AllowedMemoryScopes == nil ||
		p.AllowedFiles == nil || p.AllowedDomains == nil {
		t.Error("an absent list is nil, want empty")
	}
}

// TestParseAccepted covers inputs that parse, with a check of the result.
func TestParseAccepted(t *testing.T) {
	tests := []struct {
		name  string
		input string // whole SKILL.md
		check func(t *testing.T, p *Policy)
	}{
		{"CRLF and BOM", "\uFEFF---\r\nname: crlf\r\ndescription: d\r\nx-memory-mb: 64\r\n---\r\nbody\r\n",
			func(t *testing.T, p *Policy) {
				if p.Name != "crlf" || p.Description != "d" || p.MemoryMB != 64 {
					t.Errorf("got %+v", p)
				}
			}},
		{"closing line at end of file", "---\n" + base + "---",
			func(t *testing.T, p *Policy) {
				if p.Name != "demo" {
					t.Errorf("name = %q", p.Name)
				}
			}},
		{"delimiters with trailing blanks", "--- \n" + base + "---\t\nbody",
			func(t *testing.T, p *Policy) {}},
		{"body ignored even if it looks like YAML", "---\n" + base + "---\nname: [unclosed\n---\n",
			func(t *testing.T, p *Policy) {}},
		{"null lists are empty", doc(base + "allowed_tools:\nx-allowed-files:\n"),
			func(t *testing.T, p *Policy) {
				if p.AllowedTools == nil || len(p.AllowedTools) != 0 || p.AllowedFiles == nil || len(p.AllowedFiles) != 0 {
					t.Errorf("got %+v / %+v", p.AllowedTools, p.AllowedFiles)
				}
			}},
		{"tools as one comma/space string", doc(base + "allowed-tools: Read, Grep  Bash(git status:*),Bash(ls -la)\n"),
			func(t *testing.T, p *Policy) {
				want := []ToolRule{{Tool: ToolRead}, {Tool: ToolGrep},
					{Tool: ToolBash, Pattern: "git status", Prefix: true}, {Tool: ToolBash, Pattern: "ls -la"}}
				if !reflect.DeepEqual(p.AllowedTools, want) {
					t.Errorf("got %+v", p.AllowedTools)
				}
			}},
		{"empty tools string allows nothing", doc(base + "allowed-tools: \"\"\n"),
			func(t *testing.T, p *Policy) {
				if p.AllowedTools == nil || len(p.AllowedTools) != 0 {
					t.Errorf("got %+v", p.AllowedTools)
				}
			}},
		{"hyphenated aliases", doc(base + "disallowed-tools: [Bash]\nallowed-memory-scopes: [notes/**]\neffort-minutes: 7\n"),
			func(t *testing.T, p *Policy) {
				if len(p.DisallowedTools) != 1 || p.DisallowedTools[0].Tool != ToolBash ||
					!reflect.DeepEqual(p.AllowedMemoryScopes, []string{"notes/**"}) || p.EffortMinutes != 7 {
					t.Errorf("got %+v", p)
				}
			}},
		{"a tool both allowed and disallowed is recorded in both", doc(base + "allowed_tools: [Bash]\ndisallowed_tools: [Bash]\n"),
			func(t *testing.T, p *Policy) {
				if len(p.AllowedTools) != 1 || len(p.DisallowedTools) != 1 || len(p.Warnings) != 0 {
					t.Errorf("got %+v", p)
				}
			}},
		{"limits at their bounds", doc(base + "effort_minutes: 1440\nx-memory-mb: 16\nx-pids-max: 4096\nx-cpu: 64\nx-rate-limit-per-minute: 100000\n"),
			func(t *testing.T, p *Policy) {
				if p.EffortMinutes != 1440 || p.MemoryMB != 16 || p.PidsMax != 4096 || p.CPU != 64 || p.RateLimitPerMinute != 100000 {
					t.Errorf("got %+v", p)
				}
			}},
		{"other bounds", doc(base + "effort_minutes: 1\nx-memory-mb: 65536\nx-pids-max: 8\nx-rate-limit-per-minute: 1\n"),
			func(t *testing.T, p *Policy) {
				if p.EffortMinutes != 1 || p.MemoryMB != 65536 || p.PidsMax != 8 || p.RateLimitPerMinute != 1 {
					t.Errorf("got %+v", p)
				}
			}},
		{"explicit !!int tags are integers", doc(base + "effort_minutes: !!int \"7\"\nx-cpu: !!int \"3\"\nx-memory-mb: 0x100\n"),
			func(t *testing.T, p *Policy) {
				if p.EffortMinutes != 7 || p.CPU != 3 || p.MemoryMB != 256 {
					t.Errorf("got %+v", p)
				}
			}},
		{"x-cpu integer", doc(base + "x-cpu: 2\n"),
			func(t *testing.T, p *Policy) {
				if p.CPU != 2 {
					t.Errorf("CPU = %v", p.CPU)
				}
			}},
		{"x-cpu 0 is no quota", doc(base + "x-cpu: 0\n"),
			func(t *testing.T, p *Policy) {
				if p.CPU != 0 {
					t.Errorf("CPU = %v", p.CPU)
				}
			}},
		{"x-compensation false", doc(base + "x-compensation: false\n"),
			func(t *testing.T, p *Policy) {
				if p.Compensation {
					t.Error("Compensation = true")
				}
			}},
		{"version is any non-blank string", doc(base + "version: \"2024.06\"\n"),
			func(t *testing.T, p *Policy) {
				if p.Version != "2024.06" {
					t.Errorf("Version = %q", p.Version)
				}
			}},
		{"unknown x- keys go to Extensions untouched", doc(base + "x-foo: 3\nx-bar: [a, {b: c}]\nx-baz: ~\n"),
			func(t *testing.T, p *Policy) {
				want := map[string]any{"x-foo": uint64(3), "x-bar": []any{"a", map[string]any{"b": "c"}}, "x-baz": nil}
				if !reflect.DeepEqual(p.Extensions, want) || len(p.Warnings) != 0 {
					t.Errorf("Extensions = %#v, Warnings = %v", p.Extensions, p.Warnings)
				}
			}},
		{"anchors and aliases", doc(base + "x-a: &list [1, 2]\nx-b: *list\n"),
			func(t *testing.T, p *Policy) {
				if !reflect.DeepEqual(p.Extensions["x-b"], []any{uint64(1), uint64(2)}) {
					t.Errorf("x-b = %#v", p.Extensions["x-b"])
				}
			}},
		{"foreign keys of other agent tools warn", doc(base + "license: MIT\nmetadata: {a: b}\nmodel: opus\nargument-hint: \"[file]\"\nhooks: {}\ndisable-model-invocation: true\nuser-invocable: false\n"),
			func(t *testing.T, p *Policy) {
				want := []string{
					`unknown key "license" ignored`, `unknown key "metadata" ignored`, `unknown key "model" ignored`,
					`unknown key "argument-hint" ignored`, `unknown key "hooks" ignored`,
					`unknown key "disable-model-invocation" ignored`, `unknown key "user-invocable" ignored`,
				}
				if !reflect.DeepEqual(p.Warnings, want) {
					t.Errorf("Warnings = %q", p.Warnings)
				}
				if p.Extensions != nil {
					t.Errorf("foreign non-x keys reached Extensions: %v", p.Extensions)
				}
			}},
		{"description trimmed", doc("name: demo\ndescription: \"  padded  \"\n"),
			func(t *testing.T, p *Policy) {
				if p.Description != "padded" {
					t.Errorf("Description = %q", p.Description)
				}
			}},
		{"nesting up to the cap", doc(base + "x-d: " + strings.Repeat("[", 64) + strings.Repeat("]", 64) + "\nx-e:\n  " + strings.Repeat("- ", 20) + "x\nx-f: \"a - b - c [[ ]] {\"\n"),
			func(t *testing.T, p *Policy) {
				if len(p.Extensions) != 3 {
					t.Errorf("Extensions = %v", p.Extensions)
				}
			}},
		{"entrypoint cleaned", doc(base + "entrypoint: ./bin/./run\n"),
			func(t *testing.T, p *Policy) {
				if p.Entrypoint != "bin/run" {
					t.Errorf("Entrypoint = %q", p.Entrypoint)
				}
			}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p, err := Parse([]byte(tc.input))
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			tc.check(t, p)
		})
	}
}

// TestToolRuleForms maps each entry form onto its ToolRule.
func TestToolRuleForms(t *testing.T) {
	tests := []struct {
		entry string
		want  ToolRule
	}{
		{"Bash", ToolRule{Tool: ToolBash}},
		{"Bash(git status:*)", ToolRule{Tool: ToolBash, Pattern: "git status", Prefix: true}},
		{"Bash(git:*)", ToolRule{Tool: ToolBash, Pattern: "git", Prefix: true}},
		{"Bash(ls -la)", ToolRule{Tool: ToolBash, Pattern: "ls -la"}},
		{"Bash( npm test )", ToolRule{Tool: ToolBash, Pattern: "npm test"}},
		{"Bash(echo (x))", ToolRule{Tool: ToolBash, Pattern: "echo (x)"}},
		{"Read(/srv/data/**)", ToolRule{Tool: ToolRead, Pattern: "/srv/data/**"}},
		{"Write(/tmp/out/*.json)", ToolRule{Tool: ToolWrite, Pattern: "/tmp/out/*.json"}},
		{"Edit(/srv//a/../b/**)", ToolRule{Tool: ToolEdit, Pattern: "/srv/b/**"}},
		{"Glob(/srv/{a,b}/**)", ToolRule{Tool: ToolGlob, Pattern: "/srv/{a,b}/**"}},
		{"Grep(/srv/**/*.go)", ToolRule{Tool: ToolGrep, Pattern: "/srv/**/*.go"}},
		{"HttpFetch(api.example.com)", ToolRule{Tool: ToolHttpFetch, Pattern: "api.example.com"}},
		{"HttpPost(*.Example.com)", ToolRule{Tool: ToolHttpPost, Pattern: "*.example.com"}},
		{"MemoryRead(notes/**)", ToolRule{Tool: ToolMemoryRead, Pattern: "notes/**"}},
		{"MemorySearch(/team/*/summary)", ToolRule{Tool: ToolMemorySearch, Pattern: "team/*/summary"}},
		{"MemoryEmit(a/b/../c)", ToolRule{Tool: ToolMemoryEmit, Pattern: "a/c"}},
	}
	for _, tc := range tests {
		t.Run(tc.entry, func(t *testing.T) {
			p, err := Parse([]byte(doc(base + "allowed_tools: ['" + tc.entry + "']\n")))
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			if len(p.AllowedTools) != 1 || p.AllowedTools[0] != tc.want {
				t.Errorf("got %+v, want %+v", p.AllowedTools, tc.want)
			}
		})
	}
	for _, tool := range KnownTools {
		p, err := Parse([]byte(doc(base + "allowed_tools: [" + string(tool) + "]\n")))
		if err != nil || len(p.AllowedTools) != 1 || p.AllowedTools[0] != (ToolRule{Tool: tool}) {
			t.Errorf("bare %s: got %+v, %v", tool, p, err)
		}
	}
}

// Values accepted for hosts, in x-allowed-domains and Http rules.
func TestHostGlobAccepted(t *testing.T) {
	tests := map[string]string{
		"api.example.com":   "api.example.com",
		"API.Example.COM":   "api.example.com",
		"*.example.com":     "*.example.com",
		"*.example.co.uk":   "*.example.co.uk",
		"localhost":         "localhost",
		"my_host.internal":  "my_host.internal",
		"10.0.0.1":          "10.0.0.1",
		"[::1]":             "::1",
		"2001:DB8::1":       "2001:db8::1",
		"xn--bcher-kva.de":  "xn--bcher-kva.de",
		"a-b.example.com":   "a-b.example.com",
		"*.svc.example.net": "*.svc.example.net",
	}
	for in, want := range tests {
		got, reason := hostGlob(in)
		if reason != "" || got != want {
			t.Errorf("hostGlob(%q) = %q, %q; want %q", in, got, reason, want)
		}
	}
}

// errCase is one frontmatter that must be refused with a FieldError naming
// field, whose reason contains reason.
type errCase struct {
	name   string
	yaml   string
	field  string
	reason string
}

var errCases = []errCase{
	// Required keys.
	{"name missing", "description: d\n", "name", "is required"},
	{"description missing", "name: demo\n", "description", "is required"},
	{"name upper case", "name: Demo\ndescription: d\n", "name", "must match"},
	{"name with space", "name: my skill\ndescription: d\n", "name", "must match"},
	{"name leading dash", "name: -demo\ndescription: d\n", "name", "must match"},
	{"name leading dot", "name: .demo\ndescription: d\n", "name", "must match"},
	{"name 65 chars", "name: " + strings.Repeat("a", 65) + "\ndescription: d\n", "name", "must match"},
	{"name not a string", "name: 123\ndescription: d\n", "name", "must be a string, got 123"},
	{"name null", "name:\ndescription: d\n", "name", "must be a string"},
	{"description blank", "name: demo\ndescription: \"  \"\n", "description", "must not be empty"},
	{"description list", "name: demo\ndescription: [a]\n", "description", "must be a string, got a list"},

	// version
	{"version empty", base + "version: \"\"\n", "version", "must not be empty"},
	{"version too long", base + "version: " + strings.Repeat("1", 65) + "x\n", "version", "at most 64"},
	{"version whitespace", base + "version: 1.0 beta\n", "version", "whitespace"},
	{"version float", base + "version: 1.0\n", "version", "must be a string"},

	// effort_minutes
	{"effort zero", base + "effort_minutes: 0\n", "effort_minutes", "between 1 and 1440, got 0"},
	{"effort too big", base + "effort_minutes: 1441\n", "effort_minutes", "between 1 and 1440"},
	{"effort negative", base + "effort_minutes: -5\n", "effort_minutes", "got -5"},
	{"effort string", base + "effort_minutes: \"5\"\n", "effort_minutes", `got "5"`},
	{"effort float", base + "effort_minutes: 5.0\n", "effort_minutes", "must be an integer"},
	{"effort list", base + "effort_minutes: [5]\n", "effort_minutes", "got a list"},
	{"effort hyphen key as written", base + "effort-minutes: x\n", "effort-minutes", "must be an integer"},
	{"effort huge", base + "effort_minutes: 99999999999999999999999\n", "effort_minutes", "must be an integer"},

	// entrypoint
	{"entrypoint absolute", base + "entrypoint: /bin/sh\n", "entrypoint", "not absolute"},
	{"entrypoint dotdot", base + "entrypoint: ../main\n", "entrypoint", `".." segment`},
	{"entrypoint inner dotdot", base + "entrypoint: bin/../main\n", "entrypoint", `".." segment`},
	{"entrypoint empty", base + "entrypoint: \"\"\n", "entrypoint", "must not be empty"},
	{"entrypoint dot", base + "entrypoint: ./\n", "entrypoint", "inside the skill folder"},
	{"entrypoint not string", base + "entrypoint: 5\n", "entrypoint", "must be a string"},
	{"entrypoint control char", base + "entrypoint: \"ma\\nin\"\n", "entrypoint", "control"},

	// allowed_tools / disallowed_tools
	{"unknown tool", base + "allowed_tools: [Read, WebFetch]\n", "allowed_tools",
		`entry 2 "WebFetch": unknown tool "WebFetch"; known tools: Bash, Read, Write, Edit, Glob, Grep, MemoryRead, MemorySearch, MemoryEmit, HttpFetch, HttpPost`},
	{"tool name wrong case", base + "allowed_tools: [read]\n", "allowed_tools", `unknown tool "read"`},
	{"unknown tool in rule", base + "allowed_tools: [\"Shell(ls)\"]\n", "allowed_tools", `unknown tool "Shell"`},
	{"unknown tool disallowed", base + "disallowed_tools: [Task]\n", "disallowed_tools", `unknown tool "Task"`},
	{"unknown tool hyphen key", base + "allowed-tools: Read, Foo\n", "allowed-tools", `unknown tool "Foo"`},
	{"empty pattern", base + "allowed_tools: [\"Read()\"]\n", "allowed_tools", "empty pattern"},
	{"blank pattern", base + "allowed_tools: [\"Bash(  )\"]\n", "allowed_tools", "empty pattern"},
	{"unterminated rule in list", base + "allowed_tools: [\"Read(/x\"]\n", "allowed_tools", "Read(pattern)"},
	{"unbalanced in string form", base + "allowed-tools: Read, Bash(git status\n", "allowed-tools", "unbalanced"},
	{"extra close paren in string form", base + "allowed-tools: Read)\n", "allowed-tools", "unbalanced"},
	{"tools as mapping", base + "allowed_tools: {Read: true}\n", "allowed_tools", "must be a list of tool names, got a mapping"},
	{"tools as number", base + "allowed_tools: 5\n", "allowed_tools", "must be a list"},
	{"tool entry not a string", base + "allowed_tools: [Read, 5]\n", "allowed_tools", "entry 2 must be a tool name string, got 5"},
	{"tool entry a list", base + "allowed_tools: [[Read]]\n", "allowed_tools", "got a list"},
	{"tool entry empty", base + "allowed_tools: [\"\"]\n", "allowed_tools", "empty tool name"},
	{"comma list inside a list entry", base + "allowed_tools: [\"Read, Grep\"]\n", "allowed_tools", "unknown tool"},
	{"bash star", base + "disallowed_tools: [\"Bash(rm *)\"]\n", "disallowed_tools", `trailing ":*"`},
	{"bash lone star", base + "allowed_tools: [\"Bash(*)\"]\n", "allowed_tools", `trailing ":*"`},
	{"bash empty prefix", base + "allowed_tools: [\"Bash(:*)\"]\n", "allowed_tools", "empty command"},
	{"bash control char", base + "allowed_tools: [\"Bash(ls\\n-la)\"]\n", "allowed_tools", "control"},
	{"read relative", base + "allowed_tools: [\"Read(src/**)\"]\n", "allowed_tools", "absolute"},
	{"read home", base + "allowed_tools: [\"Read(~/x)\"]\n", "allowed_tools", "absolute"},
	{"read bad glob", base + "allowed_tools: [\"Read(/srv/[a)\"]\n", "allowed_tools", "not a valid glob"},
	{"grep bad glob", base + "allowed_tools: [\"Grep(/srv/{a)\"]\n", "allowed_tools", "not a valid glob"},
	{"http wildcard tld", base + "allowed_tools: [\"HttpFetch(*.com)\"]\n", "allowed_tools", "two labels"},
	{"http url", base + "allowed_tools: [\"HttpPost(https://a.example.com)\"]\n", "allowed_tools", "not a URL"},
	{"memory climbs", base + "allowed_tools: [\"MemoryRead(../x)\"]\n", "allowed_tools", "climbs above"},
	{"both spellings allowed tools", base + "allowed_tools: [Read]\nallowed-tools: [Grep]\n", "allowed-tools", `given twice, also as "allowed_tools"`},
	{"both spellings disallowed tools", base + "disallowed-tools: [Bash]\ndisallowed_tools: [Read]\n", "disallowed_tools", "given twice"},
	{"both spellings scopes", base + "allowed_memory_scopes: [a]\nallowed-memory-scopes: [b]\n", "allowed-memory-scopes", "given twice"},
	{"both spellings effort", base + "effort_minutes: 5\neffort-minutes: 6\n", "effort-minutes", "given twice"},
	{"merge key duplicates a key", "<<: {name: other}\n" + base, "name", "given twice"},

	// allowed_memory_scopes
	{"scope climbs", base + "allowed_memory_scopes: [../secrets]\n", "allowed_memory_scopes", "climbs above"},
	{"scope climbs later", base + "allowed_memory_scopes: [notes/../../x/**]\n", "allowed_memory_scopes", "climbs above"},
	{"scope root", base + "allowed_memory_scopes: [/]\n", "allowed_memory_scopes", "is empty"},
	{"scope empty", base + "allowed_memory_scopes: [\"\"]\n", "allowed_memory_scopes", "is empty"},
	{"scope bad glob", base + "allowed_memory_scopes: [\"notes/[x\"]\n", "allowed_memory_scopes", "not a valid glob"},
	{"scope string", base + "allowed_memory_scopes: notes/**\n", "allowed_memory_scopes", "must be a list of memory path globs"},
	{"scope number entry", base + "allowed_memory_scopes: [1]\n", "allowed_memory_scopes", "entry 1 must be a string, got 1"},
	{"scope mapping", base + "allowed_memory_scopes: {a: b}\n", "allowed_memory_scopes", "got a mapping"},
	{"scope control", base + "allowed_memory_scopes: [\"a\\tb\"]\n", "allowed_memory_scopes", "control"},

	// x-allowed-files
	{"files relative", base + "x-allowed-files: [tmp/**]\n", "x-allowed-files", "absolute"},
	{"files empty entry", base + "x-allowed-files: [\"\"]\n", "x-allowed-files", "must not be empty"},
	{"files bad glob", base + "x-allowed-files: [\"/srv/[\"]\n", "x-allowed-files", "not a valid glob"},
	{"files mapping", base + "x-allowed-files: {a: b}\n", "x-allowed-files", "must be a list of absolute path globs, got a mapping"},
	{"files string", base + "x-allowed-files: /tmp/**\n", "x-allowed-files", "must be a list"},
	{"files bool entry", base + "x-allowed-files: [true]\n", "x-allowed-files", "got true"},

	// x-allowed-domains
	{"domain star", base + "x-allowed-domains: [\"*\"]\n", "x-allowed-domains", "every host"},
	{"domain star tld", base + "x-allowed-domains: [\"*.com\"]\n", "x-allowed-domains", "two labels"},
	{"domain star public suffix", base + "x-allowed-domains: [\"*.co.uk\"]\n", "x-allowed-domains", "public suffix"},
	{"domain star private suffix", base + "x-allowed-domains: [\"*.github.io\"]\n", "x-allowed-domains", "public suffix"},
	{"domain scheme", base + "x-allowed-domains: [\"https://api.example.com\"]\n", "x-allowed-domains", "not a URL"},
	{"domain path", base + "x-allowed-domains: [api.example.com/v1]\n", "x-allowed-domains", "without a path"},
	{"domain port", base + "x-allowed-domains: [\"api.example.com:443\"]\n", "x-allowed-domains", "without a port"},
	{"domain userinfo", base + "x-allowed-domains: [\"me@api.example.com\"]\n", "x-allowed-domains", "user info"},
	{"domain space", base + "x-allowed-domains: [\"api example.com\"]\n", "x-allowed-domains", "spaces"},
	{"domain inner wildcard", base + "x-allowed-domains: [\"api-*.example.com\"]\n", "x-allowed-domains", "leading"},
	{"domain double wildcard", base + "x-allowed-domains: [\"*.*.example.com\"]\n", "x-allowed-domains", "leading"},
	{"domain wildcard ip", base + "x-allowed-domains: [\"*.10.0.0.1\"]\n", "x-allowed-domains", "neither"},
	{"domain bad ip", base + "x-allowed-domains: [\"1.2.3\"]\n", "x-allowed-domains", "neither"},
	{"domain ipv6 port", base + "x-allowed-domains: [\"[::1]:80\"]\n", "x-allowed-domains", "IPv6"},
	{"domain ipv6 zone", base + "x-allowed-domains: [\"fe80::1%eth0\"]\n", "x-allowed-domains", "zone"},
	{"domain non-ascii", base + "x-allowed-domains: [\"bücher.de\"]\n", "x-allowed-domains", "ASCII"},
	{"domain empty label", base + "x-allowed-domains: [\"a..example.com\"]\n", "x-allowed-domains", "label"},
	{"domain trailing dot", base + "x-allowed-domains: [\"example.com.\"]\n", "x-allowed-domains", "label"},
	{"domain dash label", base + "x-allowed-domains: [\"-a.example.com\"]\n", "x-allowed-domains", "'-'"},
	{"domain bad char", base + "x-allowed-domains: [\"a!.example.com\"]\n", "x-allowed-domains", "character"},
	{"domain empty", base + "x-allowed-domains: [\"\"]\n", "x-allowed-domains", "must not be empty"},
	{"domain number", base + "x-allowed-domains: [42]\n", "x-allowed-domains", "must be a string"},
	{"domains mapping", base + "x-allowed-domains: {a: b}\n", "x-allowed-domains", "must be a list"},

	// x-seccomp-profile
	{"profile upper", base + "x-seccomp-profile: Default\n", "x-seccomp-profile", "profile name"},
	{"profile path", base + "x-seccomp-profile: ../etc/x\n", "x-seccomp-profile", "profile name"},
	{"profile dot", base + "x-seccomp-profile: a.b\n", "x-seccomp-profile", "profile name"},
	{"profile number", base + "x-seccomp-profile: 5\n", "x-seccomp-profile", "must be a profile name, got 5"},

	// numeric x- keys
	{"memory string", base + "x-memory-mb: lots\n", "x-memory-mb", `must be an integer between 16 and 65536, got "lots"`},
	{"memory low", base + "x-memory-mb: 15\n", "x-memory-mb", "got 15"},
	{"memory high", base + "x-memory-mb: 65537\n", "x-memory-mb", "got 65537"},
	{"memory float", base + "x-memory-mb: 512.5\n", "x-memory-mb", "got 512.5"},
	{"memory integral float", base + "x-memory-mb: 512.0\n", "x-memory-mb", "must be an integer"},
	{"memory negative", base + "x-memory-mb: -512\n", "x-memory-mb", "got -512"},
	{"memory bool", base + "x-memory-mb: true\n", "x-memory-mb", "got true"},
	{"memory null", base + "x-memory-mb:\n", "x-memory-mb", "got nothing"},
	{"memory uint64 max", base + "x-memory-mb: 18446744073709551615\n", "x-memory-mb", "got 18446744073709551615"},
	{"memory tagged float", base + "x-memory-mb: !!float 512\n", "x-memory-mb", "got 512"},
	{"memory quoted", base + "x-memory-mb: \"512\"\n", "x-memory-mb", `got "512"`},
	{"pids low", base + "x-pids-max: 7\n", "x-pids-max", "between 8 and 4096"},
	{"pids high", base + "x-pids-max: 4097\n", "x-pids-max", "between 8 and 4096"},
	{"pids string", base + "x-pids-max: \"64\"\n", "x-pids-max", "must be an integer"},
	{"cpu negative", base + "x-cpu: -1\n", "x-cpu", "got -1"},
	{"cpu too many", base + "x-cpu: 64.5\n", "x-cpu", "at most 64"},
	{"cpu string", base + "x-cpu: \"2\"\n", "x-cpu", `got "2"`},
	{"cpu nan", base + "x-cpu: .nan\n", "x-cpu", "got NaN"},
	{"cpu inf", base + "x-cpu: .inf\n", "x-cpu", "got +Inf"},
	{"cpu bool", base + "x-cpu: true\n", "x-cpu", "got true"},
	{"rate zero", base + "x-rate-limit-per-minute: 0\n", "x-rate-limit-per-minute", "between 1 and 100000"},
	{"rate high", base + "x-rate-limit-per-minute: 100001\n", "x-rate-limit-per-minute", "between 1 and 100000"},
	{"rate float", base + "x-rate-limit-per-minute: 1.5\n", "x-rate-limit-per-minute", "must be an integer"},
	{"compensation string", base + "x-compensation: \"yes\"\n", "x-compensation", `must be true or false, got "yes"`},
	{"compensation bare yes", base + "x-compensation: yes\n", "x-compensation", "must be true or false"},
	{"compensation number", base + "x-compensation: 1\n", "x-compensation", "got 1"},

	// Near misses of policy keys are errors, never warnings.
	{"near disalowed_tools", base + "disalowed_tools: [Bash]\n", "disalowed_tools", `did you mean "disallowed_tools"?`},
	{"near allowed_tool", base + "allowed_tool: [Read]\n", "allowed_tool", `did you mean "allowed_tools"?`},
	{"near allowed-tool", base + "allowed-tool: Read\n", "allowed-tool", `did you mean "allowed-tools"?`},
	{"near transposed", base + "allowed_tools: [Read]\ndisallowed_tosl: [Bash]\n", "disallowed_tosl", `did you mean "disallowed_tools"?`},
	{"near x-memory-md", base + "x-memory-md: 64\n", "x-memory-md", `did you mean "x-memory-mb"?`},
	{"near x-pid-max", base + "x-pid-max: 8\n", "x-pid-max", `did you mean "x-pids-max"?`},
	{"near x-alowed-domain", base + "x-alowed-domain: [a.example.com]\n", "x-alowed-domain", `did you mean "x-allowed-domains"?`},
	{"near x-allowed-file", base + "x-allowed-file: [/tmp]\n", "x-allowed-file", `did you mean "x-allowed-files"?`},
	{"near x-rate-limit-per-minutes", base + "x-rate-limit-per-minutes: 5\n", "x-rate-limit-per-minutes", `did you mean "x-rate-limit-per-minute"?`},
	{"near x-seccomp-profil", base + "x-seccomp-profil: default\n", "x-seccomp-profil", `did you mean "x-seccomp-profile"?`},
	{"near x-gpu", base + "x-gpu: 1\n", "x-gpu", `did you mean "x-cpu"?`},
	{"near x-compensate", base + "x-compensaton: true\n", "x-compensaton", `did you mean "x-compensation"?`},
	{"underscore x- key", base + "x_memory_mb: 64\n", "x_memory_mb", `did you mean "x-memory-mb"?`},
	{"hyphenated x- key underscore form", base + "x-allowed_files: [/tmp]\n", "x-allowed_files", `did you mean "x-allowed-files"?`},
	{"upper case key", "Name: demo\ndescription: d\n", "Name", `did you mean "name"?`},
	{"shouted key", base + "ALLOWED_TOOLS: [Read]\n", "ALLOWED_TOOLS", `did you mean "allowed_tools"?`},
	{"near descripton", "name: demo\ndescripton: d\n", "descripton", `did you mean "description"?`},
	{"near effort_minute", base + "effort_minute: 5\n", "effort_minute", `did you mean "effort_minutes"?`},
	{"near effort-minute", base + "effort-minute: 5\n", "effort-minute", `did you mean "effort-minutes"?`},
	{"near entry-point", base + "entry-point: main\n", "entry-point", `did you mean "entrypoint"?`},
	{"near versions", base + "versions: \"1\"\n", "versions", `did you mean "version"?`},
	{"near allowed_memory_scope", base + "allowed_memory_scope: [a]\n", "allowed_memory_scope", `did you mean "allowed_memory_scopes"?`},
	{"near memory_mb without x-", base + "memory_mb: 64\n", "memory_mb", `did you mean "x-memory-mb"?`},

	// The YAML as a whole.
	{"duplicate key", "name: a\nname: b\ndescription: d\n", "frontmatter", `mapping key "name" already defined`},
	{"duplicate nested key", base + "x-foo: {a: 1, a: 2}\n", "frontmatter", "already defined"},
	{"list frontmatter", "- name\n- description\n", "frontmatter", "must be a mapping of keys to values, got a list"},
	{"scalar frontmatter", "just text\n", "frontmatter", "must be a mapping"},
	{"empty frontmatter", "", "frontmatter", "is empty"},
	{"comment-only frontmatter", "# nothing\n", "frontmatter", "is empty"},
	{"syntax error", base + "allowed_tools: [Read\n", "frontmatter", "invalid YAML"},
	{"two documents", base + "...\nx-foo: 1\n", "frontmatter", "single YAML document"},
	{"deep flow nesting", base + "x-d: " + strings.Repeat("[", 65) + strings.Repeat("]", 65) + "\n", "frontmatter", "nests more than 64 levels"},
	{"deep flow mapping", base + "x-d: " + strings.Repeat("{a: ", 65) + "1" + strings.Repeat("}", 65) + "\n", "frontmatter", "nests more than 64 levels"},
	{"deep compact sequence", base + "x-d:\n  " + strings.Repeat("- ", 65) + "x\n", "frontmatter", "nests more than 64 levels"},
}

func TestParseRejects(t *testing.T) {
	for _, tc := range errCases {
		t.Run(tc.name, func(t *testing.T) {
			p, err := Parse([]byte(doc(tc.yaml)))
			if err == nil {
				t.Fatalf("Parse succeeded: %+v", p)
			}
			if p != nil {
				t.Errorf("Parse returned a Policy with an error")
			}
			var fe *FieldError
			if !errors.As(err, &fe) {
				t.Fatalf("error %v (%T) is not a *FieldError", err, err)
			}
			if fe.Field != tc.field {
				t.Errorf("Field = %q, want %q (error: %v)", fe.Field, tc.field, err)
			}
			if !strings.Contains(fe.Reason, tc.reason) {
				t.Errorf("Reason = %q, want it to contain %q", fe.Reason, tc.reason)
			}
			if !errors.Is(err, ErrInvalid) {
				t.Errorf("errors.Is(%v, ErrInvalid) = false", err)
			}
		})
	}
}

// TestParseLimits covers frontmatter size and encoding, outside the YAML.
func TestParseLimits(t *testing.T) {
	big := base + "x-pad: \"" + strings.Repeat("a", MaxFrontmatterBytes) + "\"\n"
	tests := []struct {
		name   string
		input  string
		reason string
	}{
		{"frontmatter over 64 KiB", doc(big), "larger than 64 KiB"},
		{"unterminated and over 64 KiB", "---\n" + big, "larger than 64 KiB"},
		{"invalid UTF-8", doc(base + "x-foo: \"\xff\"\n"), "UTF-8"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse([]byte(tc.input))
			var fe *FieldError
			if !errors.As(err, &fe) || fe.Field != "frontmatter" || !strings.Contains(fe.Reason, tc.reason) {
				t.Fatalf("err = %v, want frontmatter: …%s…", err, tc.reason)
			}
		})
	}
	// Just under the cap is fine.
	pad := MaxFrontmatterBytes - len(base) - len("x-pad: \"\"\n") - 1
	if _, err := Parse([]byte(doc(base + "x-pad: \"" + strings.Repeat("a", pad) + "\""))); err != nil {
		t.Errorf("frontmatter just under the cap: %v", err)
	}
}

func TestParseNoFrontmatter(t *testing.T) {
	tests := map[string]string{
		"empty file":          "",
		"plain markdown":      "# Title\n\nname: x\n",
		"blank line first":    "\n---\n" + base + "---\n",
		"not closed":          "---\n" + base,
		"closing is indented": "---\n" + base + " ---\n",
		"four dashes":         "----\n" + base + "----\n",
		"BOM twice":           "\uFEFF\uFEFF---\n" + base + "---\n",
	}
	for name, input := range tests {
		t.Run(name, func(t *testing.T) {
			_, err := Parse([]byte(input))
			if !errors.Is(err, ErrNoFrontmatter) {
				t.Fatalf("err = %v, want ErrNoFrontmatter", err)
			}
			if !errors.Is(err, ErrInvalid) {
				t.Errorf("ErrNoFrontmatter does not match ErrInvalid")
			}
		})
	}
}

func TestFieldError(t *testing.T) {
	var err error = &FieldError{Field: "x-memory-mb", Reason: `must be an integer between 16 and 65536, got "lots"`}
	if got, want := err.Error(), `x-memory-mb: must be an integer between 16 and 65536, got "lots"`; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
	if !errors.Is(err, ErrInvalid) {
		t.Error("FieldError does not match ErrInvalid")
	}
	if errors.Is(err, ErrNoFrontmatter) {
		t.Error("FieldError matches ErrNoFrontmatter")
	}
	wrapped := errors.Join(errors.New("context"), err)
	if !errors.Is(wrapped, ErrInvalid) {
		t.Error("wrapped FieldError does not match ErrInvalid")
	}
}

// The exact message of a type error, as documented for operators.
func TestTypeErrorMessage(t *testing.T) {
	_, err := Parse([]byte(doc(base + "x-memory-mb: lots\n")))
	if err == nil || err.Error() != `x-memory-mb: must be an integer between 16 and 65536, got "lots"` {
		t.Errorf("err = %v", err)
	}
}

func TestCanonicalMemoryPath(t *testing.T) {
	ok := map[string]string{
		"notes/x.md":                          "notes/x.md",
		"/notes/x.md":                         "notes/x.md",
		"notes//x.md":                         "notes/x.md",
		"./notes/./x.md":                      "notes/x.md",
		"notes/":                              "notes",
		"memories/projects/cyberos/../people": "memories/projects/people",
		"a/b/../../c":                         "c",
		"team/*/summary":                      "team/*/summary",
		"notes/**":                            "notes/**",
		"...":                                 "...",
		"a/..b":                               "a/..b",
	}
	for in, want := range ok {
		got, err := CanonicalMemoryPath(in)
		if err != nil || got != want {
			t.Errorf("CanonicalMemoryPath(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	bad := []string{"", "/", ".", "..", "../x", "a/../..", "a/../../b", "/../x", "a\x00b", "a\nb", "\xff"}
	for _, in := range bad {
		got, err := CanonicalMemoryPath(in)
		if err == nil || !errors.Is(err, ErrInvalid) {
			t.Errorf("CanonicalMemoryPath(%q) = %q, %v; want an ErrInvalid error", in, got, err)
		}
	}
}

func TestEditDistance(t *testing.T) {
	tests := []struct {
		a, b string
		want int
	}{
		{"", "", 0},
		{"name", "name", 0},
		{"nmae", "name", 1}, // transposition counts once
		{"disalowed_tools", "disallowed_tools", 1},
		{"allowed_tool", "allowed_tools", 1},
		{"x_memory_md", "x_memory_mb", 1},
		{"license", "name", 3},
		{"model", "name", 3},
		{"abcdef", "name", 3}, // capped at limit+1
	}
	for _, tc := range tests {
		if got := editDistance(tc.a, tc.b, 2); got != min(tc.want, 3) {
			t.Errorf("editDistance(%q, %q) = %d, want %d", tc.a, tc.b, got, tc.want)
		}
	}
}

func TestToolKnown(t *testing.T) {
	for _, tool := range KnownTools {
		if !tool.Known() {
			t.Errorf("%s.Known() = false", tool)
		}
	}
	for _, tool := range []Tool{"", "bash", "WebFetch", "Bash(ls)"} {
		if tool.Known() {
			t.Errorf("%q.Known() = true", tool)
		}
	}
}

// TestYAMLErrorNamesTheLine: a YAML error names the SKILL.md line and
// column and shows the lines before it with a caret, word for word.
func TestYAMLErrorNamesTheLine(t *testing.T) {
	_, err := Parse([]byte("---\nname: badskill\ndescription: x\nallowed_tools: [Read\neffort_minutes: 1\n---\nbody\n"))
	want := "frontmatter: invalid YAML at SKILL.md line 5, column 1: ',' or ']' must be specified\n" +
		"   2 | name: badskill\n" +
		"   3 | description: x\n" +
		"   4 | allowed_tools: [Read\n" +
		">  5 | effort_minutes: 1\n" +
		"       ^"
	if err == nil || err.Error() != want {
		t.Fatalf("error:\n%v\nwant:\n%s", err, want)
	}
}
