package policy

import "errors"

// Errors callers test with errors.Is.
var (
	// ErrInvalid matches every error that means "this skill's SKILL.md or
	// folder is not acceptable": every *FieldError and ErrNoFrontmatter.
	// Errors that do not match it (permission denied, I/O) are about the host,
	// not the skill.
	ErrInvalid = errors.New("invalid skill policy")

	// ErrNoFrontmatter: SKILL.md does not start with a "---" line, or no
	// second "---" line closes the frontmatter. It also matches ErrInvalid.
	ErrNoFrontmatter error = &kindError{msg: "no frontmatter", kind: ErrInvalid}

	// ErrArgs: a call's args do not match the skill's x-input-schema.
	ErrArgs = errors.New("args do not match x-input-schema")
)

// FieldError says which frontmatter field (the key as written in the file, or
// "frontmatter", "SKILL.md", "entrypoint" for the file as a whole) is wrong and
// why. It matches ErrInvalid.
type FieldError struct {
	Field  string
	Reason string
}

func (e *FieldError) Error() string { return e.Field + ": " + e.Reason }

// Is reports whether target is ErrInvalid, so errors.Is(err, ErrInvalid) holds
// for every FieldError.
func (e *FieldError) Is(target error) bool { return target == ErrInvalid }

// fieldErr builds a *FieldError; the one constructor keeps call sites short.
func fieldErr(field, reason string) *FieldError {
	return &FieldError{Field: field, Reason: reason}
}

// kindError is a sentinel that is also a member of a wider class (kind).
type kindError struct {
	msg  string
	kind error
}

func (e *kindError) Error() string        { return e.msg }
func (e *kindError) Is(target error) bool { return target == e.kind }
