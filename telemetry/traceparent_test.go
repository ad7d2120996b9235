package telemetry

import (
	"errors"
	"testing"
)

func TestParseTraceparent(t *testing.T) {
	good := "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	tc, err := ParseTraceparent(good)
	if err != nil || tc.TraceID != "4bf92f3577b34da6a3ce929d0e0e4736" || tc.ParentID != "00f067aa0ba902b7" || tc.String() != good {
		t.Fatalf("%+v %v", tc, err)
	}
	if _, err := ParseTraceparent("01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-future"); err != nil {
		t.Errorf("a later version with extra fields must parse: %v", err)
	}
	for _, s := range []string{
		"",
		"00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",  // uppercase
		"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-", // v00 with extra
		"ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
		"00-00000000000000000000000000000000-00f067aa0ba902b7-01",
		"00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
		"00_4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
		"00-4bf92f3577b34da6a3ce929d0e0e473g-00f067aa0ba902b7-01",
		"01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01x",
	} {
		if _, err := ParseTraceparent(s); !errors.Is(err, ErrTraceparent) {
			t.Errorf("%q: err %v, want ErrTraceparent", s, err)
		}
	}
}

func TestNewTraceContextIsValid(t *testing.T) {
	tc := NewTraceContext()
	if _, err := ParseTraceparent(tc.String()); err != nil {
		t.Fatal(err)
	}
}
