// Package locality decides, per meganode hop, whether a search runs on the
// server (one RPC that the server's CPU answers) or on the client (m
// one-sided reads that only the server's NIC serves). It implements the
// locality selector of the Cell paper ("Balancing CPU and Network in the Cell
// Distributed B-Tree Store", USENIX ATC '16, §2.5) exactly, plus fixed modes
// for benchmarks. docs/design.md §7 fixes the contract.
//
// # The rule
//
// Each server is modelled as two independent queues: Q_s, the CPU that runs
// server-side searches, and Q_r, the NIC that serves one-sided reads. Jobs
// have fixed sizes, so the best policy is Join-the-Shortest-Queue after
// normalising each queue's length by its service rate; a client-side search
// costs m reads. With l_s the latency of a server-side search and l_r the
// latency of one one-sided read, both of which include one round trip RTT,
// a client chooses the server side when
//
//	(l_s − RTT) < m · (l_r − RTT)
//
// and the client side otherwise. The terms are estimated as the paper says:
//
//   - l_s, l_r: moving averages of the most recent n (Options.Window, 100)
//     samples per server connection (an Estimator).
//   - Outliers: a sample s with |s − μ| ≥ Kσ (Options.OutlierK, 3), μ and σ
//     the mean and standard deviation of the window, is discarded. If more
//     samples were discarded than kept in one moving period, that estimate's
//     history is discarded. The moving period is the last n samples offered
//     to the estimate, kept or not, so the reset fires on the first sample
//     after which discarded samples outnumber kept ones among the last n:
//     after n/2+1 samples of a sudden level shift, not at the end of a fixed
//     block. Outliers are judged only once the window holds
//     Options.MinSamples samples (the paper gives no number; σ of two
//     samples means nothing), and a sample equal to μ is never an outlier
//     (with σ = 0 the inequality would otherwise discard it). A window of
//     identical samples (σ = 0) admits only that value until discarded
//     samples outnumber kept ones; measured latencies in nanoseconds are
//     practically never all equal.
//   - RTT: the lowest one-sided read latency measured on the connection,
//     every sample counted, outliers included (a fast read is the best
//     evidence of the bare round trip).
//   - m: the running average meganode height over the last n heights
//     reported by ObserveHeight, 5 (Options.InitialHeight) until the first.
//     It is per Selector (per client), not per connection.
//   - Exploration: with probability p (Options.Explore, 1%) the method
//     estimated to be worse is chosen, so that the estimate of the other
//     queue stays fresh.
//   - Idle: a connection on which nothing was chosen or observed for
//     Options.IdleTimeout (3 s) loses its whole history (both windows and
//     RTT) on its next use.
//
// Cold start, which the paper does not describe: while l_s has no sample the
// rule cannot be evaluated and the server side is chosen; once l_s has one
// but l_r has none, the client side is chosen. Each estimate thus gets its
// first sample from the first search that can give it, instead of waiting
// for exploration. These choices are not counted as exploration.
//
// Samples are latencies measured by the client: ObserveServer is called
// once per server-side meganode search (the RPC's round trip), ObserveRead
// once per one-sided read of a client-side search (or ObserveReadsAt once
// per client-side hop with the latencies of its reads, in order: the same
// samples). The server reports its
// queueing and service time with every reply (docs/design.md §5); the estimator
// keeps their moving averages over the same kept samples, and uses the
// queueing times as "Queue-aware estimate" below says.
//
// # Modes
//
// Mode selects the policy: adaptive (the rule above), server (always
// server-side), client (always client-side) and ratio=P: exactly P% of the
// searches on each connection go server-side, spread evenly (a credit
// accumulator with a random starting phase per connection) rather than
// drawn at random, so that a fixed ratio performs as well as that ratio can
// and benchmarks against it are not blurred by routing noise. Estimates are
// kept in every mode, so a snapshot shows what the rule would have seen.
//
// # Concurrency and cost
//
// A Selector belongs to one client and is safe for concurrent use. It holds
// one Estimator per server connection; a connection may keep its Estimator
// (Selector.Estimator) and call it directly to skip the map lookup.
// Every Estimator has its own mutex and random stream, so connections do not
// contend; m is published through an atomic word. Choose and the Observe
// methods take O(1) time (sums are kept incrementally and recomputed exactly
// once per n samples to bound floating-point drift) and do not allocate,
// except the first time a server ID is seen.
//
// The client calls the selector on every hop and every one-sided read, so
// its cost shows in a client-side get's CPU time (docs/bench-history.md §5b,
// "Selector overhead"). The cheap forms give the same decisions: ChooseAt,
// ObserveReadAt and ObserveServerAt take a time the caller already read
// (the clock is only used to detect idleness, at the scale of
// IdleTimeout, and a connection's last use never moves back);
// ObserveReadsAt takes a hop's reads under one lock; and ObserveHeight of
// the height that filled the whole window returns without the lock, since
// it changes nothing.
//
// Locking notes: Selector.mu < Estimator.mu; Selector.heightMu is a leaf.
//
// # Reads that cost the server CPU (Cell's refinement, measured)
//
// The paper assumes the server's CPU queue and its NIC's read queue are
// independent (§2.5). That holds for RDMA NICs and for the same-host shm
// provider, whose reads never touch the server's CPU. It does not hold
// for the TCP stand-in provider: each one-sided read is a syscall and a
// copy on the server, costing about as much server CPU as a whole
// server-side search step, so a client-side search (m node reads and a
// record read) costs the server several times more than a server-side one.
// Under load, the paper's rule sees l_s grow and moves searches to the
// client side, which adds load to the very CPU it tries to relieve.
// Clients therefore mark such servers with
// Estimator.SetReadsShareServerCPU (from rdma.Caps.SparesServerCPU), and in
// adaptive mode those servers are searched server-side, without
// exploration. Options.PaperRule restores the paper's rule for side-by-side
// measurement (`cellctl bench --paper-rule`); BENCHMARKS.md records both.
//
// # Exploration by time (Cell's refinement, measured)
//
// The paper explores with probability p = 1% per search. Its purpose is
// to keep the estimate of the path not taken fresh, and the window holds
// n = 100 samples: at a few thousand searches per second on a connection
// 1% refreshes it in seconds, but a same-host client doing 400K hops per
// second explores 4,000 times a second, 40 windows' worth, and each
// exploring hop costs the client a round trip through the worse path (on
// this machine an RPC costs the client ~35 µs of CPU against ~2.5 µs for a
// whole client-side get). So exploration is also capped in time:
// Options.MaxExploreRate tokens per second per connection (default
// 2·Window, the window refreshed twice a second), a bucket of one second's
// worth; a draw below p explores only if it gets a token. Below 2·Window/p
// hops per second (20,000) nothing changes. PaperRule removes the cap;
// BENCHMARKS.md §4 measures both.
//
// # Exploration by cost (Cell's refinement, measured)
//
// Under the cap, a same-host client whose client-side hops take 2 µs
// still explored the server 200 times a second per connection, each
// exploring hop an RPC of about 85 µs and 35 µs of the client's CPU plus
// the server's: on YCSB-C over shm adaptive spent 25% more CPU per
// operation than the fixed client mode (docs/bench-history.md §19). So, unless
// PaperRule, while client-side hops are the cheaper (their cost m·l_r
// below a server-side hop's l_s), the probability of exploring the server
// is p·m·l_r/l_s, as range pages do: exploring then spends about p of the
// hops' time, not p of the hops. And every connection explores at least
// once a second (with exploration on and both estimates known), so that
// l_s is never stale for long. While server-side hops are the cheaper,
// client-side ones are explored with p unscaled: scaling those too was
// measured and dropped — in the saturated Table 2 simulation the
// client-side estimate then lags and the selector keeps too many searches
// server-side (0.93 of the best fixed ratio at 8 cores in locality/sim's
// TestTable2, which wants 0.98). In the simulations the scaling hardly
// binds: Table 2 within 1% at every core count, the Fig. 7 spike
// identical for six seeds (there a client-side hop is never cheaper than
// a server-side one in absolute time, only once the round trips are taken
// off as the rule does).
//
// # Queue-aware estimate (Cell's refinement, measured)
//
// The idea of RF-RPC (a server's own account of its load tells clients
// more, sooner, than latencies do), applied to l_s. A server getting busy
// is seen within a few replies already: their latencies are outliers of
// the window, which is reset once they outnumber the kept samples. A
// server idle again after a burst is not: the client has moved its
// searches to the client side, l_s gets new samples only from the 1% it
// explores, and the window still holds the burst's latencies until they
// are pushed out, which took about a second after the paper's Fig. 7
// spike in the simulation. So, unless Options.IgnoreServerTimes (or
// PaperRule), when the short average (8 replies, exponential) of the
// queueing times the latest replies reported is below the mean the
// window's replies reported, l_s is taken as the window's mean latency
// less that mean plus the short average: round trip, service and network
// from the window, queueing from the latest replies. Never higher than the
// paper's estimate. Measured side by side with the paper's estimate
// (BENCHMARKS.md §4): Table 2 unchanged (within 1% at every core count);
// after the Fig. 7 spike the server-side share is back in 0.25–0.36 s
// instead of 0.93–1.20 s over six seeds, p90 after the spike 88–94 µs
// instead of 0.16–36 ms, base load and the spike's median unchanged.
//
// # Range pages (Cell's addition, measured)
//
// A range page is priced by neither l_s nor l_r: server-side it is one
// Range call returning up to a page of pairs (the server walks the
// leaves and copies the pairs), client-side a search for the first leaf
// and then, leaf by leaf along the right links, one node read and one
// vector read of the leaf's records. So ChoosePage decides pages apart
// from hops, from measured pages: each Estimator keeps two more
// estimates, the cost per pair of server-side and of client-side pages,
// fed by ObservePage with a page's latency as the client measured it
// divided by the pairs it returned (at least 1). Per pair, so that pages
// of different sizes (YCSB-E asks for 1 to 100 pairs) average into one
// figure per method; both methods see the same mix of sizes, since
// exploration picks pages at random. ChoosePage takes the method with the
// lower average (ties client-side), with the hops' machinery: the same
// window, outlier rejection and moving-period reset, the same cold start
// (server-side until a server-side page was measured, then client-side
// until a client-side one was), and the idle reset with the rest.
//
// Exploration is by cost: with probability p·lo/hi, lo and hi the
// cheaper and the dearer cost per pair, so that exploring spends about p
// of the time the pages take (an exploring page costs hi instead of lo),
// capped by MaxExploreRate in a token bucket of the pages' own (hops
// would otherwise take every token), and at least once a second per
// connection, so that the dearer estimate is never stale for long. The
// paper's flat p cost too much here: the dearer way is often 20 to 1000
// times dearer per pair (a Range call queued behind log writes at a
// one-core server against a leaf walk over shm; two tcp round trips per
// leaf against one Range call), and 1% of the pages explored flat
// doubled the mean scan latency over shm and cost 11% of the
// throughput over tcp (BENCHMARKS.md §4). PaperRule restores flat p.
// The modes force the method as for hops; ratio=P keeps a credit of its
// own for pages, so that P% of the pages go server-side however they
// interleave with hops. Decisions are counted apart (PageDecisions).
//
// The hop rule's refinement for servers whose one-sided reads cost their
// CPU (tcp) does not apply: a page's measured latency includes the
// server's CPU queue for those reads, and a client-side page over tcp
// costs the server CPU of a few reads, not of m per hop.
//
// Time comes from Options.Clock and randomness from a PCG stream per
// Estimator seeded from Options.Seed and the server ID, so a run with a
// fixed seed and a virtual clock is deterministic (locality/sim relies on
// it).
package locality
