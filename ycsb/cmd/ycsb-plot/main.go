// Command ycsb-plot turns the raw outputs of test/ycsb.sh into the
// comparison's Markdown tables and PNG plots (gonum/plot):
//
//	ycsb-plot -in OUT/raw -stores OUT/stores.tsv -table OUT/table.md -png docs/ycsb
//
// -in holds one cell-ycsb run output per store, workload and repeat,
// named STORE__WORKLOAD__rN.txt (go-ycsb's measurements with
// outputstyle=json, the last JSON line being the final one), and the
// latency spectra go-ycsb exports beside them
// (histogram.percentiles.export: STORE__WORKLOAD__rN__OP-percentiles.txt,
// HdrHistogram's percentile format, values in µs). -stores lists the
// stores in the order of the columns, one per line: name, a tab, a label
// with its durability settings.
//
// The tables give, per workload, each store's throughput (go-ycsb's
// TOTAL operations per second) in every repeat and their median, the
// ratios of the first store's median to the others', and the p50 and
// p99 of each operation kind (medians over the repeats). The plots are
// throughput.png (grouped bars: workloads × stores, medians, each
// repeat a dot) and latency-WORKLOAD.png (the latency CDF of each
// operation kind of the workload per store, from the first repeat:
// HdrHistogram spectra of different runs cannot be merged from their
// printed form).
package main

import (
	"flag"
	"fmt"
	"os"
)

func main() {
	var o options
	flag.StringVar(&o.in, "in", "", "directory of the raw outputs (STORE__WORKLOAD__rN.txt and percentile files)")
	flag.StringVar(&o.stores, "stores", "", "file of the stores: name<TAB>label, in column order")
	flag.StringVar(&o.table, "table", "", "write the Markdown tables here (default stdout)")
	flag.StringVar(&o.png, "png", "", "write the PNG plots into this directory (none when empty)")
	flag.Parse()
	if err := run(o); err != nil {
		fmt.Fprintln(os.Stderr, "ycsb-plot:", err)
		os.Exit(1)
	}
}

// options are the command's flags.
type options struct {
	in, stores, table, png string
}

// run reads the results, writes the tables and the plots.
func run(o options) error {
	if o.in == "" || o.stores == "" {
		return fmt.Errorf("-in and -stores are required")
	}
	stores, err := readStores(o.stores)
	if err != nil {
		return err
	}
	res, err := readResults(o.in, stores)
	if err != nil {
		return err
	}
	out := os.Stdout
	if o.table != "" {
		f, err := os.Create(o.table)
		if err != nil {
			return err
		}
		defer f.Close()
		out = f
	}
	if err := writeTables(out, res); err != nil {
		return err
	}
	if o.png == "" {
		return nil
	}
	if err := os.MkdirAll(o.png, 0o755); err != nil {
		return err
	}
	return writePlots(o.png, res)
}
