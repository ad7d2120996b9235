//go:build race

package memory

// raceEnabled: the race detector slows Go code several times over, so
// latency bounds are asserted in the plain pass only.
const raceEnabled = true
