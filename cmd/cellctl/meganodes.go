package main

import (
	"fmt"
	"strings"

	"github.com/spf13/cobra"
)

// meganodesResult is the JSON output of meganodes.
type meganodesResult struct {
	Root         string        `json:"root"`
	Levels       int           `json:"levels"`
	NodeSize     uint32        `json:"node_size"`
	MeganodeSize uint64        `json:"meganode_size"`
	Meganodes    []meganodeRow `json:"meganodes"`
	// Errors lists the servers that did not answer ("id: error").
	Errors []string `json:"errors,omitempty"`
}

// meganodeRow is one meganode of the tree.
type meganodeRow struct {
	meganodeStatus
	Host  string `json:"host"`  // the server that reported it
	Right string `json:"right"` // its right link, "nil" at +inf
	Root  bool   `json:"root,omitempty"`
	// Split is its part in a split in progress: "source", "source,
	// linked" or "target"; empty when none.
	Split string `json:"split,omitempty"`
}

func newMeganodesCommand(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "meganodes",
		Short: "List the tree of meganodes: range, level, height, fill, host, right link",
		Long: `Ask every live member for its meganodes and list them all in the
tree's order: by level from the root down (level 0 holds the leaf
meganodes), then by key range. For each: its pointer, level, local height,
key range [MIN, MAX), nodes in use of its capacity, the server hosting it,
and its right link (a node of the next meganode of its level; nil at +inf).
NOTE marks the root (the region table's root pointer) and meganodes taking
part in a split in progress. Servers that do not answer are listed under
the table, and meganodes then exits with status 1.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, cancel := g.commandContext()
			defer cancel()
			cl, err := g.collectCluster(ctx)
			if err != nil {
				return err
			}
			res := meganodesOutput(cl)
			if err := g.print(res, func() []*table { return []*table{meganodesTable(res)} }); err != nil {
				return err
			}
			if len(res.Errors) > 0 {
				return fmt.Errorf("%d of %d servers did not answer", len(res.Errors), len(cl.servers))
			}
			return nil
		},
	}
}

func meganodesOutput(cl *cluster) meganodesResult {
	res := meganodesResult{Root: cl.table.Root.String(), Meganodes: []meganodeRow{}, Errors: cl.failures()}
	for _, s := range cl.servers {
		if s.meta != nil && res.MeganodeSize == 0 {
			res.NodeSize, res.MeganodeSize = s.meta.NodeSize, s.meta.MeganodeSize
		}
	}
	ms := cl.meganodes()
	res.Levels = levels(ms)
	for _, m := range ms {
		row := meganodeRow{meganodeStatus: meganodeStatusOf(m.MeganodeStats), Host: m.server, Right: m.Right.String(), Root: m.Ptr == cl.table.Root}
		switch {
		case m.SplitSource && m.SplitLinked:
			row.Split = "source, linked"
		case m.SplitSource:
			row.Split = "source"
		case m.SplitTarget:
			row.Split = "target"
		}
		res.Meganodes = append(res.Meganodes, row)
	}
	return res
}

func meganodesTable(res meganodesResult) *table {
	t := &table{
		title: fmt.Sprintf("Meganodes (root %s, %s, %s; %s nodes, %s meganodes)",
			res.Root, plural(res.Levels, "level"), plural(len(res.Meganodes), "meganode"), fmtBytes(uint64(res.NodeSize)), fmtBytes(res.MeganodeSize)),
		header: []string{"MEGANODE", "LEVEL", "HEIGHT", "MIN", "MAX", "NODES", "FILL", "HOST", "RIGHT", "NOTE"},
	}
	for _, m := range res.Meganodes {
		var note []string
		if m.Root {
			note = append(note, "root")
		}
		if m.Split != "" {
			note = append(note, "split "+m.Split)
		}
		t.add(m.Ptr, fmt.Sprint(m.Level), fmt.Sprint(m.Height), m.Min, m.Max, fmt.Sprintf("%d/%d", m.Used, m.Capacity),
			fmt.Sprintf("%.1f%%", 100*m.Fill), m.Host, m.Right, dash(strings.Join(note, ", ")))
	}
	for _, e := range res.Errors {
		t.notes = append(t.notes, "error: "+e)
	}
	return t
}
