package broker

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"cyberos.dev/policy"
	"cyberos.dev/supervisor/internal/tools"
	"cyberos.dev/wire"
)

// JSON-RPC 2.0 error codes, as package wire declares them for both sides.
const (
	CodeParseError     = wire.CodeParseError
	CodeInvalidRequest = wire.CodeInvalidRequest
	CodeMethodNotFound = wire.CodeMethodNotFound
	CodeInvalidParams  = wire.CodeInvalidParams
	CodeInternal       = wire.CodeInternal
	CodeToolError      = wire.CodeToolError
)

// Limits on a request's shape.
const (
	// MaxDepth bounds JSON nesting (objects and arrays) in a request body.
	// It is checked by a flat scan before anything is decoded.
	MaxDepth = 64
	// MaxBatch is the largest batch the broker serves.
	MaxBatch = 100
)

// Reasons the broker gives in data.reason besides policy.Reason.
const (
	ReasonResponseTooLarge = wire.ReasonResponseTooLarge
	ReasonAuditUnavailable = wire.ReasonAuditUnavailable
	ReasonToolError        = wire.ReasonToolError
	ReasonTimeout          = wire.ReasonTimeout
	ReasonInvalidParams    = wire.ReasonInvalidParams
	ReasonBatchTooLarge    = wire.ReasonBatchTooLarge
	ReasonTooDeep          = wire.ReasonNestingTooDeep
	ReasonAuditCapReached  = wire.ReasonAuditCapReached
)

// Error classes of the broker itself; the tools' classes live in package
// tools, refusals are *policy.Denial. errorObject maps all of them.
var (
	errParse            = errors.New("parse error")
	errInvalidRequest   = errors.New("invalid request")
	errBatchTooLarge    = fmt.Errorf("%w: batch over %d entries", errInvalidRequest, MaxBatch)
	errEmptyBatch       = fmt.Errorf("%w: empty batch", errInvalidRequest)
	errTooDeep          = fmt.Errorf("%w: nesting deeper than %d", errInvalidRequest, MaxDepth)
	errMethodNotFound   = errors.New("method not found")
	errResponseTooLarge = errors.New("response too large")
	errAuditUnavailable = errors.New("audit unavailable")
	errToolPanic        = errors.New("tool panicked")
	errAuditCap         = errors.New("audit row cap reached")
)

// paramsError is an invalid-params finding of the broker's own decoding;
// its text is ours (no host paths, no errno) and is shown to the skill.
type paramsError struct{ msg string }

func (e *paramsError) Error() string        { return "invalid params: " + e.msg }
func (e *paramsError) Is(target error) bool { return target == tools.ErrInvalidParams }

func invalidParams(format string, a ...any) error {
	return &paramsError{msg: fmt.Sprintf(format, a...)}
}

// The error object is defined once, in wire (the stdlib-only package
// skillclient also uses), so the broker and its clients cannot drift apart.
type (
	// RPCError is a JSON-RPC error object.
	RPCError = wire.RPCError
	// ErrorData is the error object's data member.
	ErrorData = wire.ErrorData
)

