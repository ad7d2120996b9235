package sandbox

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// IDRangeSize is the number of host uids (and gids) each sandbox maps: its
// container ids 0..65535.
const IDRangeSize = 65536

// DefaultHostIDBase is far above the uids a Debian host hands out.
const DefaultHostIDBase = 1_000_000

// DefaultIDRanges is how many sandboxes may hold a range at once unless
// configured: the daemon's default max_concurrent.
const DefaultIDRanges = 256

// ErrIDRanges: the configured host id ranges are unusable.
var ErrIDRanges = errors.New("sandbox: bad host id ranges")

// ErrNoIDRange: every host id range is held by a running sandbox.
var ErrNoIDRange = errors.New("sandbox: every host id range is in use")

// HostIDFiles are the host's user, group and subordinate id databases that
// the sandboxes' id ranges must never overlap.
var HostIDFiles = []string{"/etc/passwd", "/etc/group", "/etc/subuid", "/etc/subgid"}

// CheckIDRanges refuses ranges [base, base+ranges*65536) that leave the
// uid space or overlap an id named in files (passwd/group: the third
// field; subuid/subgid: start:count). baseKey and rangesKey name the
// settings in the error.
func CheckIDRanges(baseKey, rangesKey string, base uint32, ranges int, files []string) error {
	if base == 0 {
		return fmt.Errorf("%w: %s: must be above 0 (0 is host root)", ErrIDRanges, baseKey)
	}
	if ranges < 1 || ranges > 65535 {
		return fmt.Errorf("%w: %s: must be 1..65535, got %d", ErrIDRanges, rangesKey, ranges)
	}
	end := uint64(base) + uint64(ranges)*IDRangeSize // exclusive
	// 65535 and 4294967295 are the kernel's invalid ids (overflow uid, -1).
	if end > 1<<32-1 {
		return fmt.Errorf("%w: %s + %s × %d: ends at %d, beyond the last valid uid 4294967294", ErrIDRanges, baseKey, rangesKey, IDRangeSize, end-1)
	}
	if uint64(base) <= 65535 && end > 65535 {
		return fmt.Errorf("%w: %s: the ranges %d-%d contain 65535, the kernel's overflow uid", ErrIDRanges, baseKey, base, end-1)
	}
	for _, f := range files {
		spans, err := hostIDSpans(f)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return fmt.Errorf("%w: %w", ErrIDRanges, err)
		}
		for _, s := range spans {
			if s.start < end && uint64(base) < s.start+s.count {
				return fmt.Errorf("%w: %s %d with %s %d (host ids %d-%d) overlaps %s line %d (ids %d-%d): choose a %s above %d",
					ErrIDRanges, baseKey, base, rangesKey, ranges, base, end-1, f, s.line, s.start, s.start+s.count-1, baseKey, s.start+s.count-1)
			}
		}
	}
	return nil
}

type idSpan struct {
	start, count uint64
	line         int
}

// hostIDSpans reads the ids a host database names: one id per line for
// passwd/group (third field), a start:count range for subuid/subgid.
func hostIDSpans(path string) ([]idSpan, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	sub := strings.HasPrefix(baseName(path), "sub")
	var out []idSpan
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		fields := strings.Split(line, ":")
		if sub {
			if len(fields) < 3 {
				continue
			}
			start, err1 := strconv.ParseUint(fields[1], 10, 32)
			count, err2 := strconv.ParseUint(fields[2], 10, 32)
			if err1 == nil && err2 == nil && count > 0 {
				out = append(out, idSpan{start, count, n})
			}
			continue
		}
		if len(fields) < 3 {
			continue
		}
		if id, err := strconv.ParseUint(fields[2], 10, 32); err == nil {
			out = append(out, idSpan{id, 1, n})
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return out, nil
}

func baseName(p string) string {
	if i := strings.LastIndexByte(p, '/'); i >= 0 {
		return p[i+1:]
	}
	return p
}
