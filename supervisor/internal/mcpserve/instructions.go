package mcpserve

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"mime"
	"path"
	"strings"
	"unicode/utf8"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"cyberos.dev/policy"
)

// ResourceURI is the URI of a file of an instructions skill.
func ResourceURI(id, p string) string { return "skill://" + id + "/" + p }

// refreshInstructions serves every instructions skill as a prompt (its
// SKILL.md body) and its folder's files as read-only resources; what is
// gone is removed. Called with s.mu held.
func (s *Server) refreshInstructions(ctx context.Context, skills []*policy.Policy) {
	seenP, seenR := map[string]bool{}, map[string]bool{}
	for _, p := range skills {
		if p.Kind != policy.KindInstructions {
			continue
		}
		seenP[p.Name] = true
		pr := &mcp.Prompt{Name: p.Name, Description: p.Description}
		sig, _ := json.Marshal(pr)
		if s.prompts[p.Name] != string(sig) {
			s.prompts[p.Name] = string(sig)
			s.srv.AddPrompt(pr, s.promptHandler(p.Name))
		}
		files, err := s.b.Files(ctx, p.Name)
		if err != nil {
			s.opts.Log.Warn("mcp: list skill files", "skill_id", p.Name, "err", err)
			continue
		}
		for _, f := range files {
			uri := ResourceURI(p.Name, f.Path)
			seenR[uri] = true
			if s.res[uri] {
				continue
			}
			s.res[uri] = true
			s.srv.AddResource(&mcp.Resource{URI: uri, Name: p.Name + "/" + f.Path, Size: f.Size, MIMEType: mimeOf(f.Path)},
				s.resourceHandler(p.Name, f.Path))
		}
	}
	var goneP, goneR []string
	for id := range s.prompts {
		if !seenP[id] {
			goneP = append(goneP, id)
			delete(s.prompts, id)
		}
	}
	for uri := range s.res {
		if !seenR[uri] {
			goneR = append(goneR, uri)
			delete(s.res, uri)
		}
	}
	if len(goneP) > 0 {
		s.srv.RemovePrompts(goneP...)
	}
	if len(goneR) > 0 {
		s.srv.RemoveResources(goneR...)
	}
}

func mimeOf(p string) string {
	if strings.EqualFold(path.Ext(p), ".md") {
		return "text/markdown"
	}
	if t := mime.TypeByExtension(path.Ext(p)); t != "" {
		return t
	}
	return "application/octet-stream"
}

// promptHandler answers prompts/get with the skill's instructions, read
// again now.
func (s *Server) promptHandler(id string) mcp.PromptHandler {
	return func(ctx context.Context, _ *mcp.GetPromptRequest) (*mcp.GetPromptResult, error) {
		b, err := s.b.ReadFile(ctx, id, "SKILL.md")
		if err != nil {
			return nil, fmt.Errorf("skill %s: %w", id, err)
		}
		return &mcp.GetPromptResult{Messages: []*mcp.PromptMessage{{Role: "user", Content: &mcp.TextContent{Text: policy.Body(b)}}}}, nil
	}
}

// resourceHandler answers resources/read of one file: text when it is
// UTF-8, else a blob.
func (s *Server) resourceHandler(id, p string) mcp.ResourceHandler {
	uri := ResourceURI(id, p)
	return func(ctx context.Context, _ *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
		b, err := s.b.ReadFile(ctx, id, p)
		if err != nil {
			if ae, ok := errors.AsType[*APIError](err); ok && ae.Code == "not_found" {
				return nil, mcp.ResourceNotFoundError(uri)
			}
			return nil, fmt.Errorf("%s: %w", uri, err)
		}
		c := &mcp.ResourceContents{URI: uri, MIMEType: mimeOf(p)}
		if utf8.Valid(b) {
			c.Text = string(b)
		} else {
			c.Blob = b
		}
		return &mcp.ReadResourceResult{Contents: []*mcp.ResourceContents{c}}, nil
	}
}
