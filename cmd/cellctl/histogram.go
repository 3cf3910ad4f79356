package main

import (
	"math/bits"
	"time"
)

// histogram records latencies in log-linear buckets, as HdrHistogram
// does: exact below 128 ns, then 64 buckets per power of two (a relative
// error under 1.6%). Recording does not allocate. Not safe for concurrent
// use: each bench worker has its own, merged at the end.
type histogram struct {
	counts [histBuckets]uint64
	n      uint64
	sum    int64 // ns
	max    int64 // ns
}

const (
	histSubBits = 6
	histSub     = 1 << histSubBits // buckets per power of two
	histExact   = 2 * histSub      // values below are their own bucket
	// histBuckets covers every int64.
	histBuckets = histExact + (64-histSubBits-1)*histSub
)

// bucketOf returns the bucket of v >= 0.
func bucketOf(v int64) int {
	if v < histExact {
		return int(max(v, 0))
	}
	shift := bits.Len64(uint64(v)) - histSubBits - 1 // >= 1
	return histExact + (shift-1)*histSub + int(uint64(v)>>shift) - histSub
}

// bucketRange returns the values [lo, hi] of bucket i.
func bucketRange(i int) (lo, hi int64) {
	if i < histExact {
		return int64(i), int64(i)
	}
	shift := (i-histExact)/histSub + 1
	m := int64((i-histExact)%histSub + histSub)
	return m << shift, (m+1)<<shift - 1
}

func (h *histogram) record(d time.Duration) {
	v := int64(d)
	h.counts[bucketOf(v)]++
	h.n++
	h.sum += v
	h.max = max(h.max, v)
}

func (h *histogram) merge(o *histogram) {
	for i, c := range o.counts {
		h.counts[i] += c
	}
	h.n += o.n
	h.sum += o.sum
	h.max = max(h.max, o.max)
}

// quantile returns the q-quantile (0 < q <= 1): the middle of the bucket
// holding the ceil(q·n)-th smallest value, capped at the maximum.
func (h *histogram) quantile(q float64) time.Duration {
	if h.n == 0 {
		return 0
	}
	rank := uint64(q*float64(h.n) + 0.999999)
	rank = min(max(rank, 1), h.n)
	var seen uint64
	for i, c := range h.counts {
		if seen += c; seen >= rank {
			lo, hi := bucketRange(i)
			return time.Duration(min(lo+(hi-lo)/2, h.max))
		}
	}
	return time.Duration(h.max)
}

// latencies returns the histogram's mean, quantiles and max.
func (h *histogram) latencies() latencies {
	return latencies{Mean: h.mean(), P50: h.quantile(0.50), P90: h.quantile(0.90), P99: h.quantile(0.99), P999: h.quantile(0.999), Max: time.Duration(h.max)}
}

func (h *histogram) mean() time.Duration {
	if h.n == 0 {
		return 0
	}
	return time.Duration(h.sum / int64(h.n))
}
