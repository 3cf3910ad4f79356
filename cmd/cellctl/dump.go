package main

import (
	"context"
	"encoding/hex"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	"github.com/cellstore/cell/blink"
	"github.com/cellstore/cell/wire"
)

func newDumpCommand(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "dump",
		Short: "Dump a node or a meganode as the server holds it",
		Long: `Read nodes out of a server's region with NodeDump (copied the way a
one-sided read copies them) and decode them: "dump node PTR|root" for one node (root: the tree's root node),
"dump meganode PTR|root" for a meganode's header and every node of its
local tree, level by level. Pointers are written region:offset, as cellctl
prints them (status lists the meganodes), or as a number.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
	cmd.AddCommand(newDumpNodeCommand(g), newDumpMeganodeCommand(g))
	return cmd
}

// nodeDump is one node as dump prints it (JSON).
type nodeDump struct {
	Ptr string `json:"ptr"`
	// Check is blink.CheckCopy's verdict on the copy: ok, torn, invalid
	// (a free or invalidated node), corrupt; "ok (meganode header)" for a
	// header that blink.DecodeHeader accepts.
	Check       string `json:"check"`
	Description string `json:"description"`
	Hex         string `json:"hex,omitempty"`
	// Annotated is blink.AnnotatedHex (with --hex).
	Annotated string `json:"annotated,omitempty"`
}

// copyCheck is blink.CheckCopy's verdict, or for a meganode header (which
// CheckCopy calls invalid: it is not a tree node) blink.DecodeHeader's.
func copyCheck(b []byte) string {
	r := blink.CheckCopy(b)
	if r == blink.Invalid {
		if _, hr := blink.DecodeHeader(b); hr == blink.OK {
			return "ok (meganode header)"
		}
	}
	return r.String()
}

func describeNode(p blink.Ptr, b []byte, withHex bool) nodeDump {
	d := nodeDump{Ptr: p.String(), Check: copyCheck(b), Description: blink.DescribeNode(b)}
	if withHex {
		d.Hex = hex.EncodeToString(b)
		d.Annotated = blink.AnnotatedHex(b)
	}
	return d
}

// writeNode prints one node: its pointer and check, then the description
// or, with --hex, the annotated hex dump.
func writeNode(sb *strings.Builder, d nodeDump, withHex bool) {
	fmt.Fprintf(sb, "node %s (copy %s)\n", d.Ptr, d.Check)
	body := d.Description
	if withHex {
		body = strings.TrimRight(d.Annotated, "\n")
	}
	for _, l := range strings.Split(body, "\n") {
		sb.WriteString("  ")
		sb.WriteString(l)
		sb.WriteByte('\n')
	}
}

func newDumpNodeCommand(g *globals) *cobra.Command {
	var withHex bool
	cmd := &cobra.Command{
		Use:   "node PTR|root",
		Short: "Dump one node: versions, flags, bounds, right link and entries",
		Long: `Dump the node at PTR ("root": the root node of the tree, the local root
of the region table's root meganode): blink.DescribeNode's summary, or
with --hex the annotated hex dump (every field named; raw hex for
meganode headers and free nodes).`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var p blink.Ptr
			if !strings.EqualFold(args[0], "root") {
				var err error
				if p, err = parsePtr(args[0]); err != nil {
					return err
				}
			}
			ctx, cancel := g.commandContext()
			defer cancel()
			src, err := openDumpSource(ctx, g, p)
			if err != nil {
				return err
			}
			defer src.close()
			if p == 0 {
				if p, err = src.rootNode(ctx); err != nil {
					return err
				}
			}
			b, err := src.node(ctx, p)
			if err != nil {
				return err
			}
			d := describeNode(p, b, withHex)
			var sb strings.Builder
			writeNode(&sb, d, withHex)
			return g.printText(d, sb.String())
		},
	}
	cmd.Flags().BoolVar(&withHex, "hex", false, "print the annotated hex dump")
	return cmd
}

// printText prints a dump: v as JSON or fields, else (simple, and table:
// a dump is text, not a table) text.
func (g *globals) printText(v any, text string) error {
	switch g.output {
	case formatJSON:
		return g.printJSON(v)
	case formatFields:
		return g.printFields(v)
	}
	_, err := io.WriteString(g.stdout, text)
	return err
}

// meganodeDump is the JSON output of dump meganode.
type meganodeDump struct {
	Meganode string      `json:"meganode"`
	Header   nodeDump    `json:"header"`
	Level    int         `json:"level"`  // in the global tree, 0: a leaf meganode
	Height   int         `json:"height"` // local height
	Root     string      `json:"root"`
	InUse    int         `json:"in_use"`
	Capacity int         `json:"capacity"`
	Levels   []levelDump `json:"levels"`
	Skipped  int         `json:"skipped_levels,omitempty"` // below --levels
}

type levelDump struct {
	Level int        `json:"level"` // local level, 0: leaves
	Nodes []nodeDump `json:"nodes"`
}

func newDumpMeganodeCommand(g *globals) *cobra.Command {
	var withHex bool
	var levels int
	cmd := &cobra.Command{
		Use:   "meganode PTR|root",
		Short: "Dump a meganode: its header, then every node level by level",
		Long: `Dump the meganode whose header is at PTR ("root": the root meganode of
the region table): the decoded header, then the nodes of its local tree
from the local root down, each level from left to right along the right
links that stay inside the meganode. --levels bounds how many levels are
printed (0: all); --hex prints annotated hex dumps.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if levels < 0 {
				return fmt.Errorf("--levels %d: want 0 (all) or more", levels)
			}
			ctx, cancel := g.commandContext()
			defer cancel()
			var p blink.Ptr
			if !strings.EqualFold(args[0], "root") {
				var err error
				if p, err = parsePtr(args[0]); err != nil {
					return err
				}
			}
			src, err := openDumpSource(ctx, g, p)
			if err != nil {
				return err
			}
			defer src.close()
			if p == 0 {
				p = src.root
			}
			d, err := src.meganode(ctx, p, levels, withHex)
			if err != nil {
				return err
			}
			return g.printText(d, meganodeText(d, withHex))
		},
	}
	cmd.Flags().BoolVar(&withHex, "hex", false, "print annotated hex dumps")
	cmd.Flags().IntVar(&levels, "levels", 0, "levels to print from the local root down (0: all)")
	return cmd
}

