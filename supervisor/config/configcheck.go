package config

import (
	"fmt"
	"os"
	"reflect"
	"strings"

	"github.com/goccy/go-yaml"
	"github.com/goccy/go-yaml/ast"
	"github.com/goccy/go-yaml/parser"
)

// CheckFile reads path over the defaults as Load does, but
// goes on past a problem so `serve --check` can name them all: each
// top-level key is decoded on its own (an unknown key or a bad value in one
// does not hide the others), then the config is validated. A YAML syntax
// error ends the parse, so it is the only problem named. Each error wraps
// ErrConfig; cfg holds what decoded.
func CheckFile(path string) (cfg Config, problems []error) {
	cfg = Default()
	b, err := os.ReadFile(path)
	if err != nil {
		return cfg, []error{fmt.Errorf("%w: %w", ErrConfig, err)}
	}
	file, err := parser.ParseBytes(b, 0)
	if err != nil {
		return cfg, []error{fmt.Errorf("%w: %s: %s", ErrConfig, path, yaml.FormatError(err, false, true))}
	}
	fields := map[string]reflect.Value{}
	v := reflect.ValueOf(&cfg).Elem()
	for i := 0; i < v.NumField(); i++ {
		if name, _, _ := strings.Cut(v.Type().Field(i).Tag.Get("yaml"), ","); name != "" && name != "-" {
			fields[name] = v.Field(i)
		}
	}
	for _, doc := range file.Docs {
		var values []*ast.MappingValueNode
		switch n := doc.Body.(type) {
		case nil:
		case *ast.MappingNode:
			values = n.Values
		case *ast.MappingValueNode:
			values = []*ast.MappingValueNode{n}
		default:
			problems = append(problems, fmt.Errorf("%w: %s: the document is not a mapping of keys", ErrConfig, path))
		}
		for _, mv := range values {
			key := strings.TrimSpace(mv.Key.String())
			f, ok := fields[key]
			if !ok {
				problems = append(problems, fmt.Errorf("%w: %s: line %d: unknown key %q", ErrConfig, path, mv.Key.GetToken().Position.Line, key))
				continue
			}
			// A pointer field (mcp_servers) is decoded into a value of its
			// own: the decoder leaves a pointer to a nil pointer unset.
			target := f.Addr()
			if f.Kind() == reflect.Pointer {
				target = reflect.New(f.Type().Elem())
			}
			if err := yaml.NodeToValue(mv.Value, target.Interface(), yaml.DisallowUnknownField()); err != nil {
				problems = append(problems, fmt.Errorf("%w: %s: %s: %s", ErrConfig, path, key, yaml.FormatError(err, false, true)))
			} else if f.Kind() == reflect.Pointer {
				f.Set(target)
			}
		}
	}
	if err := cfg.Validate(); err != nil {
		problems = append(problems, fmt.Errorf("%w: %s: %s", ErrConfig, path, strings.TrimPrefix(err.Error(), ErrConfig.Error()+": ")))
	}
	return cfg, problems
}
