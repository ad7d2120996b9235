package audit

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/gowebpki/jcs"
)

var commonKeys = []string{"invocation_id", "request_id", "skill_id", "tenant_id", "trace_id"}

func TestBuildersProduceDocumentedKeys(t *testing.T) {
	c := common("inv-1")
	cases := []struct {
		d    Draft
		kind Kind
		keys []string
		want map[string]any // a few values worth pinning
	}{
		{InvokedStarted(c, "1.0.0", "cuo-cpo@0.4.1", zeroHash(1), map[string]any{"user_ns": false}), KindInvokedStarted,
			[]string{"version", "caller_persona", "args_hash", "containment"},
			map[string]any{"version": "1.0.0", "caller_persona": "cuo-cpo@0.4.1", "args_hash": zeroHash(1), "containment": map[string]any{"user_ns": false}}},
		{InvokedStartedPolicy(c, "1.0.0", "p", zeroHash(1), zeroHash(5), map[string]any{"seccomp_profile_hash": zeroHash(6)}), KindInvokedStarted,
			[]string{"version", "caller_persona", "args_hash", "policy_hash", "containment"},
			map[string]any{"policy_hash": zeroHash(5), "containment": map[string]any{"seccomp_profile_hash": zeroHash(6)}}},
		{InvokedCompleted(c, OutcomeSuccess, 87, zeroHash(2), ""), KindInvokedCompleted,
			[]string{"outcome", "duration_ms", "result_hash", "error_message"},
			map[string]any{"outcome": "success", "duration_ms": 87.0, "result_hash": zeroHash(2), "error_message": nil}},
		{InvokedCompleted(c, OutcomePanic, 12, "", "panicked"), KindInvokedCompleted,
			[]string{"outcome", "duration_ms", "result_hash", "error_message"},
			map[string]any{"outcome": "panic", "result_hash": "", "error_message": "panicked"}},
		{Timeout(c, 54000, "SIGTERM"), KindTimeout, []string{"deadline_ms", "signal"},
			map[string]any{"deadline_ms": 54000.0, "signal": "SIGTERM"}},
		{ToolCallStarted(c, "call-1", "Read", zeroHash(3)), KindToolCallStarted, []string{"call_id", "tool_name", "args_hash"},
			map[string]any{"call_id": "call-1", "tool_name": "Read", "args_hash": zeroHash(3)}},
		{ToolCallCompleted(c, "call-1", "Read", OutcomeError, 5, "", "ENOENT"), KindToolCallCompleted,
			[]string{"call_id", "tool_name", "outcome", "duration_ms", "result_hash", "error_message"},
			map[string]any{"outcome": "error", "duration_ms": 5.0, "error_message": "ENOENT"}},
		{ToolDenied(c, "Bash", "tool_not_in_allowed_tools", zeroHash(4)), KindToolDenied, []string{"tool_name", "reason", "attempted_args_hash"},
			map[string]any{"tool_name": "Bash", "reason": "tool_not_in_allowed_tools", "attempted_args_hash": zeroHash(4)}},
		{NoConnect(c, 60000), KindNoConnect, []string{"waited_ms"}, map[string]any{"waited_ms": 60000.0}},
		{InvokedCompletedAbuse(c, OutcomeSuccess, 87, zeroHash(2), "", map[string]int64{AbuseNotJSONRPC: 2, AbuseOversizedFrame: 1}), KindInvokedCompleted,
			[]string{"outcome", "duration_ms", "result_hash", "error_message", "protocol_abuse"},
			map[string]any{"outcome": "success", "protocol_abuse": map[string]any{"not_json_rpc": 2.0, "oversized_frame": 1.0}}},
		{InvokedCompletedAbuse(c, OutcomeSuccess, 87, zeroHash(2), "", map[string]int64{}), KindInvokedCompleted,
			[]string{"outcome", "duration_ms", "result_hash", "error_message"}, nil},
		{ProtocolAbuse(c, AbuseNotJSONRPC, "text where a frame's length prefix belongs"), KindProtocolAbuse, []string{"abuse_kind", "detail"},
			map[string]any{"abuse_kind": "not_json_rpc"}},
		{AuditCapReached(c, 1000, 987), KindAuditCapReached, []string{"max_audit_rows", "tool_calls"},
			map[string]any{"max_audit_rows": 1000.0, "tool_calls": 987.0}},
	}
	for _, tc := range cases {
		t.Run(string(tc.kind), func(t *testing.T) {
			if err := tc.d.Validate(); err != nil {
				t.Fatal(err)
			}
			if tc.d.Kind != tc.kind {
				t.Fatalf("kind %q, want %q", tc.d.Kind, tc.kind)
			}
			var m map[string]any
			if err := json.Unmarshal(tc.d.Payload, &m); err != nil {
				t.Fatal(err)
			}
			var got []string
			for k := range m {
				got = append(got, k)
			}
			want := append(slices.Clone(commonKeys), tc.keys...)
			slices.Sort(got)
			slices.Sort(want)
			if !slices.Equal(got, want) {
				t.Fatalf("keys %v, want %v", got, want)
			}
			for k, v := range map[string]any{"invocation_id": "inv-1", "request_id": c.RequestID, "skill_id": c.SkillID, "tenant_id": c.TenantID, "trace_id": c.TraceID} {
				if m[k] != v {
					t.Errorf("%s = %v, want %v", k, m[k], v)
				}
			}
			for k, v := range tc.want {
				if fmt.Sprint(m[k]) != fmt.Sprint(v) {
					t.Errorf("%s = %#v, want %#v", k, m[k], v)
				}
			}
			// What a builder makes is canonical and passes the generic
			// validation too (the path hand-made drafts and Verify take).
			canon, err := jcs.Transform(tc.d.Payload)
			if err != nil || string(canon) != string(tc.d.Payload) {
				t.Fatalf("payload not canonical:\n got %s\nwant %s (%v)", tc.d.Payload, canon, err)
			}
			if err := validatePayload(tc.d.Kind, tc.d.Payload); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestBuildersMatchJCS: the builders' own canonical encoder gives exactly
// what encoding/json + jcs.Transform give, for strings that exercise every
// escaping rule and a sample of random ones.
func TestBuildersMatchJCS(t *testing.T) {
	strs := []string{"", "plain", `quote " backslash \ slash /`, "\x00\x01\x08\t\n\x0b\x0c\r\x1f\x7f",
		"<script>&amp;</script>", "é€😀", "\u2028\u2029", "\ufeffbom", strings.Repeat("long ", 1000)}
	rng := rand.New(rand.NewPCG(1, 2))
	alphabet := []rune{'a', '"', '\\', '\n', '\x00', '\x1f', 0x7f, 'é', '€', '😀', '\u2028', '<', '&', ' '}
	for range 300 {
		var b strings.Builder
		for range rng.IntN(20) {
			b.WriteRune(alphabet[rng.IntN(len(alphabet))])
		}
		strs = append(strs, b.String())
	}
	for _, s := range strs {
		d := ToolCallCompleted(Common{InvocationID: s + "x", RequestID: s, SkillID: "k" + s, TenantID: s, TraceID: s},
			"c"+s, "t"+s, OutcomeError, 1, "", s)
		if d.err != nil {
			t.Fatal(d.err)
		}
		m := map[string]any{"invocation_id": s + "x", "request_id": s, "skill_id": "k" + s, "tenant_id": s, "trace_id": s,
			"call_id": "c" + s, "tool_name": "t" + s, "outcome": "error", "duration_ms": 1, "result_hash": "", "error_message": s}
		if s == "" {
			m["error_message"] = nil
		}
		raw, _ := json.Marshal(m)
		want, err := jcs.Transform(raw)
		if err != nil {
			t.Fatal(err)
		}
		if string(d.Payload) != string(want) {
			t.Fatalf("for %q:\n got %s\nwant %s", s, d.Payload, want)
		}
		if err := validatePayload(d.Kind, d.Payload); err != nil {
			t.Fatalf("for %q: builder accepted what the generic checks refuse: %v", s, err)
		}
	}
}

func FuzzAppendJCSString(f *testing.F) {
	for _, s := range []string{"", "a\"b", "\x00\xff\xfe", "é\u2028", "\xed\xa0\x80"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got := appendJCSString(nil, s)
		canon, err := jcs.Transform(got)
		if err != nil {
			t.Fatalf("%q encoded as %s, which jcs refuses: %v", s, got, err)
		}
		if string(canon) != string(got) {
			t.Fatalf("%q: got %s, canonical %s", s, got, canon)
		}
		// The library's way gives the same bytes, invalid UTF-8 included.
		raw, _ := json.Marshal(s)
		if lib, err := jcs.Transform(raw); err != nil || string(lib) != string(got) {
			t.Fatalf("%q: got %s, encoding/json + jcs %s (%v)", s, got, lib, err)
		}
		var back string
		if err := json.Unmarshal(got, &back); err != nil {
			t.Fatal(err)
		}
		if utf8.ValidString(s) && back != s {
			t.Fatalf("%q round-tripped to %q", s, back)
		}
	})
}

func TestInvalidUTF8IsReplacedNotRefused(t *testing.T) {
	d := InvokedCompleted(common("inv"), OutcomeError, 1, "", "stderr tail: \xff\xfe cut mid-rune \xe2\x82")
	if err := d.Validate(); err != nil {
		t.Fatal(err)
	}
	if !utf8.Valid(d.Payload) || !strings.Contains(string(d.Payload), "\ufffd") {
		t.Fatalf("payload %q", d.Payload)
	}
}

func TestBuildersRejectInvalidInput(t *testing.T) {
	c := common("inv")
	cases := map[string]Draft{
		"empty invocation id":    InvokedStarted(Common{SkillID: "s"}, "1", "p", "", map[string]any{}),
		"empty skill id":         NoConnect(Common{InvocationID: "i"}, 1),
		"uppercase hash":         ToolCallStarted(c, "c", "Read", strings.ToUpper(zeroHash(10))),
		"short hash":             ToolDenied(c, "Bash", "tool_denied", "abc"),
		"unknown outcome":        InvokedCompleted(c, "exploded", 1, "", ""),
		"tool outcome killed":    ToolCallCompleted(c, "c", "Read", OutcomeKilled, 1, "", ""),
		"negative duration":      InvokedCompleted(c, OutcomeSuccess, -1, "", ""),
		"duration beyond 2^53":   InvokedCompleted(c, OutcomeSuccess, 1<<53, "", ""),
		"containment not object": InvokedStarted(c, "1", "p", "", []string{"seccomp"}),
		"containment nil":        InvokedStarted(c, "1", "p", "", nil),
		"containment unencoded":  InvokedStarted(c, "1", "p", "", map[string]any{"f": func() {}}),
		"empty call id":          ToolCallStarted(c, "", "Read", ""),
		"empty tool":             ToolCallCompleted(c, "c", "", OutcomeSuccess, 1, "", ""),
		"empty reason":           ToolDenied(c, "Bash", "", ""),
		"empty signal":           Timeout(c, 1, ""),
		"unknown abuse kind":     ProtocolAbuse(c, "rude", ""),
		"abuse count of a kind":  InvokedCompletedAbuse(c, OutcomeSuccess, 1, "", "", map[string]int64{"rude": 1}),
		"abuse count zero":       InvokedCompletedAbuse(c, OutcomeSuccess, 1, "", "", map[string]int64{AbuseNotJSONRPC: 0}),
		"abuse count negative":   InvokedCompletedAbuse(c, OutcomeSuccess, 1, "", "", map[string]int64{AbuseNotJSONRPC: -1}),
	}
	for name, d := range cases {
		t.Run(name, func(t *testing.T) {
			if err := d.Validate(); !errors.Is(err, ErrInvalidRow) {
				t.Fatalf("Validate = %v, want ErrInvalidRow", err)
			}
			// The generic checks (hand-made drafts, stored rows) refuse
			// the same payload.
			if err := (Draft{Kind: d.Kind, Payload: d.Payload}).Validate(); !errors.Is(err, ErrInvalidRow) {
				t.Fatalf("generic Validate of %s = %v, want ErrInvalidRow", d.Payload, err)
			}
		})
	}
}

// TestHandMadeDraftsValidatedLikeBuilders: a draft not made by a builder (or
// edited after) goes through the generic checks, which refuse what the
// builders refuse, and accept any JSON spelling of a valid payload.
func TestHandMadeDraftsValidatedLikeBuilders(t *testing.T) {
	good := ToolCallStarted(common("inv"), "c", "Read", zeroHash(0xabc))
	var m map[string]any
	if err := json.Unmarshal(good.Payload, &m); err != nil {
		t.Fatal(err)
	}
	with := func(k string, v any) Draft {
		mm := map[string]any{}
		for k, v := range m {
			mm[k] = v
		}
		if v == nil {
			delete(mm, k)
		} else {
			mm[k] = v
		}
		raw, _ := json.Marshal(mm)
		return Draft{Kind: KindToolCallStarted, Payload: raw}
	}
	// Non-canonical spelling of the same payload: accepted, stored canonical.
	spaced := Draft{Kind: KindToolCallStarted, Payload: json.RawMessage(strings.ReplaceAll(string(good.Payload), ",", " ,\n "))}
	if canon, err := spaced.Canonical(); err != nil || string(canon) != string(good.Payload) {
		t.Fatalf("spaced payload: %v, %s", err, canon)
	}
	bad := map[string]Draft{
		"unknown kind":       {Kind: "skill.exploded", Payload: good.Payload},
		"empty kind":         {Payload: good.Payload},
		"extra key":          with("args", map[string]any{"secret": "x"}),
		"missing key":        with("tool_name", nil),
		"hash wrong type":    with("args_hash", 7),
		"uppercase hash":     with("args_hash", strings.ToUpper(zeroHash(0xabc))),
		"empty invocation":   with("invocation_id", ""),
		"number as string":   with("tenant_id", 12),
		"not an object":      {Kind: KindToolCallStarted, Payload: json.RawMessage(`["a"]`)},
		"null":               {Kind: KindToolCallStarted, Payload: json.RawMessage(`null`)},
		"nil":                {Kind: KindToolCallStarted},
		"not JSON":           {Kind: KindToolCallStarted, Payload: json.RawMessage(`{"a":`)},
		"duplicate key":      {Kind: KindToolCallStarted, Payload: json.RawMessage(strings.Replace(string(good.Payload), `{`, `{"tool":"Bash",`, 1))},
		"builder kind moved": {Kind: KindToolDenied, Payload: good.Payload, canon: good.canon, canonKind: good.canonKind},
	}
	for name, d := range bad {
		t.Run(name, func(t *testing.T) {
			if err := d.Validate(); !errors.Is(err, ErrInvalidRow) {
				t.Fatalf("Validate = %v, want ErrInvalidRow", err)
			}
		})
	}
	// A builder's draft whose payload was edited afterwards is re-checked.
	edited := good
	edited.Payload = with("args", "raw secret").Payload
	if err := edited.Validate(); !errors.Is(err, ErrInvalidRow) {
		t.Fatalf("edited builder draft: %v, want ErrInvalidRow", err)
	}
	inPlace := ToolCallStarted(common("inv"), "c", "Read", zeroHash(1))
	copy(inPlace.Payload[strings.Index(string(inPlace.Payload), `"Read"`):], `"Bash"`)
	if canon, err := inPlace.Canonical(); err != nil || !strings.Contains(string(canon), `"Bash"`) {
		t.Fatalf("in-place edit not seen: %v %s", err, canon)
	}
}

func TestComputeHashStable(t *testing.T) {
	r := Row{
		Seq: 42, RowID: "01HZK5Q9XG1V3W1D8F2M6N7P4R", Kind: KindNoConnect, TS: "2026-07-02T10:11:12.123456789Z",
		PrevHash: zeroHash(41),
		Payload:  json.RawMessage(`{"invocation_id":"i","request_id":"r","skill_id":"s","tenant_id":"t","trace_id":"x","waited_ms":60000}`),
	}
	// The canonical text, written out by hand: keys sorted, row_hash absent.
	canon := `{"kind":"skill.no_connect","payload":{"invocation_id":"i","request_id":"r","skill_id":"s","tenant_id":"t","trace_id":"x","waited_ms":60000},` +
		`"prev_hash":"` + zeroHash(41) + `","row_id":"01HZK5Q9XG1V3W1D8F2M6N7P4R","seq":42,"ts":"2026-07-02T10:11:12.123456789Z"}`
	sum := sha256.Sum256([]byte(canon))
	want := hex.EncodeToString(sum[:])
	for range 3 {
		got, err := r.ComputeHash()
		if err != nil || got != want {
			t.Fatalf("ComputeHash = %s, %v; want %s", got, err, want)
		}
	}
	// row_hash is not an input.
	r.RowHash = zeroHash(99)
	if got, _ := r.ComputeHash(); got != want {
		t.Fatal("row_hash changed the hash")
	}
	// The same payload spelled differently hashes the same (Verify refuses
	// the spelling separately).
	spelled := r
	spelled.Payload = json.RawMessage(`{ "waited_ms": 6e4, "trace_id":"x","tenant_id":"t","skill_id":"s","request_id":"r","invocation_id":"i" }`)
	if got, _ := spelled.ComputeHash(); got != want {
		t.Fatal("non-canonical spelling changed the hash")
	}
	// Every field is an input.
	for name, mut := range map[string]func(*Row){
		"seq":       func(r *Row) { r.Seq++ },
		"row_id":    func(r *Row) { r.RowID = "01HZK5Q9XG1V3W1D8F2M6N7P4S" },
		"kind":      func(r *Row) { r.Kind = KindTimeout },
		"ts":        func(r *Row) { r.TS = "2026-07-02T10:11:12.123456780Z" },
		"prev_hash": func(r *Row) { r.PrevHash = zeroHash(40) },
		"payload":   func(r *Row) { r.Payload = json.RawMessage(strings.Replace(string(r.Payload), "60000", "60001", 1)) },
	} {
		rr := r
		mut(&rr)
		if got, _ := rr.ComputeHash(); got == want {
			t.Errorf("changing %s did not change the hash", name)
		}
	}
}

// TestWriterHashMatchesComputeHash: the writer's shortcut is ComputeHash.
func TestWriterHashMatchesComputeHash(t *testing.T) {
	for i, d := range append(invocation("inv-α"), invocation(`inv "quoted" \ `)...) {
		canon, err := d.Canonical()
		if err != nil {
			t.Fatal(err)
		}
		r := Row{Seq: int64(i + 1), RowID: "01HZK5Q9XG1V3W1D8F2M6N7P4R", Kind: d.Kind, TS: "2026-07-02T10:11:12.000000001Z", PrevHash: zeroHash(i), Payload: canon}
		fast, ok := r.writerHash()
		slow, err := r.ComputeHash()
		if !ok || err != nil || fast != slow {
			t.Fatalf("row %d: writerHash %s (%v), ComputeHash %s (%v)", i, fast, ok, slow, err)
		}
	}
	if _, ok := (Row{Kind: `k"`, Payload: json.RawMessage(`{}`)}).writerHash(); ok {
		t.Fatal("writerHash accepted a string that needs escaping")
	}
}

// TestLegacyAndOptionalKeys: rows written before spec §8's tool_name (with
// "tool") and before policy_hash still validate; a payload with both tool
// names, or a malformed policy_hash, does not.
func TestLegacyAndOptionalKeys(t *testing.T) {
	c := common("inv")
	for name, d := range map[string]Draft{
		"started":   ToolCallStarted(c, "c1", "Read", zeroHash(1)),
		"completed": ToolCallCompleted(c, "c1", "Read", OutcomeSuccess, 3, zeroHash(2), ""),
		"denied":    ToolDenied(c, "Bash", "tool_denied", zeroHash(3)),
	} {
		var m map[string]any
		if err := json.Unmarshal(d.Payload, &m); err != nil {
			t.Fatal(err)
		}
		m["tool"] = m["tool_name"]
		raw, _ := json.Marshal(m)
		both := Draft{Kind: d.Kind, Payload: raw}
		if err := both.Validate(); !errors.Is(err, ErrInvalidRow) {
			t.Errorf("%s with tool and tool_name: %v, want ErrInvalidRow", name, err)
		}
		delete(m, "tool_name")
		raw, _ = json.Marshal(m)
		if err := (Draft{Kind: d.Kind, Payload: raw}).Validate(); err != nil {
			t.Errorf("%s written with the legacy key tool: %v", name, err)
		}
		delete(m, "tool")
		raw, _ = json.Marshal(m)
		if err := (Draft{Kind: d.Kind, Payload: raw}).Validate(); !errors.Is(err, ErrInvalidRow) {
			t.Errorf("%s without a tool name: %v, want ErrInvalidRow", name, err)
		}
	}
	old := InvokedStarted(c, "1", "p", zeroHash(1), map[string]any{})
	if strings.Contains(string(old.Payload), "policy_hash") {
		t.Errorf("InvokedStarted without a policy hash writes one: %s", old.Payload)
	}
	if err := (Draft{Kind: old.Kind, Payload: old.Payload}).Validate(); err != nil {
		t.Errorf("started row without policy_hash: %v", err)
	}
	if err := InvokedStartedPolicy(c, "1", "p", "", "NOTAHASH", map[string]any{}).Validate(); !errors.Is(err, ErrInvalidRow) {
		t.Errorf("malformed policy_hash: %v, want ErrInvalidRow", err)
	}
	bad := strings.Replace(string(old.Payload), `{`, `{"policy_hash":"x",`, 1)
	if err := (Draft{Kind: old.Kind, Payload: json.RawMessage(bad)}).Validate(); !errors.Is(err, ErrInvalidRow) {
		t.Errorf("hand-made malformed policy_hash: %v, want ErrInvalidRow", err)
	}
}