// errorObject is the one place an error becomes what a skill sees. Messages
// are fixed per class, except the broker's own params findings and a
// Denial's Detail (both documented to hold only what the skill sent), so no
// host path or errno reaches the sandbox.
func errorObject(err error) *RPCError {
	var denial *policy.Denial
	var params *paramsError
	switch {
	case errors.As(err, &denial):
		return &RPCError{Code: CodeInternal, Message: string(denial.Reason),
			Data: &ErrorData{Reason: string(denial.Reason), Tool: string(denial.Tool), Detail: denial.Detail}}
	case errors.Is(err, ErrTooLarge):
		return &RPCError{Code: CodeInternal, Message: string(policy.ReasonTooLarge),
			Data: &ErrorData{Reason: string(policy.ReasonTooLarge), Detail: fmt.Sprintf("request over %d bytes", MaxRequest)}}
	case errors.Is(err, errResponseTooLarge):
		return &RPCError{Code: CodeInternal, Message: ReasonResponseTooLarge,
			Data: &ErrorData{Reason: ReasonResponseTooLarge, Detail: fmt.Sprintf("response over %d bytes", MaxResponse)}}
	case errors.Is(err, errAuditCap):
		return &RPCError{Code: CodeInternal, Message: ReasonAuditCapReached, Data: &ErrorData{Reason: ReasonAuditCapReached,
			Detail: "this invocation reached its cap on audit rows and is being ended"}}
	case errors.Is(err, errAuditUnavailable):
		return &RPCError{Code: CodeInternal, Message: ReasonAuditUnavailable, Data: &ErrorData{Reason: ReasonAuditUnavailable}}
	case errors.Is(err, errToolPanic):
		return &RPCError{Code: CodeInternal, Message: "tool failed", Data: &ErrorData{Reason: ReasonToolError}}
	case errors.Is(err, errParse):
		return &RPCError{Code: CodeParseError, Message: "Parse error"}
	case errors.Is(err, errBatchTooLarge):
		return &RPCError{Code: CodeInvalidRequest, Message: "Invalid Request",
			Data: &ErrorData{Reason: ReasonBatchTooLarge, Detail: fmt.Sprintf("at most %d entries", MaxBatch)}}
	case errors.Is(err, errTooDeep):
		return &RPCError{Code: CodeInvalidRequest, Message: "Invalid Request",
			Data: &ErrorData{Reason: ReasonTooDeep, Detail: fmt.Sprintf("at most %d levels", MaxDepth)}}
	case errors.Is(err, errInvalidRequest):
		return &RPCError{Code: CodeInvalidRequest, Message: "Invalid Request"}
	case errors.Is(err, errMethodNotFound):
		return &RPCError{Code: CodeMethodNotFound, Message: "Method not found"}
	case errors.As(err, &params):
		return &RPCError{Code: CodeInvalidParams, Message: "Invalid params: " + params.msg}
	}
	// Tool failures: the class decides the code; a tools.SkillError's own
	// words (written for the skill, no host text) go along as the detail.
	var detail string
	var se *tools.SkillError
	if errors.As(err, &se) {
		detail = se.Msg
	}
	switch {
	case errors.Is(err, tools.ErrInvalidParams):
		e := &RPCError{Code: CodeInvalidParams, Message: "Invalid params"}
		if detail != "" {
			e.Message += ": " + detail
			e.Data = &ErrorData{Reason: ReasonInvalidParams, Detail: detail}
		}
		return e
	case errors.Is(err, tools.ErrTimeout):
		data := &ErrorData{Reason: ReasonTimeout, Detail: detail}
		var pe *partialError
		if errors.As(err, &pe) {
			data.Partial = pe.partial
		}
		return &RPCError{Code: CodeToolError, Message: "tool timed out", Data: data}
	case errors.Is(err, tools.ErrNotFound):
		return &RPCError{Code: CodeToolError, Message: "not found", Data: &ErrorData{Reason: ReasonToolError, Detail: detail}}
	case errors.Is(err, tools.ErrTooLarge):
		return &RPCError{Code: CodeToolError, Message: "too large", Data: &ErrorData{Reason: ReasonToolError, Detail: detail}}
	default: // tools.ErrFailed and anything unclassified
		return &RPCError{Code: CodeToolError, Message: "tool failed", Data: &ErrorData{Reason: ReasonToolError, Detail: detail}}
	}
}

// request is one decoded JSON-RPC request. id is nil for a notification
// (no "id" member), else the raw id (a string, a number or null).
type request struct {
	id     json.RawMessage
	method string
	params json.RawMessage // nil when absent
}

func (r *request) notification() bool { return r.id == nil }

// response is one JSON-RPC response. ID is "null" when the request's id
// could not be read.
type response struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      json.RawMessage `json:"id"`
	Result  json.RawMessage `json:"result,omitempty"`
	Error   *RPCError       `json:"error,omitempty"`
}

var nullID = json.RawMessage("null")

// tooDeep reports whether the JSON text nests objects and arrays deeper
// than limit. It is a flat byte scan that skips strings: no recursion, no
// allocation, so it runs before any decoder sees hostile input. It does not
// validate; the decoder that follows does.
func tooDeep(b []byte, limit int) bool {
	depth := 0
	inString, escaped := false, false
	for _, c := range b {
		if inString {
			switch {
			case escaped:
				escaped = false
			case c == '\\':
				escaped = true
			case c == '"':
				inString = false
			}
			continue
		}
		switch c {
		case '"':
			inString = true
		case '{', '[':
			depth++
			if depth > limit {
				return true
			}
		case '}', ']':
			depth--
		}
	}
	return false
}

// member is one key/value of a JSON object, in text order.
type member struct {
	key string
	val json.RawMessage
}

// errNotObject: the text is valid JSON but not an object.
var errNotObject = errors.New("not a JSON object")

// objectMembers splits a JSON object (already known to be valid JSON) into
// its members, refusing duplicate keys: two "id"s or two "tool"s are an
// ambiguity a strict decoder does not resolve silently. Every request and
// its params pass here, so the usual object (ASCII keys without escapes,
// none repeated) is split by scanMembers; anything else by the decoder.
func objectMembers(raw []byte) ([]member, error) {
	if out, ok := scanMembers(raw); ok {
		return out, nil
	}
	return decodeMembers(raw)
}

