package main

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
)

// Key choice of cellctl bench: which of the --keyspace keys an operation
// works on. A keyChooser holds no mutable state (each worker passes its
// own seeded generator), so one chooser serves every worker and a seed
// fixes the whole sequence.

// Distributions (--distribution).
const (
	distUniform = "uniform"
	// distZipfian is YCSB's "zipfian" request distribution, which YCSB's
	// CoreWorkload draws from its ScrambledZipfianGenerator: popular keys
	// are scattered over the keyspace, not clustered at its start.
	distZipfian = "zipfian"
)

// keyChooser picks a key index in [0, n) for a keyspace of n keys.
type keyChooser interface {
	next(rng *rand.Rand) int
}

// newKeyChooser returns the chooser of distribution dist over n > 0 keys.
func newKeyChooser(dist string, n int) (keyChooser, error) {
	switch strings.ToLower(dist) {
	case distUniform:
		return uniformKeys(n), nil
	case distZipfian:
		return newScrambledZipfian(n), nil
	}
	return nil, fmt.Errorf("--distribution %q: want uniform or zipfian", dist)
}

// uniformKeys picks every key with the same probability.
type uniformKeys int

func (n uniformKeys) next(rng *rand.Rand) int { return rng.IntN(int(n)) }

// YCSB's constants for its scrambled zipfian generator (site.ycsb.generator
// ScrambledZipfianGenerator): the zipfian constant theta, the item count
// of the underlying zipfian (10^10, as in YCSB releases up to 0.17) and
// zeta(10^10, 0.99) = sum of 1/i^0.99 for i = 1..10^10, precomputed by
// YCSB (TestZipfianZeta checks it against the Euler-Maclaurin expansion).
// math/rand/v2's Zipf cannot stand in: it requires s > 1.
const (
	ycsbZipfianConstant = 0.99
	ycsbItemCount       = 10_000_000_000
	ycsbZetan           = 26.46902820178302
)

// zipfian draws item i in [0, items) with probability proportional to
// 1/(i+1)^theta, by the method of Gray et al., "Quickly Generating
// Billion-Record Synthetic Databases" (SIGMOD 1994), which YCSB's
// ZipfianGenerator implements: item 0 is the most popular, then 1, and so
// on.
type zipfian struct {
	items             float64
	theta, alpha, eta float64
	zetan             float64
	// second is 1 + 0.5^theta: u·zetan below 1 draws item 0, below
	// second item 1.
	second float64
}

// newZipfian returns a zipfian generator over items items, given
// zetan = zeta(items, theta).
func newZipfian(items uint64, theta, zetan float64) *zipfian {
	n := float64(items)
	zeta2 := 1 + math.Pow(2, -theta)
	return &zipfian{
		items: n, theta: theta, zetan: zetan,
		alpha:  1 / (1 - theta),
		eta:    (1 - math.Pow(2/n, 1-theta)) / (1 - zeta2/zetan),
		second: 1 + math.Pow(0.5, theta),
	}
}

// zeta returns the sum of 1/i^theta for i = 1..n (O(n)).
func zeta(n uint64, theta float64) float64 {
	sum := 0.0
	for i := uint64(1); i <= n; i++ {
		sum += 1 / math.Pow(float64(i), theta)
	}
	return sum
}

func (z *zipfian) next(rng *rand.Rand) uint64 {
	u := rng.Float64()
	uz := u * z.zetan
	switch {
	case uz < 1:
		return 0
	case uz < z.second:
		return 1
	}
	v := uint64(z.items * math.Pow(z.eta*u-z.eta+1, z.alpha))
	return min(v, uint64(z.items)-1)
}

// scrambledZipfian is YCSB's ScrambledZipfianGenerator: a zipfian over
// ycsbItemCount items with theta 0.99, each item hashed with 64-bit FNV-1a
// (YCSB's Utils.fnvhash64: eight octets, least significant first, then the
// absolute value as a signed 64-bit number) and taken modulo the keyspace.
// The hottest key gets 1/zetan ≈ 3.8% of operations, the next 1.9%, and
// the popular keys land anywhere in the keyspace. Because the zipfian
// runs over 10^10 items, its long tail folds onto the keyspace almost
// uniformly: the result is less skewed than a zipfian over n keys, exactly
// as YCSB's workloads are.
type scrambledZipfian struct {
	n int
	z *zipfian
}

func newScrambledZipfian(n int) *scrambledZipfian {
	return &scrambledZipfian{n: n, z: newZipfian(ycsbItemCount, ycsbZipfianConstant, ycsbZetan)}
}

func (s *scrambledZipfian) next(rng *rand.Rand) int {
	return int(fnvHash64(s.z.next(rng)) % uint64(s.n))
}

// fnvHash64 is YCSB's Utils.fnvhash64 of v: FNV-1a over v's eight bytes,
// least significant first, returned as Java's Math.abs of the signed
// result (math.MinInt64 stays negative in Java; here it becomes 1<<63,
// which no modulo below 2^63 tells apart).
func fnvHash64(v uint64) uint64 {
	const (
		offsetBasis = 0xCBF29CE484222325
		prime       = 1099511628211
	)
	h := uint64(offsetBasis)
	for range 8 {
		h ^= v & 0xff
		v >>= 8
		h *= prime
	}
	if int64(h) < 0 {
		h = -h
	}
	return h
}
