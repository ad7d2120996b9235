package audit

import (
	"fmt"
	"strings"
)

// zeroHash returns a valid 64-hex hash distinct per n.
func zeroHash(n int) string {
	h := fmt.Sprintf("%x", n)
	return strings.Repeat("0", 64-len(h)) + h
}
