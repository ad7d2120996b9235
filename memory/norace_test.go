//go:build !race

package memory

// raceEnabled: see race_test.go.
const raceEnabled = false
