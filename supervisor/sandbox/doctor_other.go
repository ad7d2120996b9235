//go:build !linux && !darwin

package sandbox

// Doctor reports that this platform enforces nothing: New refuses to run
// a skill here.
func Doctor() []Finding {
	return []Finding{{"sandbox", false, "no sandbox on this platform: skills are refused"}}
}
