package profiletool

import (
	"fmt"
	"math/bits"
	"strings"

	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// maskedCube is the set of values v with v & mask == value: one masked
// equality condition.
type maskedCube struct{ mask, value uint32 }

// maxExcepted is how many refused values a summary lists at most.
const maxExcepted = 8

// summarizeMasked reads rules that each hold exactly one masked equality
// on the same argument, with 32-bit masks (the ioctl request: the kernel
// uses its low 32 bits), and returns that argument and the values of its
// low 32 bits that no rule matches, when there are at most maxExcepted of
// them: "every request except TIOCSTI (0x5412), TIOCLINUX (0x541c)"
// instead of 33 lines of bit tests. ok is false for any other shape.
func summarizeMasked(rules []specs.LinuxSyscall) (index uint, except []uint32, ok bool) {
	if len(rules) < 2 {
		return 0, nil, false
	}
	cubes := make([]maskedCube, 0, len(rules))
	for i, r := range rules {
		if len(r.Args) != 1 || r.Args[0].Op != specs.OpMaskedEqual || r.Args[0].Value > 0xffffffff || r.Args[0].ValueTwo&^r.Args[0].Value != 0 {
			return 0, nil, false
		}
		if i == 0 {
			index = r.Args[0].Index
		} else if r.Args[0].Index != index {
			return 0, nil, false
		}
		cubes = append(cubes, maskedCube{mask: uint32(r.Args[0].Value), value: uint32(r.Args[0].ValueTwo)})
	}
	except, ok = uncovered(cubes, 0, 0, 31, nil)
	return index, except, ok
}

// uncovered appends to out the values of the subspace {v : v & fixedMask
// == fixedVal} that no cube holds, deciding bit by bit from bit down; false
// when there are more than maxExcepted.
func uncovered(cubes []maskedCube, fixedMask, fixedVal uint32, bit int, out []uint32) ([]uint32, bool) {
	var meets []maskedCube
	for _, c := range cubes {
		if (c.value^fixedVal)&c.mask&fixedMask != 0 {
			continue // disjoint from the subspace
		}
		if c.mask&^fixedMask == 0 {
			return out, true // holds the whole subspace
		}
		meets = append(meets, c)
	}
	if len(meets) == 0 {
		free := 32 - bits.OnesCount32(fixedMask)
		if free > 3 || len(out)+1<<free > maxExcepted {
			return out, false
		}
		for i := uint32(0); i < 1<<free; i++ {
			v, k := fixedVal, 0
			for b := 0; b < 32; b++ {
				if fixedMask&(1<<b) == 0 {
					v |= (i >> k & 1) << b
					k++
				}
			}
			out = append(out, v)
		}
		return out, true
	}
	for ; bit >= 0 && fixedMask&(1<<bit) != 0; bit-- {
	}
	if bit < 0 {
		return out, true // a point some cube met, so holds
	}
	var ok bool
	for _, b := range []uint32{0, 1} {
		if out, ok = uncovered(meets, fixedMask|1<<bit, fixedVal|b<<bit, bit-1, out); !ok {
			return out, false
		}
	}
	return out, true
}

// maskedSummary words summarizeMasked's result for explain and diff, with
// the names explain knows for the values at that argument of syscall.
func maskedSummary(action, syscall string, index uint, except []uint32) string {
	if len(except) == 0 {
		return fmt.Sprintf("%s for every value of arg%d's low 32 bits", action, index)
	}
	named := make([]string, len(except))
	for i, v := range except {
		named[i] = fmt.Sprintf("%#x", v)
		if n := argName(syscall, index, uint64(v)); n != "" {
			named[i] = fmt.Sprintf("%s (%#x)", n, v)
		}
	}
	return fmt.Sprintf("%s for every value of arg%d's low 32 bits except %s", action, index, strings.Join(named, ", "))
}
