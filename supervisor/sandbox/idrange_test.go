package sandbox

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestCheckIDRanges(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	passwd := write("passwd", "root:x:0:0:root:/root:/bin/sh\nalice:x:1000:1000::/home/alice:/bin/sh\nodd:x:1500000:1500000::/:/bin/false\n")
	group := write("group", "root:x:0:\n# comment\nbig:x:3000000:\n")
	subuid := write("subuid", "alice:100000:65536\n")
	subgid := write("subgid", "alice:2000000:65536\n")
	files := []string{passwd, group, subuid, subgid, filepath.Join(dir, "missing")}
	for _, tc := range []struct {
		name        string
		base        uint32
		ranges      int
		wantErr     bool
		wantInError string
	}{
		{"clear of every host id", 4_000_000, 16, false, ""},
		{"passwd uid inside", 1_000_000, 16, true, "passwd line 3"},
		{"subgid range inside", 1_990_000, 1, true, "subgid line 1"},
		{"group gid inside", 2_990_000, 1, true, "group line 3"},
		{"subuid range inside", 150_000, 1, true, "subuid line 1"},
		{"starts just after a subuid range", 165_536, 1, false, ""},
		{"ends just before a group gid", 3_000_000 - IDRangeSize, 1, false, ""},
		{"zero base is root", 0, 1, true, "above 0"},
		{"no ranges", 4_000_000, 0, true, "1..65535"},
		{"past the last uid", 4_294_000_000, 16, true, "beyond the last valid uid"},
		{"over the overflow uid", 1, 1, true, "65535"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := CheckIDRanges("userns.host_id_base", "userns.ranges", tc.base, tc.ranges, files)
			if !tc.wantErr {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if !errors.Is(err, ErrIDRanges) || !strings.Contains(err.Error(), tc.wantInError) || !strings.Contains(err.Error(), "userns.") {
				t.Fatalf("err %v, want ErrIDRanges naming the setting and %q", err, tc.wantInError)
			}
		})
	}
}
