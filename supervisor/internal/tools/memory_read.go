package tools

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strconv"
	"strings"
	"sync"

	"cyberos.dev/memory"
	"cyberos.dev/policy"
)

// memoryRead is MemoryRead {path} → {"body","content_hash"}.
type memoryRead struct{}

// NewMemoryRead returns the MemoryRead tool.
func NewMemoryRead() Tool { return memoryRead{} }

func (memoryRead) Name() policy.Tool { return policy.ToolMemoryRead }

func (memoryRead) Description() string {
	return `Read one memory document. Args {"path"}; result {"body","content_hash"} ` +
		`("body_withheld": true, with an empty body, for a compensation document).`
}

type memoryReadArgs struct {
	Path *string `json:"path"`
}

type memoryReadResult struct {
	Body         string `json:"body"`
	ContentHash  string `json:"content_hash"`
	BodyWithheld bool   `json:"body_withheld,omitempty"`
}

func (m memoryRead) Call(ctx context.Context, c *Call) (any, error) {
	env, err := memoryEnv(c)
	if err != nil {
		return nil, err
	}
	var a memoryReadArgs
	if err := unmarshalArgs(c.Args, &a); err != nil {
		return nil, err
	}
	if a.Path == nil {
		return nil, skillError(ErrInvalidParams, "path is required")
	}
	p, err := env.Enforcer.CheckMemory(m.Name(), *a.Path)
	if err != nil {
		return nil, err
	}
	// The store checks the scope again, against the same canonical globs the
	// enforcer used: two independent checks, both default deny.
	d, err := env.Memory.Read(ctx, env.TenantID, p, env.Enforcer.MemoryScopes(m.Name()))
	if err != nil {
		return nil, memoryErr(m.Name(), p, err)
	}
	return encodeMemoryRead(ctx, c, memoryReadResult{Body: d.Body, ContentHash: d.ContentHash, BodyWithheld: d.BodyWithheld})
}

// encodeMemoryRead writes r as canonical JSON, its size reserved first: a
// body of control characters is six times its size in JSON.
func encodeMemoryRead(ctx context.Context, c *Call, r memoryReadResult) (any, error) {
	size := len(`{"body":,"content_hash":}`) + escapedLen(r.Body) + escapedLen(r.ContentHash)
	if r.BodyWithheld {
		size += len(`,"body_withheld":true`)
	}
	if err := c.reserve(ctx, int64(size)); err != nil {
		return nil, err
	}
	w := newCanonWriter(size)
	w.raw(`{"body":`)
	str(w, r.Body)
	if r.BodyWithheld {
		w.raw(`,"body_withheld":true`)
	}
	w.raw(`,"content_hash":`)
	str(w, r.ContentHash)
	w.raw("}")
	out, ok := w.done()
	if !ok {
		c.release(int64(size))
		return nil, fmt.Errorf("%w: MemoryRead's result is not the size computed for it", ErrFailed)
	}
	return out, nil
}

// memoryEnv returns the call's Env when it has what the Memory* tools need.
// A missing enforcer is a wiring fault, never an open door.
func memoryEnv(c *Call) (*Env, error) {
	switch {
	case c == nil || c.Env == nil || c.Env.Enforcer == nil:
		return nil, skillError(ErrFailed, "no enforcer for this invocation")
	case c.Env.Memory == nil:
		return nil, skillError(ErrFailed, "no memory store")
	}
	return c.Env, nil
}

