package audit

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"cyberos.dev/audit/internal/canonref"
)

// withLibraryCanonical runs f with the builders encoding through
// encoding/json + jcs.Transform (see canonref.Builders).
func withLibraryCanonical(f func()) {
	canonref.Builders = canonref.JCS
	defer func() { canonref.Builders = nil }()
	f()
}

// TestLibraryCanonicalMatchesBuilders: every builder gives the same bytes
// (and refuses the same input) through its own encoder as through
// encoding/json + jcs.Transform, the variant BenchmarkEmitCanon compares
// it with: strings with every escape, unicode, invalid UTF-8, and integers
// up to 2^53-1.
func TestLibraryCanonicalMatchesBuilders(t *testing.T) {
	strs := []string{"", "plain", `quote " backslash \ slash /`, "\x00\x01\x08\t\n\x0b\x0c\r\x1f\x7f",
		"<script>&amp;</script>", "é€😀", "\u2028\u2029", "\ufeffbom", "cut \xe2\x82 mid-rune \xff",
		"\xed\xa0\x80 surrogate", "日本語のエラー", strings.Repeat("long ", 300)}
	rng := rand.New(rand.NewPCG(3, 4))
	alphabet := []rune{'a', 'Z', '0', '"', '\\', '/', '\n', '\r', '\t', '\b', '\f', '\x00', '\x1f', 0x7f, 0x80, 'é',
		'€', '😀', '\u2028', '\ufffd', '<', '>', '&', ' ', '\'', 'Ω'}
	for range 400 {
		var b strings.Builder
		for range rng.IntN(24) {
			b.WriteRune(alphabet[rng.IntN(len(alphabet))])
		}
		if rng.IntN(10) == 0 {
			b.WriteByte(0xff) // invalid UTF-8
		}
		strs = append(strs, b.String())
	}
	ints := []int64{0, 1, 9, 10, 999, 1 << 31, 1<<32 + 7, 1 << 40, 123456789012345, MaxJSONInt - 1, MaxJSONInt, -1, MaxJSONInt + 1}
	containments := []any{
		map[string]any{},
		map[string]any{"seccomp": "default", "uid": 65534, "mem_bytes": int64(1) << 50, "ro": []string{"/usr", "é\u2028"}},
		map[string]any{"z": 1.5, "a": map[string]any{"nested": true, "n": nil}, "€": "<&>", "\u00e9": 1e20},
	}
	type build func(s string, n int64, i int) Draft
	builders := map[string]build{
		"InvokedStarted": func(s string, n int64, i int) Draft {
			return InvokedStarted(Common{InvocationID: s + "i", RequestID: s, SkillID: "k" + s, TenantID: s, TraceID: s},
				s, s, zeroHash(i), containments[i%len(containments)])
		},
		"InvokedStartedPolicy": func(s string, n int64, i int) Draft {
			return InvokedStartedPolicy(common("inv"+s), s, s, "", zeroHash(i), containments[i%len(containments)])
		},
		"InvokedCompleted": func(s string, n int64, i int) Draft {
			return InvokedCompleted(common(s+"i"), invocationOutcomes[i%len(invocationOutcomes)], n, zeroHash(i), s)
		},
		"Timeout": func(s string, n int64, i int) Draft {
			return Timeout(common(s+"i"), n, "SIG"+s)
		},
		"ToolCallStarted": func(s string, n int64, i int) Draft {
			return ToolCallStarted(common(s+"i"), "c"+s, "t"+s, zeroHash(i))
		},
		"ToolCallCompleted": func(s string, n int64, i int) Draft {
			return ToolCallCompleted(common(s+"i"), "c"+s, "t"+s, toolCallOutcomes[i%len(toolCallOutcomes)], n, "", s)
		},
		"ToolDenied": func(s string, n int64, i int) Draft {
			return ToolDenied(common(s+"i"), "t"+s, "r"+s, zeroHash(i))
		},
		"NoConnect": func(s string, n int64, i int) Draft {
			return NoConnect(common(s+"i"), n)
		},
		"refused": func(s string, n int64, i int) Draft {
			return ToolCallStarted(Common{InvocationID: s, SkillID: "k"}, "", "t", "bad")
		},
	}
	compared := 0
	for name, bld := range builders {
		for i, s := range strs {
			n := ints[i%len(ints)]
			own := bld(s, n, i)
			var lib Draft
			withLibraryCanonical(func() { lib = bld(s, n, i) })
			if (own.err == nil) != (lib.err == nil) {
				t.Fatalf("%s(%q, %d): own encoder err %v, library err %v", name, s, n, own.err, lib.err)
			}
			if own.err != nil {
				continue
			}
			if string(own.Payload) != string(lib.Payload) {
				t.Fatalf("%s(%q, %d):\n builders %s\n  library %s", name, s, n, own.Payload, lib.Payload)
			}
			if err := lib.Validate(); err != nil {
				t.Fatalf("%s(%q, %d): library draft refused: %v", name, s, n, err)
			}
			compared++
		}
	}
	if compared < 2000 {
		t.Fatalf("only %d drafts compared", compared)
	}
	t.Logf("%d drafts byte for byte identical", compared)
}

// The refused builder above must be refused by both encoders: a guard that
// the comparison of refusals is not vacuous.
func TestLibraryCanonicalRefusesLikeBuilders(t *testing.T) {
	var lib Draft
	withLibraryCanonical(func() { lib = InvokedCompleted(common("i"), OutcomeSuccess, -1, "", "") })
	own := InvokedCompleted(common("i"), OutcomeSuccess, -1, "", "")
	if own.err == nil || lib.err == nil {
		t.Fatalf("negative duration accepted: own %v, library %v", own.err, lib.err)
	}
	if fmt.Sprint(own.err) != fmt.Sprint(lib.err) {
		t.Fatalf("different refusals: own %v, library %v", own.err, lib.err)
	}
}
