// Package paperload generates the records of the Cell paper's workload
// (§5: "keys of 8–64 bytes and values of 8–256 bytes"), the same records
// for a seed in every benchmark and measuring command that uses it (blink's
// and meganode's benchmarks, test/memload), so that their figures compare.
package paperload

import "math/rand/v2"

// Records returns n distinct random keys of 8–64 bytes and values of
// 8–256 bytes, uniform in length, drawn from PCG(seed, "cell").
func Records(n int, seed uint64) (keys, vals [][]byte) {
	return NewSource(seed).Records(n)
}

// Source draws records from PCG(seed, "cell"); its Rand goes on where the
// records stop, for a caller that draws more (an access order) after them.
type Source struct {
	r *rand.Rand
}

// NewSource returns the source of seed's records.
func NewSource(seed uint64) *Source {
	return &Source{r: rand.New(rand.NewPCG(seed, 0x63656c6c))}
}

// Rand returns the source's generator.
func (s *Source) Rand() *rand.Rand { return s.r }

// Records draws the next n distinct records (distinct among themselves).
func (s *Source) Records(n int) (keys, vals [][]byte) {
	r := s.r
	seen := make(map[string]struct{}, n)
	keys = make([][]byte, 0, n)
	vals = make([][]byte, 0, n)
	for len(keys) < n {
		k := randomBytes(r, 8+r.IntN(57))
		if _, dup := seen[string(k)]; dup {
			continue
		}
		seen[string(k)] = struct{}{}
		keys = append(keys, k)
		vals = append(vals, randomBytes(r, 8+r.IntN(249)))
	}
	return keys, vals
}

func randomBytes(r *rand.Rand, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}
