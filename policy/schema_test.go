package policy

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

func TestInputSchema(t *testing.T) {
	const head = "---\nname: s\ndescription: d\n"
	p, err := Parse([]byte(head + "x-input-schema:\n  type: object\n  properties:\n    name: {type: string, maxLength: 8}\n  required: [name]\n  additionalProperties: false\nx-output-schema:\n  type: object\n---\n"))
	if err != nil {
		t.Fatal(err)
	}
	if !json.Valid(p.InputSchema) || !json.Valid(p.OutputSchema) {
		t.Fatalf("schemas not JSON: %s %s", p.InputSchema, p.OutputSchema)
	}
	if err := p.CheckArgs(json.RawMessage(`{"name":"ada"}`)); err != nil {
		t.Fatalf("good args refused: %v", err)
	}
	for _, bad := range []string{`{"name":5}`, `{}`, `{"name":"ada","x":1}`, `{"name":"abcdefghij"}`, `[1]`, ``} {
		if err := p.CheckArgs(json.RawMessage(bad)); !errors.Is(err, ErrArgs) {
			t.Errorf("args %q: err %v, want ErrArgs", bad, err)
		}
	}
	// No schema: any args pass.
	q, err := Parse([]byte(head + "---\n"))
	if err != nil {
		t.Fatal(err)
	}
	if err := q.CheckArgs(json.RawMessage(`[1]`)); err != nil || q.InputSchema != nil {
		t.Fatalf("no schema: %v %s", err, q.InputSchema)
	}
}

func TestInputSchemaInvalid(t *testing.T) {
	const head = "---\nname: s\ndescription: d\n"
	for name, fm := range map[string]string{
		"not a mapping":    "x-input-schema: [1, 2]\n",
		"not an object":    "x-input-schema:\n  type: string\n",
		"bad keyword type": "x-input-schema:\n  type: object\n  properties: 5\n",
		"bad type name":    "x-input-schema:\n  type: objekt\n",
		"remote ref":       "x-input-schema:\n  type: object\n  properties:\n    a: {$ref: 'http://example.com/s.json'}\n",
		"output not map":   "x-output-schema: yes\n",
	} {
		_, err := Parse([]byte(head + fm + "---\n"))
		var fe *FieldError
		if !errors.As(err, &fe) || !errors.Is(err, ErrInvalid) || !strings.HasPrefix(fe.Field, "x-") {
			t.Errorf("%s: err %v, want a FieldError on the schema key", name, err)
		}
	}
}
