package paperload

import (
	"crypto/sha256"
	"fmt"
	"testing"
)

// The records are part of recorded benchmark figures (BENCHMARKS.md): the
// same seed must give the same records, byte for byte.
func TestRecordsPinned(t *testing.T) {
	keys, vals := Records(1000, 42)
	h := sha256.New()
	seen := map[string]bool{}
	for i := range keys {
		if len(keys[i]) < 8 || len(keys[i]) > 64 || len(vals[i]) < 8 || len(vals[i]) > 256 || seen[string(keys[i])] {
			t.Fatalf("record %d: key of %d bytes, value of %d, duplicate %v", i, len(keys[i]), len(vals[i]), seen[string(keys[i])])
		}
		seen[string(keys[i])] = true
		h.Write(keys[i])
		h.Write(vals[i])
	}
	if got := fmt.Sprintf("%x", h.Sum(nil))[:16]; got != pinned {
		t.Fatalf("records of seed 42 hash to %s, want %s", got, pinned)
	}
}

const pinned = "f57365829bd3849c"
