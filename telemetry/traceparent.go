package telemetry

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
)

// ErrTraceparent: the caller's traceparent is not a valid W3C header.
var ErrTraceparent = errors.New("invalid traceparent")

// TraceContext is the parsed W3C traceparent of a caller.
type TraceContext struct {
	Version  string
	TraceID  string // 32 lowercase hex, not all zeros
	ParentID string // 16 lowercase hex, not all zeros
	Flags    string // 2 lowercase hex
}

// String renders the header value.
func (tc TraceContext) String() string {
	return tc.Version + "-" + tc.TraceID + "-" + tc.ParentID + "-" + tc.Flags
}

// ParseTraceparent parses a traceparent strictly as W3C Trace Context
// level 1 says: lowercase hex only, version "ff" invalid, version 00 exactly
// 55 characters, later versions at least 55 with a "-" after the flags,
// trace-id and parent-id not all zeros.
func ParseTraceparent(s string) (TraceContext, error) {
	bad := func(why string) (TraceContext, error) {
		return TraceContext{}, fmt.Errorf("%w: %s", ErrTraceparent, why)
	}
	if len(s) < 55 {
		return bad("too short")
	}
	if s[2] != '-' || s[35] != '-' || s[52] != '-' {
		return bad("fields must be separated by '-' at 2, 35 and 52")
	}
	tc := TraceContext{Version: s[0:2], TraceID: s[3:35], ParentID: s[36:52], Flags: s[53:55]}
	for name, v := range map[string]string{"version": tc.Version, "trace-id": tc.TraceID, "parent-id": tc.ParentID, "trace-flags": tc.Flags} {
		if !isLowerHex(v) {
			return bad(name + " is not lowercase hex")
		}
	}
	switch {
	case tc.Version == "ff":
		return bad("version ff is forbidden")
	case tc.Version == "00" && len(s) != 55:
		return bad("version 00 must be exactly 55 characters")
	case tc.Version != "00" && len(s) > 55 && s[55] != '-':
		return bad("unexpected data after trace-flags")
	case strings.Trim(tc.TraceID, "0") == "":
		return bad("trace-id is all zeros")
	case strings.Trim(tc.ParentID, "0") == "":
		return bad("parent-id is all zeros")
	}
	return tc, nil
}

// NewTraceContext starts a new trace (no caller traceparent): random ids,
// sampled.
func NewTraceContext() TraceContext {
	var b [24]byte
	_, _ = rand.Read(b[:])
	return TraceContext{Version: "00", TraceID: hex.EncodeToString(b[:16]), ParentID: hex.EncodeToString(b[16:]), Flags: "01"}
}

func isLowerHex(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}
