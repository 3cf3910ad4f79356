// Package sim is a deterministic discrete-event simulation of the queueing
// model behind Cell's locality selector (paper §2.5), driving the real
// locality package, to reproduce the shape of the paper's Table 2 and
// Fig. 7 (§4.4) and to measure changes to the selector against them.
//
// # Model
//
// Each server has two independent queues, as in the paper:
//
//   - The CPU queue Q_s serves server-side meganode searches. A server has
//     Cores cores and each takes 1/CoreRate per search (160K/s: "Cell
//     performs 158K server-side searches/sec" on one core). The cores are c
//     parallel servers of one shared FIFO queue (M/G/c), not one queue
//     served c times faster (M/G/1 at c·rate): a search runs on one core
//     and cannot be split, so an unloaded search takes 1/CoreRate whatever
//     c is, and a server with idle cores still serves a lone search at
//     one core's speed. This is also how cellserver works: --cores worker
//     goroutines take requests from one queue. The two agree at saturation;
//     they differ at low and moderate load, which the selector sees.
//   - The NIC queue Q_r serves one-sided reads, one FIFO queue of
//     capacity NICRate (1.04M 1 KiB reads/s over a 1 GB area, Table 1).
//
// Service times are spread uniformly over ±Jitter (20%) around their mean:
// the paper's jobs are of fixed size, and a little spread keeps latency
// samples from being identical. A request reaches its server RTT/2 after it
// is sent and its reply returns RTT/2 (+ NetJitter) after service ends, so
// an unloaded server-side search takes RTT + 1/CoreRate (21.25µs) and an
// unloaded client-side search M·(RTT + 1/NICRate) (79.8µs with M = 5).
// Because every request reaches its queue in the order it was sent, a
// request's start of service is fixed when it is sent (max of its arrival
// and the earliest free core); only replies are events.
//
// Clients are separate processes, each with its own locality.Selector in
// the mode under test and one Estimator per server (a connection). A
// search is one meganode traversal on a server chosen uniformly at random:
// server-side, one RPC; client-side, M sequential reads. Clients feed their
// selector exactly what a real client measures: ObserveServer with the
// RPC's latency and the server's queueing and service time, ObserveRead
// per read, ObserveHeight(M) per traversal. The selectors read the
// engine's virtual clock; each has its own seed. Same parameters and seed,
// same result, to the bit.
//
// # Experiments
//
// Table2 runs a saturating closed loop (Clients × Outstanding searches
// always in flight, no think time; 32 × 8 on 4 servers by default) at 1 to
// 8 cores per server, with server-only, client-only, adaptive, and every
// fixed ratio from 5% to 95% in steps of RatioStep (5%), and reports each
// core count's throughput. Saturation is what the paper measured
// ("4 client machines per server are used to saturate the servers", §4.3).
//
// Spike runs the paper's Fig. 7 experiment: 24 clients are each handed a
// search every 75µs, without pipelining, and for 5 s 36 more clients join
// at the same rate (2.5× the load). It reports latency percentiles by
// phase and over time, the selectors' server-side share of decisions, and
// how long after the onset (and after the end) that share took to move
// 90% of the way to its new level.
//
// # What the model shows about the paper's rule
//
// Under saturation the rule balances the two queues as the paper says:
// adaptive matches or beats the best fixed ratio at every core count and
// reaches about 99% of server-only + client-only at one core.
//
// Without saturation it need not. With the paper's numbers one-sided reads
// are cheaper per search (M/NICRate = 4.8µs of NIC time) than a
// server-side search (1/CoreRate = 6.25µs of CPU time), and the rule
// compares queueing plus service after subtracting one minimum round trip
// from each side: it does not charge a client-side search its M−1 extra
// round trips. With constant network latency (NetJitter 0) the minimum read
// latency is also the typical one, m·(l_r − RTT) stays near zero while the
// NIC is not busy, and the rule goes client-side at low load, where each
// search then takes five round trips instead of one. In a closed loop with
// few searches in flight that lowers throughput below server-only; in the
// Fig. 7 setup a client without pipelining needs ~80µs per client-side
// search but is handed one every 75µs, so it falls behind before the
// spike. With network latency spread around its minimum (NetJitter 2µs),
// l_r − RTT grows by the spread, the rule keeps base load server-side and
// moves it to the client side during the spike, as in the paper. The
// selector's low-load choice thus depends on the latency spread, not on
// queueing; the tests pin both behaviours.
package sim
