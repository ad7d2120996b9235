package mcpclient

import (
	"encoding/json"
	"fmt"
	"unicode"
	"unicode/utf8"

	"github.com/google/jsonschema-go/jsonschema"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"cyberos.dev/audit"
	"cyberos.dev/policy"
)

// definition is what a tool's definition hash covers.
type definition struct {
	Name        string          `json:"name"`
	Description string          `json:"description"`
	InputSchema json.RawMessage `json:"inputSchema"`
	Annotations any             `json:"annotations"`
}

// DefinitionHash is the hex SHA-256 of the RFC 8785 canonical JSON of a
// tool's name, description, inputSchema and annotations.
func DefinitionHash(name, description string, inputSchema json.RawMessage, annotations any) (string, error) {
	if len(inputSchema) == 0 {
		inputSchema = json.RawMessage("null")
	}
	raw, err := json.Marshal(definition{name, description, inputSchema, annotations})
	if err != nil {
		return "", err
	}
	return audit.HashJSON(raw)
}

// register checks one listed tool and builds its Tool: a name in the MCP
// alphabet that fits mcp__<server>__<tool>, a description of at most
// MaxDescription bytes of printable text (newlines and tabs allowed, no
// other control or format characters: they hide instructions from the
// operator who reads the list), an object inputSchema that resolves. Then
// its definition hash is judged against the approved one.
func (s *Server) register(t *mcp.Tool) (*Tool, error) {
	if t == nil {
		return nil, fmt.Errorf("%w: a null tool", ErrRefused)
	}
	if !policy.ValidMCPToolName(t.Name) {
		return nil, fmt.Errorf("%w: tool name %.200q: must be 1..%d of [A-Za-z0-9_.-]", ErrRefused, t.Name, policy.MaxMCPToolName)
	}
	if len(t.Description) > MaxDescription {
		return nil, fmt.Errorf("%w: tool %s: description of %d bytes, over %d", ErrRefused, t.Name, len(t.Description), MaxDescription)
	}
	if r, ok := badText(t.Description); !ok {
		return nil, fmt.Errorf("%w: tool %s: description holds the control or format character %U", ErrRefused, t.Name, r)
	}
	schema, err := json.Marshal(t.InputSchema)
	if err != nil {
		return nil, fmt.Errorf("%w: tool %s: inputSchema does not encode: %w", ErrRefused, t.Name, err)
	}
	if len(schema) > MaxSchema {
		return nil, fmt.Errorf("%w: tool %s: inputSchema of %d bytes, over %d", ErrRefused, t.Name, len(schema), MaxSchema)
	}
	resolved, err := resolveSchema(schema)
	if err != nil {
		return nil, fmt.Errorf("%w: tool %s: inputSchema: %w", ErrRefused, t.Name, err)
	}
	var ann any
	if t.Annotations != nil {
		ann = t.Annotations
	}
	hash, err := DefinitionHash(t.Name, t.Description, schema, ann)
	if err != nil {
		return nil, fmt.Errorf("%w: tool %s: definition does not canonicalise: %w", ErrRefused, t.Name, err)
	}
	tool := &Tool{srv: s, name: t.Name, full: policy.MCPTool(s.o.Name, t.Name), desc: t.Description,
		schema: schema, resolved: resolved, defHash: hash}
	switch st, err := s.o.Approvals.Judge(s.o.Name, t.Name, hash, s.o.AutoApprove); {
	case err != nil:
		// Not recorded: refuse rather than trust an unrecorded definition.
		tool.changed.Store(true)
		s.log.Error("mcp: approval record not written; tool refused", "tool", t.Name, "err", err)
	case st == JudgedChanged:
		tool.changed.Store(true)
		s.log.Warn("mcp: tool definition changed since approved; calls refused as tool_definition_changed until `cyberos mcp approve`",
			"tool", t.Name, "definition_hash", hash)
	case st == JudgedAutoApproved:
		s.log.Warn("mcp: tool definition changed; accepted (approve: auto)", "tool", t.Name, "definition_hash", hash)
	}
	return tool, nil
}

// badText returns the first control (besides \t, \n, \r) or format
// character of s, or a rune error; ok when there is none.
func badText(s string) (rune, bool) {
	for i, r := range s {
		if r == utf8.RuneError {
			if _, n := utf8.DecodeRuneInString(s[i:]); n <= 1 {
				return r, false
			}
		}
		if r == '\t' || r == '\n' || r == '\r' {
			continue
		}
		if unicode.IsControl(r) || unicode.Is(unicode.Cf, r) {
			return r, false
		}
	}
	return 0, true
}

// resolveSchema reads an inputSchema: a JSON object whose type is object
// (MCP requires it), resolved for validation without fetching anything.
func resolveSchema(raw json.RawMessage) (*jsonschema.Resolved, error) {
	var top map[string]json.RawMessage
	if err := json.Unmarshal(raw, &top); err != nil || top == nil {
		return nil, fmt.Errorf("must be a JSON object")
	}
	if string(top["type"]) != `"object"` {
		return nil, fmt.Errorf(`type must be "object"`)
	}
	// The servers' schemas name the draft they were written for (often
	// draft-07); the keywords tools use are the same in 2020-12, which the
	// library validates.
	delete(top, "$schema")
	stripped, err := json.Marshal(top)
	if err != nil {
		return nil, err
	}
	var sch jsonschema.Schema
	if err := json.Unmarshal(stripped, &sch); err != nil {
		return nil, err
	}
	return sch.Resolve(nil) // no Loader: a remote $ref is an error
}