func meganodeText(d meganodeDump, withHex bool) string {
	var sb strings.Builder
	fmt.Fprintf(&sb, "meganode %s: level %d, local height %d, root %s, nodes %d/%d\n", d.Meganode, d.Level, d.Height, d.Root, d.InUse, d.Capacity)
	writeNode(&sb, d.Header, withHex)
	for _, l := range d.Levels {
		fmt.Fprintf(&sb, "\nlevel %d: %s\n", l.Level, plural(len(l.Nodes), "node"))
		for _, n := range l.Nodes {
			writeNode(&sb, n, withHex)
		}
	}
	if d.Skipped > 0 {
		fmt.Fprintf(&sb, "\n(%s not printed: --levels)\n", plural(d.Skipped, "lower level"))
	}
	return sb.String()
}

// dumpSource reads nodes of one region from its server.
type dumpSource struct {
	conn         *wire.Conn
	nodeSize     int
	meganodeSize uint64
	root         blink.Ptr
}

// openDumpSource connects to the server hosting p's region (p == 0: the
// root meganode's).
func openDumpSource(ctx context.Context, g *globals, p blink.Ptr) (*dumpSource, error) {
	eps, err := g.etcdEndpoints()
	if err != nil {
		return nil, err
	}
	store, err := g.openTable()
	if err != nil {
		return nil, err
	}
	defer store.Close()
	st, err := loadTable(ctx, store, eps)
	if err != nil {
		return nil, err
	}
	if p == 0 {
		if p = st.Root; p == 0 {
			return nil, fmt.Errorf("the region table has no root meganode yet")
		}
	}
	host := ""
	for _, r := range st.Regions {
		if r.ID == p.Region() {
			host = r.Host
		}
	}
	if host == "" {
		return nil, fmt.Errorf("pointer %v: region %d is not in the region table", p, p.Region())
	}
	addr := ""
	for _, m := range st.Members {
		if m.ID == host {
			addr = m.RPCAddr
		}
	}
	if addr == "" {
		return nil, fmt.Errorf("pointer %v: region %d's server %s is not a live member", p, p.Region(), host)
	}
	c, err := g.dialServer(ctx, addr)
	if err != nil {
		return nil, err
	}
	md, err := metadata(ctx, c, false)
	if err != nil {
		c.Close()
		return nil, err
	}
	return &dumpSource{conn: c, nodeSize: int(md.NodeSize), meganodeSize: md.MeganodeSize, root: st.Root}, nil
}

