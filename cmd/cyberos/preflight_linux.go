package main

import "github.com/cyberos/supervisor/supervisor/seccomp"

// checkProfile loads the profile as every sandbox start does.
func checkProfile(dir, name string) error {
	_, err := seccomp.LoadProfile(dir, name)
	return err
}
