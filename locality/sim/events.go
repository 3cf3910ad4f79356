package sim

import "time"

// eventKind says what an event does when its time comes.
type eventKind uint8

const (
	evServerReply eventKind = iota // a server-side search's reply reaches its client
	evReadReply                    // a one-sided read's data reaches its client
	evArrival                      // a client is handed a new search
)

// event is one scheduled happening. Events with equal times run in the
// order they were scheduled (seq), which keeps runs deterministic. It holds
// indices, not pointers, so the queue is cheap to move around.
type event struct {
	at   time.Duration
	seq  uint64
	ref  int32 // the op (replies) or the client (arrivals)
	kind eventKind
}

func (a *event) before(b *event) bool {
	return a.at < b.at || (a.at == b.at && a.seq < b.seq)
}

// eventQueue is a 4-ary min-heap of events by (at, seq): shallower than a
// binary heap, and typed to avoid container/heap's interface calls.
type eventQueue struct {
	h   []event
	seq uint64
}

const arity = 4

func (q *eventQueue) len() int { return len(q.h) }

func (q *eventQueue) push(e event) {
	q.seq++
	e.seq = q.seq
	q.h = append(q.h, e)
	i := len(q.h) - 1
	for i > 0 {
		p := (i - 1) / arity
		if !e.before(&q.h[p]) {
			break
		}
		q.h[i] = q.h[p]
		i = p
	}
	q.h[i] = e
}

func (q *eventQueue) pop() event {
	top := q.h[0]
	last := len(q.h) - 1
	e := q.h[last]
	q.h = q.h[:last]
	if last == 0 {
		return top
	}
	i := 0
	for {
		first := arity*i + 1
		if first >= last {
			break
		}
		m := first
		for c := first + 1; c < min(first+arity, last); c++ {
			if q.h[c].before(&q.h[m]) {
				m = c
			}
		}
		if !q.h[m].before(&e) {
			break
		}
		q.h[i] = q.h[m]
		i = m
	}
	q.h[i] = e
	return top
}
