package mcpserve

import (
	"encoding/json"
	"testing"
)

// TestWithIDOverwritesClientValue: a client cannot choose the id the
// request_id is derived from by putting it in _meta itself.
func TestWithIDOverwritesClientValue(t *testing.T) {
	in := json.RawMessage(`{"name":"x","_meta":{"` + metaRequestID + `":"forged","progressToken":3}}`)
	var got struct {
		Meta map[string]any `json:"_meta"`
	}
	if err := json.Unmarshal(withID(in, int64(9)), &got); err != nil {
		t.Fatal(err)
	}
	if got.Meta[metaRequestID] != float64(9) || got.Meta["progressToken"] != float64(3) {
		t.Errorf("_meta %v", got.Meta)
	}
	if string(withID(json.RawMessage(`[1]`), 1)) != `[1]` {
		t.Error("params that are not an object must be left for the SDK to refuse")
	}
}

func TestRequestIDDistinct(t *testing.T) {
	a, b := RequestID("s1", 1), RequestID("s1", "1")
	if a == b || a != RequestID("s1", 1) || a == RequestID("s2", 1) || len(a) > 128 {
		t.Errorf("%s %s", a, b)
	}
}
