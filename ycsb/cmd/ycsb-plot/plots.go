package main

import (
	"fmt"
	"image/color"
	"path/filepath"
	"strconv"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
)

// Plot sizes.
const (
	plotWidth  = 24 * vg.Centimeter
	plotHeight = 13 * vg.Centimeter
)

// writePlots writes throughput.png and one latency-WORKLOAD.png per
// workload into dir.
func writePlots(dir string, r *results) error {
	if err := throughputPlot(filepath.Join(dir, "throughput.png"), r); err != nil {
		return err
	}
	for _, wl := range r.workloads {
		if err := latencyPlot(filepath.Join(dir, "latency-"+wl+".png"), r, wl); err != nil {
			return err
		}
	}
	return nil
}

// throughputPlot draws the median throughput of each store per workload
// as grouped bars (each repeat is in the table).
func throughputPlot(path string, r *results) error {
	p := plot.New()
	p.Title.Text = "YCSB throughput per workload (median of the repeats)"
	p.Y.Label.Text = "operations/s"
	p.Y.Min = 0
	p.Y.Tick.Marker = integerTicks{}
	n := len(r.stores)
	top := 0.0
	width := vg.Points(min(40, 360/float64(n*len(r.workloads))))
	for i, s := range r.stores {
		medians := make(plotter.Values, len(r.workloads))
		for j, wl := range r.workloads {
			medians[j] = median(r.values(s.name, wl, "TOTAL", func(o opStats) float64 { return o.ops }))
			top = max(top, medians[j])
		}
		bars, err := plotter.NewBarChart(medians, width)
		if err != nil {
			return err
		}
		bars.Color = storeColor(i)
		bars.LineStyle.Width = 0
		bars.Offset = width * vg.Length(float64(i)-float64(n-1)/2)
		p.Add(bars)
		p.Legend.Add(s.name, bars)
	}
	p.NominalX(r.workloads...)
	p.Y.Max = top * 1.25 // room for the legend above the bars
	p.Legend.Top = true
	return p.Save(plotWidth, plotHeight, path)
}

// latencyPlot draws the latency CDF of each operation kind of workload,
// per store, from the first repeat: x latency (µs, log scale), y the
// fraction of operations at or below it. The marks are the points of
// go-ycsb's HdrHistogram export (0, 50, 75, 87.5, ... %: one tick per
// half distance to 100%), the lines join them: the CDF is exact at the
// marks only.
func latencyPlot(path string, r *results, workload string) error {
	p := plot.New()
	p.Title.Text = fmt.Sprintf("YCSB %s: latency CDF per operation (first repeat; marks: HdrHistogram points)", workload)
	p.X.Label.Text = "latency, µs (log scale)"
	p.Y.Label.Text = "fraction of operations ≤ latency"
	p.X.Scale = plot.LogScale{}
	p.X.Tick.Marker = plot.LogTicks{Prec: -1}
	p.Y.Min, p.Y.Max = 0, 1
	// Bottom right: the CDFs climb from the left, so that corner (slow
	// operations, low fractions) stays empty.
	p.Legend.Left, p.Legend.Top = false, false
	ops := r.opsOf(workload)
	lines := 0
	for i, s := range r.stores {
		runs := r.runs[s.name][workload]
		if len(runs) == 0 {
			continue
		}
		for j, op := range ops {
			steps := runs[0].cdf[op]
			if len(steps) == 0 {
				continue
			}
			pts := make(plotter.XYs, 0, len(steps))
			for _, st := range steps {
				pts = append(pts, plotter.XY{X: max(st.us, 1), Y: st.fraction})
			}
			l, pt, err := plotter.NewLinePoints(pts)
			if err != nil {
				return err
			}
			l.Color, pt.Color = storeColor(i), storeColor(i)
			l.Dashes = plotutil.Dashes(j)
			l.Width = vg.Points(1.2)
			pt.Shape = plotutil.Shape(j)
			pt.Radius = vg.Points(2)
			p.Add(l, pt)
			p.Legend.Add(s.name+" "+strings.ToLower(op), l, pt)
			lines++
		}
	}
	if lines == 0 {
		return fmt.Errorf("%s: no latency spectra (histogram.percentiles.export)", workload)
	}
	return p.Save(plotWidth, plotHeight, path)
}

// integerTicks are plot.DefaultTicks labelled without decimals
// (operations/s in the thousands need none).
type integerTicks struct{}

// Ticks returns the default ticks with integer labels.
func (integerTicks) Ticks(lo, hi float64) []plot.Tick {
	ticks := plot.DefaultTicks{}.Ticks(lo, hi)
	for i := range ticks {
		if ticks[i].Label != "" {
			ticks[i].Label = strconv.FormatFloat(ticks[i].Value, 'f', 0, 64)
		}
	}
	return ticks
}

// palette is Okabe and Ito's colour-blind-safe palette (yellow left
// out: unreadable on white), one colour per store; plotutil's default
// palette has two reds.
var palette = []color.RGBA{
	{0x00, 0x00, 0x00, 0xff}, // black
	{0xe6, 0x9f, 0x00, 0xff}, // orange
	{0x56, 0xb4, 0xe9, 0xff}, // sky blue
	{0x00, 0x9e, 0x73, 0xff}, // bluish green
	{0x00, 0x72, 0xb2, 0xff}, // blue
	{0xd5, 0x5e, 0x00, 0xff}, // vermillion
	{0xcc, 0x79, 0xa7, 0xff}, // reddish purple
}

// storeColor returns the i-th store's colour.
func storeColor(i int) color.Color { return palette[i%len(palette)] }