func (s *dumpSource) close() { _ = s.conn.Close() }

// tornRetries bounds the re-reads of a node that a writer was changing.
const tornRetries = 100

// node reads the node at p, again while the copy is torn (a writer was
// changing it); the last copy is returned whatever its state.
func (s *dumpSource) node(ctx context.Context, p blink.Ptr) ([]byte, error) {
	for i := 0; ; i++ {
		f, err := s.conn.CallMessage(ctx, wire.OpNodeDump, &wire.NodeDumpRequest{Ptr: p})
		if err != nil {
			return nil, fmt.Errorf("node %v: %w", p, err)
		}
		var rep wire.NodeDumpReply
		err = rep.Decode(f.Body)
		b := append([]byte(nil), rep.Data...)
		f.Release()
		if err != nil {
			return nil, fmt.Errorf("node %v: %w", p, err)
		}
		if blink.CheckCopy(b) != blink.Torn || i == tornRetries {
			return b, nil
		}
	}
}

// rootNode returns the root node of the tree: the local root of the root
// meganode, read from its header. The root meganode is on this source's
// server (openDumpSource with a nil pointer).
func (s *dumpSource) rootNode(ctx context.Context) (blink.Ptr, error) {
	hb, err := s.node(ctx, s.root)
	if err != nil {
		return 0, err
	}
	h, r := blink.DecodeHeader(hb)
	if r != blink.OK {
		return 0, fmt.Errorf("root meganode %v: the header does not decode (%v)", s.root, r)
	}
	if h.Root.IsNil() {
		return 0, fmt.Errorf("root meganode %v has no root node", s.root)
	}
	return h.Root, nil
}

// inside reports whether p is a node of the meganode whose header is at mp.
func (s *dumpSource) inside(mp, p blink.Ptr) bool {
	return p.Region() == mp.Region() && p.Offset() > mp.Offset() && p.Offset() < mp.Offset()+s.meganodeSize
}

// meganode reads the header at mp and the local tree's nodes, level by
// level, at most maxLevels of them (0: all).
func (s *dumpSource) meganode(ctx context.Context, mp blink.Ptr, maxLevels int, withHex bool) (meganodeDump, error) {
	hb, err := s.node(ctx, mp)
	if err != nil {
		return meganodeDump{}, err
	}
	h, r := blink.DecodeHeader(hb)
	if r != blink.OK {
		first, _, _ := strings.Cut(blink.DescribeNode(hb), "\n")
		return meganodeDump{}, fmt.Errorf("%v is not a meganode header (%v): %s", mp, r, first)
	}
	d := meganodeDump{
		Meganode: mp.String(), Header: describeNode(mp, hb, withHex),
		Level: h.Level, Height: h.Height, Root: h.Root.String(), InUse: h.InUse, Capacity: h.Capacity,
	}
	first := h.Root
	for lvl := h.Height - 1; lvl >= 0 && !first.IsNil(); lvl-- {
		if maxLevels > 0 && len(d.Levels) == maxLevels {
			d.Skipped = lvl + 1
			break
		}
		ld := levelDump{Level: lvl}
		next := blink.Ptr(0)
		seen := map[blink.Ptr]bool{}
		for p := first; !p.IsNil() && s.inside(mp, p) && !seen[p]; {
			seen[p] = true
			b, err := s.node(ctx, p)
			if err != nil {
				return d, err
			}
			ld.Nodes = append(ld.Nodes, describeNode(p, b, withHex))
			if blink.CheckCopy(b) != blink.OK {
				break // a right link or child of a bad copy means nothing
			}
			v := blink.View(b)
			if next.IsNil() && v.Level() > 0 && v.Count() > 0 {
				next = v.Child(0)
			}
			p = v.RightLink()
		}
		d.Levels = append(d.Levels, ld)
		first = next
	}
	return d, nil
}
