package sandbox

// Doctor reports what macOS can enforce: rlimits only.
func Doctor() []Finding {
	out := []Finding{{"rlimits", true, "RLIMIT_AS, RLIMIT_NPROC (per user), RLIMIT_NOFILE, RLIMIT_CORE via the re-exec shim"}}
	for _, n := range notEnforcedDarwin {
		out = append(out, Finding{"not enforced", false, n})
	}
	return out
}
