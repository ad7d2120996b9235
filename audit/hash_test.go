package audit

import (
	"crypto/sha256"
	"encoding/hex"
	"testing"
)

// Vectors from RFC 8785 (§3.2.2 sorting/escaping, §3.2.2.3 numbers, and the
// appendix's unicode/whitespace examples): the canonical text each input must
// become. The hash is checked against SHA-256 of that text, so a library that
// canonicalised wrongly would fail here.
func TestHashJSONMatchesRFC8785Vectors(t *testing.T) {
	cases := []struct{ name, in, canon string }{
		{"key order and whitespace", `{ "b" : 2, "a" : 1 }`, `{"a":1,"b":2}`},
		{"nested sort", `{"z":{"y":1,"x":[3,{"d":1,"c":2}]},"a":null}`, `{"a":null,"z":{"x":[3,{"c":2,"d":1}],"y":1}}`},
		{"numbers", `[1E30, 4.50, 2e-3, 0.000001, 1e-7, -0, 333333333.33333329]`, `[1e+30,4.5,0.002,0.000001,1e-7,0,333333333.3333333]`},
		{"unicode escapes", `{"\u20ac":"\u00e9\u000a\u001f\/"}`, "{\"€\":\"é\\n\\u001f/\"}"},
		{"rfc 8785 3.2.2 example", `{"numbers":[333333333.33333329,1E30,4.50,2e-3,0.000000000000000000000000001],"string":"\u20ac$\u000F\u000aA'\u0042\u0022\u005c\\\"\/","literals":[null,true,false]}`,
			`{"literals":[null,true,false],"numbers":[333333333.3333333,1e+30,4.5,0.002,1e-27],"string":"€$\u000f\nA'B\"\\\\\"/"}`},
		{"utf-16 key order", `{"\u20ac":1,"\r":2,"\ud83d\ude00":3,"1":4,"\u00f6":5}`, "{\"\\r\":2,\"1\":4,\"ö\":5,\"€\":1,\"😀\":3}"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := HashJSON([]byte(c.in))
			if err != nil {
				t.Fatal(err)
			}
			sum := sha256.Sum256([]byte(c.canon))
			if want := hex.EncodeToString(sum[:]); got != want {
				t.Fatalf("hash of %s = %s, want sha256(%s) = %s", c.in, got, c.canon, want)
			}
		})
	}
}

func TestHashJSONRejectsInvalid(t *testing.T) {
	for _, in := range []string{`{"a":}`, `[1,`, ``, `{"a":1}{"b":2}`} {
		if _, err := HashJSON([]byte(in)); err == nil {
			t.Errorf("HashJSON(%q) succeeded, want an error", in)
		}
	}
}
