package policy

import (
	"encoding/json"
	"fmt"

	"github.com/goccy/go-yaml"
	"github.com/google/jsonschema-go/jsonschema"
)

// MaxSchemaBytes caps the JSON of x-input-schema and x-output-schema.
const MaxSchemaBytes = 64 << 10

// setInputSchema validates x-input-schema: a JSON Schema (2020-12) whose
// type is "object", since MCP tool arguments are always an object.
func setInputSchema(p *Policy, key string, v any) error {
	raw, s, err := schemaOf(key, v)
	if err != nil {
		return err
	}
	if s.Type != "object" {
		return fieldErr(key, fmt.Sprintf(`must have "type": "object" (tool arguments are an object), got %q`, s.Type))
	}
	p.InputSchema = raw
	return nil
}

// setOutputSchema validates x-output-schema: any JSON Schema (2020-12).
func setOutputSchema(p *Policy, key string, v any) error {
	raw, _, err := schemaOf(key, v)
	if err != nil {
		return err
	}
	p.OutputSchema = raw
	return nil
}

// schemaOf turns a frontmatter value into a resolved JSON Schema and its
// JSON text: a mapping whose keywords the schema library knows, with every
// $ref local, so a call's arguments can be checked against it later.
func schemaOf(key string, v any) (json.RawMessage, *jsonschema.Schema, error) {
	m, ok := v.(yaml.MapSlice)
	if !ok {
		return nil, nil, fieldErr(key, "must be a JSON Schema object (a mapping), got "+describe(v))
	}
	plain, err := plainValue(key, m)
	if err != nil {
		return nil, nil, err
	}
	raw, err := json.Marshal(plain)
	if err != nil {
		return nil, nil, fieldErr(key, fmt.Sprintf("is not expressible as JSON: %v", err))
	}
	if len(raw) > MaxSchemaBytes {
		return nil, nil, fieldErr(key, fmt.Sprintf("is larger than %d KiB as JSON", MaxSchemaBytes>>10))
	}
	var s jsonschema.Schema
	if err := json.Unmarshal(raw, &s); err != nil {
		return nil, nil, fieldErr(key, fmt.Sprintf("is not a JSON Schema: %v", err))
	}
	if _, err := s.Resolve(nil); err != nil {
		return nil, nil, fieldErr(key, fmt.Sprintf("is not a usable JSON Schema: %v", err))
	}
	return raw, &s, nil
}

// plainValue converts an ordered YAML value into JSON's shapes: mappings
// with string keys become map[string]any.
func plainValue(key string, v any) (any, error) {
	switch v := v.(type) {
	case yaml.MapSlice:
		m := make(map[string]any, len(v))
		for _, it := range v {
			k, ok := it.Key.(string)
			if !ok {
				return nil, fieldErr(key, fmt.Sprintf("has a key that is not a string: %v", it.Key))
			}
			pv, err := plainValue(key, it.Value)
			if err != nil {
				return nil, err
			}
			m[k] = pv
		}
		return m, nil
	case []any:
		out := make([]any, len(v))
		for i, e := range v {
			pv, err := plainValue(key, e)
			if err != nil {
				return nil, err
			}
			out[i] = pv
		}
		return out, nil
	default:
		return v, nil
	}
}

// CheckArgs checks a call's arguments (one JSON value; empty means {})
// against the input schema; nil when the skill has none.
func (p *Policy) CheckArgs(args json.RawMessage) error {
	if len(p.InputSchema) == 0 {
		return nil
	}
	var s jsonschema.Schema
	if err := json.Unmarshal(p.InputSchema, &s); err != nil {
		return fmt.Errorf("x-input-schema: %w", err)
	}
	rs, err := s.Resolve(nil)
	if err != nil {
		return fmt.Errorf("x-input-schema: %w", err)
	}
	var v any = map[string]any{}
	if len(args) > 0 {
		if err := json.Unmarshal(args, &v); err != nil {
			return fmt.Errorf("%w: args: not JSON: %w", ErrArgs, err)
		}
	}
	if err := rs.Validate(v); err != nil {
		return fmt.Errorf("%w: %w", ErrArgs, err)
	}
	return nil
}