// scanMembers splits a valid JSON object whose keys are plain ASCII
// without escapes, none repeated; ok is false for anything else.
func scanMembers(raw []byte) (out []member, ok bool) {
	if !json.Valid(raw) {
		return nil, false
	}
	i := skipSpace(raw, 0)
	if raw[i] != '{' {
		return nil, false
	}
	if i = skipSpace(raw, i+1); raw[i] == '}' {
		return nil, skipSpace(raw, i+1) == len(raw)
	}
	for {
		// A key: valid JSON puts a string here, then ':'.
		end := i + 1
		for ; raw[end] != '"'; end++ {
			if c := raw[end]; c == '\\' || c >= 0x80 {
				return nil, false
			}
		}
		key := string(raw[i+1 : end])
		for _, m := range out {
			if m.key == key {
				return nil, false
			}
		}
		i = skipSpace(raw, skipSpace(raw, end+1)+1)
		start := i
		i = skipValue(raw, i)
		out = append(out, member{key, raw[start:i]})
		if i = skipSpace(raw, i); raw[i] == ',' {
			i = skipSpace(raw, i+1)
			continue
		}
		// '}'
		return out, skipSpace(raw, i+1) == len(raw)
	}
}

// skipSpace returns the index of the first byte at or after i that is not
// JSON whitespace (len(b) when none).
func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\r' || b[i] == '\n') {
		i++
	}
	return i
}

// skipValue returns the index just after the valid JSON value starting at i.
func skipValue(b []byte, i int) int {
	switch b[i] {
	case '"':
		return skipString(b, i)
	case '{', '[':
		depth := 0
		for i < len(b) {
			switch b[i] {
			case '"':
				i = skipString(b, i)
				continue
			case '{', '[':
				depth++
			case '}', ']':
				if depth--; depth == 0 {
					return i + 1
				}
			}
			i++
		}
		return i
	default: // a number, true, false or null
		for ; i < len(b); i++ {
			switch b[i] {
			case ',', '}', ']', ' ', '\t', '\r', '\n':
				return i
			}
		}
		return i
	}
}

// skipString returns the index just after the JSON string starting at i.
func skipString(b []byte, i int) int {
	for i++; i < len(b); i++ {
		switch b[i] {
		case '\\':
			i++
		case '"':
			return i + 1
		}
	}
	return i
}

// decodeMembers is objectMembers with encoding/json's decoder: keys with
// escapes or non-ASCII bytes, duplicates and their errors.
func decodeMembers(raw []byte) ([]member, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	tok, err := dec.Token()
	if err != nil {
		return nil, err
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return nil, errNotObject
	}
	var out []member
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, err
		}
		key, ok := tok.(string)
		if !ok {
			return nil, errNotObject
		}
		for _, m := range out {
			if m.key == key {
				return nil, fmt.Errorf("%w %q", ErrDuplicateKey, key)
			}
		}
		var val json.RawMessage
		if err := dec.Decode(&val); err != nil {
			return nil, err
		}
		out = append(out, member{key, val})
	}
	if _, err := dec.Token(); err != nil { // the closing '}'
		return nil, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errNotObject
	}
	return out, nil
}

// jsonKind is the first byte of a valid JSON value: '{', '[', '"', 't',
// 'f', 'n' or a number's first character.
func jsonKind(raw []byte) byte {
	raw = bytes.TrimLeft(raw, " \t\r\n")
	if len(raw) == 0 {
		return 0
	}
	return raw[0]
}

// decodeRequest reads one request object strictly: "jsonrpc" exactly
// "2.0", "method" a string, "id" a string, number or null (absent: a
// notification), "params" an object or array when present, nothing else.
// When the id was readable it is returned with the error, so the error
// response can carry it.
func decodeRequest(raw json.RawMessage) (*request, error) {
	members, err := objectMembers(raw)
	if err != nil {
		// Flattened: an unreadable request is invalid_request whatever
		// objectMembers saw (errorObject would answer errParse or errTooDeep first).
		return &request{id: nullID}, fmt.Errorf("%w: %v", errInvalidRequest, err) //nolint:errorlint // see above
	}
	req := &request{}
	var version, method json.RawMessage
	for _, m := range members {
		switch m.key {
		case "id":
			req.id = m.val
		case "jsonrpc":
			version = m.val
		case "method":
			method = m.val
		case "params":
			req.params = m.val
		}
	}
	// The id first: if it is unusable the response's id is null.
	if req.id != nil {
		switch jsonKind(req.id) {
		case '"', 'n', '-', '0', '1', '2', '3', '4', '5', '6', '7', '8', '9':
		default:
			return &request{id: nullID}, fmt.Errorf("%w: id must be a string, a number or null", errInvalidRequest)
		}
	}
	fail := func(why string) (*request, error) {
		id := req.id
		if id == nil {
			id = nullID
		}
		return &request{id: id}, fmt.Errorf("%w: %s", errInvalidRequest, why)
	}
	for _, m := range members {
		switch m.key {
		case "id", "jsonrpc", "method", "params":
		default:
			return fail(fmt.Sprintf("unexpected member %q", m.key))
		}
	}
	if string(version) != `"2.0"` {
		return fail(`jsonrpc must be "2.0"`)
	}
	if method == nil || jsonKind(method) != '"' {
		return fail("method must be a string")
	}
	if err := json.Unmarshal(method, &req.method); err != nil {
		return fail("method must be a string")
	}
	if req.params != nil {
		if k := jsonKind(req.params); k != '{' && k != '[' {
			return fail("params must be an object or an array")
		}
	}
	return req, nil
}
