package server

import (
	"fmt"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/cellstore/cell/meganode"
	"github.com/cellstore/cell/server/rsm"
)

// BenchmarkSplitPlacement times one split of a full meganode (issue #4:
// "Time to split a full 64 MiB meganode, locally and remotely"): a
// meganode of -split.mega bytes filled to 75% with 16-byte keys and
// 16-byte values by direct applies, then split once into a meganode of
// the same region (local) or of a second server's region over loopback
// TCP (remote: the entries and values travel in SplitAppend batches).
// Run with -benchtime 1x; the fill is not timed.
func BenchmarkSplitPlacement(b *testing.B) {
	for _, place := range []Placement{PlaceLocal, PlaceRemote} {
		b.Run("placement="+string(place), func(b *testing.B) {
			for range b.N {
				b.StopTimer()
				srvs, _ := startCluster(b, 2, func(i int, o *Options) {
					o.MeganodeSize = 64 << 20
					o.RegionSize = 1 << 30
					o.SplitFill = 1 // the benchmark splits by hand
					o.SplitPlacement = place
					o.Hugepages = meganode.HugepagesAuto
					o.Logger = discardLogger()
				})
				s := srvs[0]
				x := s.servedMeganode(s.Root())
				val := []byte("value-0123456789")
				n := 0
				for ; x.T.Fill() < 0.75; n++ {
					key := fmt.Appendf(nil, "key-%012d", uint64(n)*2654435761%(1<<40))
					if _, err := s.reps.own.propose(rsm.AppendRecord(nil, &rsm.Record{Kind: rsm.KindPut, Meganode: x.Ptr(), Key: key, Value: val})); err != nil {
						b.Fatalf("fill at %d keys: %v", n, err)
					}
				}
				b.StartTimer()
				start := time.Now()
				if !s.splits.runSplit(x) {
					b.Fatal("split failed")
				}
				d := time.Since(start)
				b.StopTimer()
				b.ReportMetric(float64(n), "keys")
				b.ReportMetric(d.Seconds(), "s/split")
				for _, s := range srvs {
					if err := s.Check(); err != nil {
						b.Fatal(err)
					}
				}
			}
		})
	}
}

func discardLogger() *slog.Logger {
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
}
