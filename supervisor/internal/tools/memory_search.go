package tools

import (
	"context"
	"fmt"

	"cyberos.dev/memory"
	"cyberos.dev/policy"
)

// DefaultSearchLimit is MemorySearch's limit when the args give none.
const DefaultSearchLimit = 10

// memorySearch is MemorySearch {query, limit?} → {"hits":[…]}.
type memorySearch struct{}

// NewMemorySearch returns the MemorySearch tool.
func NewMemorySearch() Tool { return memorySearch{} }

func (memorySearch) Name() policy.Tool { return policy.ToolMemorySearch }

func (memorySearch) Description() string {
	return fmt.Sprintf(`Full-text search of the memory documents within the skill's scopes; every word must occur. `+
		`Args {"query","limit"?} (limit 1..%d, default %d); result {"hits":[{"path","score","snippet","content_hash"}]}, best first.`,
		memory.MaxLimit, DefaultSearchLimit)
}

type memorySearchArgs struct {
	Query *string `json:"query"`
	Limit *int    `json:"limit"`
}

type memorySearchHit struct {
	Path        string  `json:"path"`
	Score       float64 `json:"score"`
	Snippet     string  `json:"snippet"`
	ContentHash string  `json:"content_hash"`
}

type memorySearchResult struct {
	Hits []memorySearchHit `json:"hits"`
}

func (m memorySearch) Call(ctx context.Context, c *Call) (any, error) {
	env, err := memoryEnv(c)
	if err != nil {
		return nil, err
	}
	var a memorySearchArgs
	if err := unmarshalArgs(c.Args, &a); err != nil {
		return nil, err
	}
	if a.Query == nil {
		return nil, skillError(ErrInvalidParams, "query is required")
	}
	limit := DefaultSearchLimit
	if a.Limit != nil {
		limit = *a.Limit
		if limit < 1 || limit > memory.MaxLimit {
			return nil, fmt.Errorf("%w: limit must be between 1 and %d", ErrInvalidParams, memory.MaxLimit)
		}
	}
	// The scopes are asked for at every call (spec §1 #5), never cached.
	scopes := env.Enforcer.MemoryScopes(m.Name())
	if len(scopes) == 0 {
		return nil, &policy.Denial{Reason: policy.ReasonScope, Tool: m.Name(), Detail: "no allowed memory scope"}
	}
	// The disallowed patterns are left out by the query itself, so the
	// limit counts only what may be shown; each hit is judged again as a
	// MemoryRead of its path would be.
	hits, err := env.Memory.Search(ctx, env.TenantID, *a.Query, scopes, env.Enforcer.MemoryExcludes(m.Name()), limit)
	if err != nil {
		return nil, memoryErr(m.Name(), "", err)
	}
	r := memorySearchResult{Hits: make([]memorySearchHit, 0, len(hits))}
	for _, h := range hits {
		if _, err := env.Enforcer.CheckMemory(m.Name(), h.Path); err != nil {
			continue
		}
		r.Hits = append(r.Hits, memorySearchHit{Path: h.Path, Score: h.Score, Snippet: h.Snippet, ContentHash: h.ContentHash})
	}
	return r, nil
}
