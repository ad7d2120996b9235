package tools

import (
	"context"
	"fmt"

	"cyberos.dev/memory"
	"cyberos.dev/policy"
)

// memoryEmit is MemoryEmit {path, body} → {"path","content_hash","body_withheld"}.
type memoryEmit struct{}

// NewMemoryEmit returns the MemoryEmit tool.
func NewMemoryEmit() Tool { return memoryEmit{} }

func (memoryEmit) Name() policy.Tool { return policy.ToolMemoryEmit }

func (memoryEmit) Description() string {
	return fmt.Sprintf(`Create or replace one memory document (UTF-8 body, at most %d bytes). Args {"path","body"}; `+
		`result {"path","content_hash","body_withheld"}. A compensation skill's body is hashed, never stored.`, memory.MaxBodyBytes)
}

type memoryEmitArgs struct {
	Path *string `json:"path"`
	Body *string `json:"body"`
}

type memoryEmitResult struct {
	Path         string `json:"path"` // canonical
	ContentHash  string `json:"content_hash"`
	BodyWithheld bool   `json:"body_withheld"`
}

func (m memoryEmit) Call(ctx context.Context, c *Call) (any, error) {
	env, err := memoryEnv(c)
	if err != nil {
		return nil, err
	}
	var a memoryEmitArgs
	if err := unmarshalArgs(c.Args, &a); err != nil {
		return nil, err
	}
	if a.Path == nil || a.Body == nil {
		return nil, skillError(ErrInvalidParams, "path and body are required")
	}
	if env.Policy == nil {
		// Compensation is read from the policy; without one, whether the
		// body may be stored is unknown.
		return nil, skillError(ErrFailed, "no policy for this invocation")
	}
	p, err := env.Enforcer.CheckMemory(m.Name(), *a.Path)
	if err != nil {
		return nil, err
	}
	d, err := env.Memory.Emit(ctx, memory.Entry{
		Tenant:       env.TenantID,
		Path:         p,
		Body:         *a.Body,
		TraceID:      c.TraceID, // spec AC 19: the document carries the call's trace id
		InvocationID: env.InvocationID,
		SkillID:      env.SkillID,
		Compensation: env.Policy.Compensation,
		Scopes:       env.Enforcer.MemoryScopes(m.Name()),
	})
	if err != nil {
		return nil, memoryErr(m.Name(), p, err)
	}
	return memoryEmitResult{Path: d.Path, ContentHash: d.ContentHash, BodyWithheld: d.BodyWithheld}, nil
}
