package broker

import "errors"

// ErrDuplicateKey: a JSON object names one key twice; the error names it.
var ErrDuplicateKey = errors.New("duplicate key")

// CheckObject returns nil when raw is one JSON object whose keys are each
// given once at its top level, as every broker request and its params must
// be; for the other edges that take JSON objects (the admin API), so that
// none resolves a repeated key silently as encoding/json does (the last
// wins). A repeated key is ErrDuplicateKey; anything not one object is
// another error.
func CheckObject(raw []byte) error {
	_, err := objectMembers(raw)
	return err
}
