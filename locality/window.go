package locality

import "math"

// window is a moving window over the last len(buf) samples pushed into it,
// with their running sum and sum of squares.
//
// Invariant: n ≤ len(buf); sum and sumSq are the sum and sum of squares of
// the n most recent samples, up to floating-point drift, which recompute
// removes once every len(buf) pushes.
type window struct {
	buf    []float64
	head   int // slot of the next push
	n      int // samples held
	sum    float64
	sumSq  float64
	pushes int // pushes since the last recompute
}

func newWindow(size int) window { return window{buf: make([]float64, size)} }

func (w *window) push(x float64) {
	if w.n == len(w.buf) {
		old := w.buf[w.head]
		w.sum -= old
		w.sumSq -= old * old
	} else {
		w.n++
	}
	w.buf[w.head] = x
	w.sum += x
	w.sumSq += x * x
	if w.head++; w.head == len(w.buf) {
		w.head = 0
	}
	if w.pushes++; w.pushes == len(w.buf) {
		w.recompute()
	}
}

// recompute sets sum and sumSq exactly from the samples held.
func (w *window) recompute() {
	w.pushes = 0
	w.sum, w.sumSq = 0, 0
	for i := range w.n {
		x := w.buf[(w.head-w.n+i+len(w.buf))%len(w.buf)]
		w.sum += x
		w.sumSq += x * x
	}
}

func (w *window) reset() {
	w.head, w.n, w.sum, w.sumSq, w.pushes = 0, 0, 0, 0, 0
}

// mean returns μ, or 0 when the window is empty.
func (w *window) mean() float64 {
	if w.n == 0 {
		return 0
	}
	return w.sum / float64(w.n)
}

// stddev returns σ, the population standard deviation of the samples held.
func (w *window) stddev() float64 {
	_, sigma := w.meanStddev()
	return sigma
}

// meanStddev returns μ and σ as mean and stddev do, with one division for
// μ instead of two.
func (w *window) meanStddev() (mu, sigma float64) {
	if w.n == 0 {
		return 0, 0
	}
	n := float64(w.n)
	mu = w.sum / n
	v := w.sumSq/n - mu*mu
	if v <= 0 {
		return mu, 0
	}
	return mu, math.Sqrt(v)
}

// newest returns the sample pushed last.
// REQUIRES: w.n > 0.
func (w *window) newest() float64 {
	i := w.head - 1
	if i < 0 {
		i = len(w.buf) - 1
	}
	return w.buf[i]
}

// verdicts remembers, for the last len(dropped) samples offered to an
// estimate, whether each was discarded: the paper's "moving period".
//
// Invariant: drops is the number of true entries among the n held.
type verdicts struct {
	dropped []bool
	head    int
	n       int
	drops   int
}

func newVerdicts(size int) verdicts { return verdicts{dropped: make([]bool, size)} }

// record adds one verdict and reports whether discarded samples now
// outnumber kept ones in the period.
func (v *verdicts) record(drop bool) bool {
	if v.n == len(v.dropped) {
		if v.dropped[v.head] {
			v.drops--
		}
	} else {
		v.n++
	}
	v.dropped[v.head] = drop
	if drop {
		v.drops++
	}
	if v.head++; v.head == len(v.dropped) {
		v.head = 0
	}
	return v.drops > v.n-v.drops
}

func (v *verdicts) reset() { v.head, v.n, v.drops = 0, 0, 0 }

// estimate is one latency estimate (l_s or l_r) of one connection: the
// window of kept samples, the verdicts of the moving period, and counters.
type estimate struct {
	win      window
	period   verdicts
	dropped  uint64 // samples discarded as outliers, ever
	resets   uint64 // histories discarded because drops outnumbered keeps
	observed uint64 // samples offered, ever
}

func newEstimate(size int) estimate {
	return estimate{win: newWindow(size), period: newVerdicts(size)}
}

// observation is what estimate.observe did with a sample.
type observation uint8

const (
	kept      observation = iota // added to the window
	discarded                    // an outlier, dropped
	resetting                    // an outlier that made drops outnumber keeps: history discarded
)

// observe offers sample x (nanoseconds). k ≤ 0 disables outlier rejection;
// outliers are judged once the window holds minSamples samples.
func (e *estimate) observe(x, k float64, minSamples int) observation {
	e.observed++
	drop := false
	if k > 0 && e.win.n >= minSamples {
		mu, sigma := e.win.meanStddev()
		d := math.Abs(x - mu)
		drop = d > 0 && d >= k*sigma
	}
	if tooMany := e.period.record(drop); drop && tooMany {
		e.dropped++
		e.resets++
		e.reset()
		return resetting
	}
	if drop {
		e.dropped++
		return discarded
	}
	e.win.push(x)
	return kept
}

// reset discards the history (window and moving period), keeping counters.
func (e *estimate) reset() {
	e.win.reset()
	e.period.reset()
}