// memoryErr maps a memory.Store error onto this package's classes. ErrScope
// becomes a Denial like the enforcer's own, so a refusal looks the same
// whichever of the two checks made it; so does the tenant's write rate.
// A limit the call hit is named to the skill (memory's messages for these
// classes hold only figures and what the skill sent). path is the
// canonical path (or "" for a search).
func memoryErr(t policy.Tool, path string, err error) error {
	switch {
	case errors.Is(err, memory.ErrScope):
		d := &policy.Denial{Reason: policy.ReasonScope, Tool: t, Detail: "no allowed memory scope"}
		if path != "" {
			d.Detail = "path " + strconv.Quote(path) + " is not in allowed_memory_scopes"
		}
		return d
	case errors.Is(err, memory.ErrRateLimited):
		return &policy.Denial{Reason: policy.ReasonRateLimited, Tool: t, Detail: err.Error()}
	case errors.Is(err, memory.ErrNotFound):
		return fmt.Errorf("%w: %w", ErrNotFound, err)
	case errors.Is(err, memory.ErrInvalid):
		return skillError(ErrInvalidParams, err.Error())
	case errors.Is(err, memory.ErrTooLarge):
		return skillError(ErrTooLarge, err.Error())
	case errors.Is(err, memory.ErrTimeout):
		return fmt.Errorf("%w (%w)", skillError(ErrTimeout,
			"the memory call ran past the store's statement timeout, or waited that long for a slot of this tenant"), err)
	case errors.Is(err, context.DeadlineExceeded):
		return fmt.Errorf("%w: %w", ErrTimeout, err)
	case errors.Is(err, memory.ErrUnavailable):
		// A fleet's PostgreSQL away, SQLite busy: the skill may try again;
		// the cause stays in the supervisor's log and the audit row.
		return fmt.Errorf("%w (%w)", skillError(ErrFailed, "the memory store is unavailable; try again later"), err)
	case errors.Is(err, memory.ErrFault):
		// A retry will not help: the operator has to look (logged at WARN).
		return fmt.Errorf("%w (%w: %w)", skillError(ErrFailed, "the memory store failed this call; a retry will not help"), ErrHostFault, err)
	}
	return fmt.Errorf("%w: %w", ErrFailed, err)
}

// unmarshalArgs decodes a tool's args strictly (every tool in this package
// uses it) into v, a pointer to a struct whose fields all carry json tags:
// one JSON object, nothing after it, every top-level key exactly one of v's
// json names (encoding/json alone would also take "PATH" for "path"), and no
// key given twice at any depth. Near-duplicates are refused because the audit
// row hashes the args as the skill sent them while encoding/json acts on the
// last match only. Every failure is ErrInvalidParams.
func unmarshalArgs(raw json.RawMessage, v any) error {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || raw[0] != '{' {
		return skillError(ErrInvalidParams, "args must be a JSON object")
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidParams, err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return skillError(ErrInvalidParams, "data after the args object")
	}
	// The args are well-formed JSON now, so the walk below only fails on a
	// key that is not exact or not unique.
	if err := checkKeys(json.NewDecoder(bytes.NewReader(raw)), jsonNames(v)); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidParams, err)
	}
	return nil
}

// jsonNames returns the json tag names of the fields of the struct v points
// to. Anything else has no names, so every key is refused (fail closed).
// The names are computed once per type (every tool call decodes its args
// into one of a few types); callers only read the map.
func jsonNames(v any) map[string]bool {
	t := reflect.TypeOf(v)
	if t == nil {
		return map[string]bool{}
	}
	if names, ok := jsonNamesByType.Load(t); ok {
		return names.(map[string]bool)
	}
	names := jsonNamesOf(t)
	jsonNamesByType.Store(t, names)
	return names
}

// jsonNamesByType caches jsonNamesOf by the args' type.
var jsonNamesByType sync.Map // reflect.Type -> map[string]bool

func jsonNamesOf(t reflect.Type) map[string]bool {
	names := map[string]bool{}
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t == nil || t.Kind() != reflect.Struct {
		return names
	}
	for i := 0; i < t.NumField(); i++ {
		name, _, _ := strings.Cut(t.Field(i).Tag.Get("json"), ",")
		if name != "" && name != "-" {
			names[name] = true
		}
	}
	return names
}

// checkKeys walks one well-formed JSON value: an object's keys must be
// unique, and when names is non-nil (the top level) each key must be in it.
func checkKeys(dec *json.Decoder, names map[string]bool) error {
	tok, err := dec.Token()
	if err != nil {
		return err
	}
	switch tok {
	case json.Delim('{'):
		seen := map[string]bool{}
		for dec.More() {
			k, err := dec.Token()
			if err != nil {
				return err
			}
			key, _ := k.(string)
			switch {
			case names != nil && !names[key]:
				return fmt.Errorf("unknown field %q", key)
			case seen[key]:
				return fmt.Errorf("key %q is given twice", key)
			}
			seen[key] = true
			if err := checkKeys(dec, nil); err != nil {
				return err
			}
		}
		_, err = dec.Token()
	case json.Delim('['):
		for dec.More() {
			if err := checkKeys(dec, nil); err != nil {
				return err
			}
		}
		_, err = dec.Token()
	}
	return err
}
