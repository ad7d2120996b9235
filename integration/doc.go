// Package integration holds the tests that need root and a real kernel: they
// run the real cyberos binary against real namespaces, cgroups and seccomp.
package integration
