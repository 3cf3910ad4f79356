package rsm

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/cockroachdb/datadriven"

	"github.com/cellstore/cell/blink"
	"github.com/cellstore/cell/meganode"
	"github.com/cellstore/cell/wire"
)

// TestScenarios runs the scripts in testdata/scenarios: records in, the
// region's meganodes, keys and replicated state out (as pebble and etcd
// raft test theirs). Each script's records are also replayed onto a
// fresh machine (replay) and carried through a snapshot (snapshot), both
// of which must end byte-identical. Regenerate with -rewrite.
//
// Commands:
//
//	new [size=4MiB] [meganode=256KiB] [node=1KiB]
//	apply               one record a line (below); prints each outcome
//	get m=PTR key=K
//	scan m=PTR          a leaf meganode's keys and values
//	split-key m=PTR     where the meganode would split (a leaf boundary)
//	meganodes           the meganode table: slot, pointer, level, bounds, split state
//	state               the replicated state
//	replay              every record applied so far, onto a new machine: identical?
//	snapshot            a snapshot restored into a new machine: identical?
//
// get and scan show a key's version as @N (none before the version record).
// cond m=P key=K op=put|delete target=version|value|present|absent
// [cmp=eq|ne|lt|gt] [expect=N] [expect-value=V] [value=V] [client=C seq=S]
// is a conditional write.
//
// Records: fill m=P n=N [prefix=P] (puts of N keys); region; version; root-format; root-publish m=P; root-drop m=P;
// put m=P key=K value=V [client=C seq=S] [retry|floor|forgotten];
// delete m=P key=K [client=C seq=S] [flags]; child m=P key=K child=P;
// split-{start,copy,link,free,end,abort,root} m=P sep=K|auto [new=P]
// [batch=N] [cursor=K] [root=P] [entries=K:P,...];
// txn m=P [client=C seq=S] [reads=K@V,...] [ranges=START..END:LIMIT:K@V;K@V,...]
// [writes=K=V|-K,...] (a range's pairs are those the client saw: the line
// carries their count and hash; an empty END is +inf);
// target-{begin,append,commit,abort} (begin: sep=K max=K|inf level=N
// right=P source=P; append: m=P entries=K=V[@version],... (with @, the
// entries carry words); commit: m=P [clock=N]).
func TestScenarios(t *testing.T) {
	datadriven.Walk(t, "testdata/scenarios", func(t *testing.T, path string) {
		var h *scenario
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
			if d.Cmd != "new" && h == nil {
				d.Fatalf(t, "%s before new", d.Cmd)
			}
			switch d.Cmd {
			case "new":
				h = newScenario(t, d)
				return fmt.Sprintf("region %d: %d slots of %d KiB, nodes of %d bytes", h.m.ID(), h.m.Region().Layout().Slots, h.layout.MeganodeSize>>10, h.layout.NodeSize)
			case "apply":
				return h.apply(t, d)
			case "get":
				lm := h.meganode(t, d, "m")
				v, w, err := lm.T.GetWord([]byte(arg(t, d, "key")), nil)
				if errors.Is(err, blink.ErrNotFound) {
					return "not found"
				}
				if w.Version() != 0 {
					return scriptOutcome(fmt.Sprintf("%s @%d", v, w.Version()), err)
				}
				return scriptOutcome(string(v), err)
			case "scan":
				return h.scan(t, d)
			case "split-key":
				k, err := h.meganode(t, d, "m").T.SplitKey()
				return scriptOutcome(string(k), err)
			case "meganodes":
				return h.meganodes()
			case "state":
				return h.state()
			case "replay":
				return h.replay(t)
			case "snapshot":
				return h.snapshot(t)
			}
			d.Fatalf(t, "unknown command %q", d.Cmd)
			return ""
		})
	})
}

// scenario is one script's machine and the records applied to it.
type scenario struct {
	m      *Machine
	layout Layout
	log    [][]byte // the records applied, in order (index = position + 1)
	// names are the meganodes records made, named by the as=NAME of
	// their line, for later lines to use as $NAME.
	names map[string]blink.Ptr
	kind  string // the kind label of the last record applied
}

func newScenario(t *testing.T, d *datadriven.TestData) *scenario {
	l := testLayout
	for _, a := range d.CmdArgs {
		n := parseSize(t, d, a.Vals[0])
		switch a.Key {
		case "size":
			l.Size = n
		case "meganode":
			l.MeganodeSize = n
		case "node":
			l.NodeSize = uint32(n)
		}
	}
	h := &scenario{layout: l, names: map[string]blink.Ptr{}}
	h.m, _ = newMachine(t, 1, l, func(c *Config) {
		c.OnApply = func(_ uint64, _ []byte, kind string, _ error) { h.kind = kind }
	})
	return h
}

func parseSize(t *testing.T, d *datadriven.TestData, s string) uint64 {
	mult := uint64(1)
	for suffix, m := range map[string]uint64{"KiB": 1 << 10, "MiB": 1 << 20} {
		if v, ok := strings.CutSuffix(s, suffix); ok {
			s, mult = v, m
		}
	}
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		d.Fatalf(t, "size %q: %v", s, err)
	}
	return n * mult
}

func arg(t *testing.T, d *datadriven.TestData, key string) string {
	for _, a := range d.CmdArgs {
		if a.Key == key {
			return strings.Join(a.Vals, ",")
		}
	}
	d.Fatalf(t, "%s: no %s=", d.Cmd, key)
	return ""
}

// parsePtr reads a pointer as blink.Ptr prints it ("1:0x1000"), or a
// name a record bound ("$y").
func (h *scenario) parsePtr(s string) (blink.Ptr, error) {
	if name, ok := strings.CutPrefix(s, "$"); ok {
		p, ok := h.names[name]
		if !ok {
			return 0, fmt.Errorf("no meganode named %s", name)
		}
		return p, nil
	}
	return parsePtr(s)
}

// parsePtr reads a pointer as blink.Ptr prints it: "1:0x1000".
func parsePtr(s string) (blink.Ptr, error) {
	if s == "nil" || s == "0" {
		return 0, nil
	}
	reg, off, ok := strings.Cut(s, ":")
	if !ok {
		return 0, fmt.Errorf("pointer %q: want REGION:OFFSET", s)
	}
	r, err := strconv.ParseUint(reg, 10, 32)
	if err != nil {
		return 0, err
	}
	o, err := strconv.ParseUint(off, 0, 64)
	if err != nil {
		return 0, err
	}
	return blink.MakePtr(uint32(r), o), nil
}

func (h *scenario) meganode(t *testing.T, d *datadriven.TestData, key string) *Meganode {
	p, err := h.parsePtr(arg(t, d, key))
	if err != nil {
		d.Fatalf(t, "%v", err)
	}
	lm := h.m.MeganodeAt(p)
	if lm == nil {
		d.Fatalf(t, "%v is no meganode", p)
	}
	return lm
}

// apply encodes and applies each line of d's input as a record.
func (h *scenario) apply(t *testing.T, d *datadriven.TestData) string {
	var out strings.Builder
	for _, line := range strings.Split(strings.TrimSpace(d.Input), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if fill, ok := strings.CutPrefix(line, "fill "); ok {
			out.WriteString(h.fill(t, d, fill))
			continue
		}
		rec, as, err := h.encodeLine(line)
		if err != nil {
			d.Fatalf(t, "%s: %v", line, err)
		}
		h.log = append(h.log, rec)
		index := uint64(len(h.log))
		h.kind = "(refused before apply)"
		res, err := h.m.Apply(index, rec)
		if as != "" && !res.New.IsNil() {
			h.names[as] = res.New
		}
		fmt.Fprintf(&out, "%d %s: %s\n", index, h.kind, scriptOutcome(result(res), err))
	}
	return out.String()
}

// fill applies puts of keys PREFIX000 … PREFIX(n-1) (values v000 …) to
// meganode m: args "m=P n=N [prefix=P]". It prints the outcomes counted.
func (h *scenario) fill(t *testing.T, d *datadriven.TestData, args string) string {
	kv := map[string]string{"prefix": "k"}
	for _, w := range strings.Fields(args) {
		k, v, _ := strings.Cut(w, "=")
		kv[k] = v
	}
	n, err := strconv.Atoi(kv["n"])
	if err != nil {
		d.Fatalf(t, "fill: n=%q", kv["n"])
	}
	first := len(h.log) + 1
	counts := map[string]int{}
	for i := range n {
		rec, _, err := h.encodeLine(fmt.Sprintf("put m=%s key=%s%03d value=v%03d", kv["m"], kv["prefix"], i, i))
		if err != nil {
			d.Fatalf(t, "fill: %v", err)
		}
		h.log = append(h.log, rec)
		_, err = h.m.Apply(uint64(len(h.log)), rec)
		counts[scriptOutcome(h.kind, err)]++
	}
	var parts []string
	for _, k := range slices.Sorted(func(yield func(string) bool) {
		for k := range counts {
			if !yield(k) {
				return
			}
		}
	}) {
		parts = append(parts, fmt.Sprintf("%d %s", counts[k], k))
	}
	return fmt.Sprintf("%d-%d fill: %s\n", first, len(h.log), strings.Join(parts, ", "))
}

func result(r Result) string {
	var parts []string
	if r.Found {
		parts = append(parts, "found")
	}
	if r.CondFailed {
		parts = append(parts, "failed")
	}
	if r.TxnCause != 0 {
		parts = append(parts, "aborted="+wire.TxnCause(r.TxnCause).String())
	}
	if r.Next != nil {
		parts = append(parts, fmt.Sprintf("next=%q", r.Next))
	}
	if r.Done {
		parts = append(parts, "done")
	}
	if !r.Root.IsNil() {
		parts = append(parts, "root="+r.Root.String())
	}
	if !r.New.IsNil() {
		parts = append(parts, "new="+r.New.String())
	}
	if r.Version != 0 {
		parts = append(parts, fmt.Sprintf("version=%d", r.Version))
	}
	if len(parts) == 0 {
		return "ok"
	}
	return strings.Join(parts, " ")
}

// scriptOutcome is ok's text, or err's class and text.
func scriptOutcome(ok string, err error) string {
	switch {
	case err == nil:
		return ok
	case errors.Is(err, ErrBadRecord):
		return "bad record: " + err.Error()
	}
	return "error: " + err.Error()
}

// encodeLine encodes one script line as a record, and returns the name
// its as= gives the meganode it makes.
func (h *scenario) encodeLine(line string) (_ []byte, as string, _ error) {
	f := strings.Fields(line)
	kv := map[string]string{}
	var flags uint16
	for _, w := range f[1:] {
		k, v, ok := strings.Cut(w, "=")
		if !ok {
			switch w {
			case "retry":
				flags |= FlagRetry
			case "floor":
				flags |= FlagFloor
			case "forgotten":
				flags |= FlagForgotten
			default:
				return nil, "", fmt.Errorf("word %q", w)
			}
			continue
		}
		kv[k] = v
	}
	var perr error
	ptr := func(k string) blink.Ptr {
		if kv[k] == "" {
			return 0
		}
		p, err := h.parsePtr(kv[k])
		perr = errors.Join(perr, err)
		return p
	}
	num := func(k string) uint64 {
		n, _ := strconv.ParseUint(kv[k], 10, 64)
		return n
	}
	if kv["sep"] == "auto" { // where the meganode would split now
		if lm := h.m.MeganodeAt(ptr("m")); lm != nil {
			k, err := lm.T.SplitKey()
			if err != nil {
				return nil, "", err
			}
			kv["sep"] = string(k)
		}
	}
	r := Record{Meganode: ptr("m"), ClientID: num("client"), Seq: num("seq"), Flags: flags, Key: []byte(kv["key"])}
	kind, step, _ := strings.Cut(f[0], "-")
	switch kind {
	case "region":
		r.Kind, r.Value = KindRegion, AppendRegionBody(nil, testLayout)
	case "version":
		r.Kind = KindVersion
	case "txn":
		r.Kind, r.Value = KindTxn, AppendTxnBody(nil, txnLine(kv))
	case "cond":
		b := CondBody{Op: map[string]uint8{"put": CondPut, "delete": CondDelete}[kv["op"]],
			Target:          map[string]uint8{"version": CondVersion, "value": CondValue, "present": CondPresent, "absent": CondAbsent}[kv["target"]],
			Compare:         map[string]uint8{"eq": CmpEqual, "ne": CmpNotEqual, "lt": CmpLess, "gt": CmpGreater}[kv["cmp"]],
			ExpectedVersion: num("expect"), Expected: []byte(kv["expect-value"]), Value: []byte(kv["value"])}
		r.Kind, r.Value = KindCond, AppendCondBody(nil, &b)
	case "root":
		phase := map[string]RootPhase{"format": RootFormat, "publish": RootPublish, "drop": RootDrop}[step]
		r.Kind, r.Value = KindRoot, AppendRootBody(nil, phase)
	case "put":
		r.Kind, r.Value = KindPut, []byte(kv["value"])
	case "delete":
		r.Kind = KindDelete
	case "child":
		r.Kind, r.Value = KindChild, binaryPtr(ptr("child"))
	case "split":
		phase := map[string]SplitPhase{"start": PhaseStart, "copy": PhaseCopy, "link": PhaseLink, "free": PhaseFree,
			"root": PhaseRoot, "end": PhaseEnd, "abort": PhaseAbort}[step]
		b := SplitBody{Phase: phase, New: ptr("new"), Batch: uint32(num("batch"))}
		switch {
		case kv["cursor"] != "":
			b.Cursor = []byte(kv["cursor"])
		case kv["root"] != "":
			b.Cursor = binaryPtr(ptr("root"))
		case kv["entries"] != "":
			var ents []LevelEntry
			for _, e := range strings.Split(kv["entries"], ",") {
				k, p, _ := strings.Cut(e, ":")
				if k == "-inf" {
					k = "\x00"
				}
				pp, err := h.parsePtr(p)
				if err != nil {
					return nil, "", err
				}
				ents = append(ents, LevelEntry{Key: []byte(k), Ptr: pp})
			}
			b.Cursor = AppendRootEntries(nil, ents)
		}
		r.Kind, r.Key, r.Value = KindSplit, []byte(kv["sep"]), AppendSplitBody(nil, &b)
	case "target":
		phase := map[string]TargetPhase{"begin": TargetBegin, "append": TargetAppend, "commit": TargetCommit, "abort": TargetAbort}[step]
		b := TargetBody{Phase: phase, Right: ptr("right"), Source: ptr("source"), Level: uint16(num("level")), Clock: num("clock")}
		switch phase {
		case TargetBegin:
			r.Key = []byte(kv["sep"])
			if kv["max"] == "inf" {
				b.MaxInf = true
			} else {
				b.Payload = []byte(kv["max"])
			}
		case TargetAppend:
			var ents []blink.Entry
			words := false
			for _, e := range strings.Split(kv["entries"], ",") {
				k, v, _ := strings.Cut(e, "=")
				ent := blink.Entry{Key: []byte(k), Value: []byte(v)}
				if v, ver, ok := strings.Cut(v, "@"); ok {
					n, _ := strconv.ParseUint(ver, 10, 64)
					ent.Value, ent.Word, words = []byte(v), blink.MakeWord(n, false, false), true
				}
				ents = append(ents, ent)
			}
			b.Payload = AppendEntries(nil, false, words, ents)
		}
		r.Kind, r.Value = KindTarget, AppendTargetBody(nil, &b)
	default:
		return nil, "", fmt.Errorf("record kind %q", f[0])
	}
	return AppendRecord(nil, &r), kv["as"], perr
}

func binaryPtr(p blink.Ptr) []byte { return le.AppendUint64(nil, uint64(p)) }

func (h *scenario) scan(t *testing.T, d *datadriven.TestData) string {
	lm := h.meganode(t, d, "m")
	var out strings.Builder
	n := 0
	err := lm.T.ScanWords(blink.ScanOptions{}, func(k, v []byte, w blink.Word) bool {
		if w.Version() != 0 {
			fmt.Fprintf(&out, "%s=%s @%d\n", k, v, w.Version())
		} else {
			fmt.Fprintf(&out, "%s=%s\n", k, v)
		}
		n++
		return true
	})
	if err != nil {
		return "error: " + err.Error()
	}
	if n == 0 {
		return "(empty)"
	}
	return out.String()
}

func (h *scenario) meganodes() string {
	var out strings.Builder
	for lm := range h.m.Meganodes() {
		hd, err := lm.T.Header()
		if err != nil {
			fmt.Fprintf(&out, "slot %d %v: %v\n", lm.M.Slot(), lm.Ptr(), err)
			continue
		}
		fmt.Fprintf(&out, "slot %d %v level %d [%s, %s) right %v", lm.M.Slot(), lm.Ptr(), lm.Level, bound(hd.Bounds.Min, hd.Bounds.MinInf, "-inf"), bound(hd.Bounds.Max, hd.Bounds.MaxInf, "+inf"), lm.T.Right())
		if s := lm.T.Split(); s.Source || s.Target {
			fmt.Fprintf(&out, " split{source=%v target=%v linked=%v sep=%q}", s.Source, s.Target, s.Linked, s.Sep)
		}
		out.WriteByte('\n')
	}
	if out.Len() == 0 {
		return "(none)"
	}
	return out.String()
}

func bound(b []byte, inf bool, infText string) string {
	if inf {
		return infText
	}
	return strconv.Quote(string(b))
}

func (h *scenario) state() string {
	st := h.m.State()
	var out strings.Builder
	fmt.Fprintf(&out, "formatted=%v applied=%d root=%v new-root=%v\n", st.Formatted, st.Applied, h.m.Region().Root(), st.NewRoot)
	if st.Versioned() {
		fmt.Fprintf(&out, "versioned clock=%d legacy=%d\n", st.Clock, st.Legacy)
	}
	for _, p := range st.Splits {
		fmt.Fprintf(&out, "split %v -> %v at %q linked=%v freed=%v\n", p.X, p.Y, p.Sep, p.Linked, p.Freed)
	}
	fmt.Fprintf(&out, "clients %v\n", h.m.Clients())
	targets := h.m.Targets()
	for _, yp := range slices.Sorted(func(yield func(blink.Ptr) bool) {
		for k := range targets {
			if !yield(k) {
				return
			}
		}
	}) {
		fmt.Fprintf(&out, "target %v from %v\n", yp, targets[yp])
	}
	return out.String()
}

// image returns a copy of m's region at its applied index.
func image(m *Machine) []byte {
	var b []byte
	m.Exclusive(func(r *meganode.Region, _ uint64) { b = bytes.Clone(r.Bytes()) })
	return b
}

// replay applies every record of the script so far onto a new machine:
// the same records must leave the same bytes.
func (h *scenario) replay(t *testing.T) string {
	m, _ := newMachine(t, h.m.ID(), h.layout)
	for i, rec := range h.log {
		_, _ = m.Apply(uint64(i+1), rec) // errors are outcomes too, the same ones
	}
	return compare(image(h.m), image(m), h.m.State(), m.State())
}

// snapshot carries the machine's state through a snapshot into a new,
// empty machine.
func (h *scenario) snapshot(t *testing.T) string {
	snap, err := h.m.Snapshot()
	if err != nil {
		return "error: " + err.Error()
	}
	var buf bytes.Buffer
	if _, err := snap.Write(&buf); err != nil {
		t.Fatal(err)
	}
	m, _ := newMachine(t, h.m.ID(), h.layout)
	if err := m.Restore(&buf); err != nil {
		return "restore: " + err.Error()
	}
	return compare(image(h.m), image(m), h.m.State(), m.State())
}

func compare(a, b []byte, sa, sb State) string {
	if !bytes.Equal(a, b) {
		i := 0
		for i < min(len(a), len(b)) && a[i] == b[i] {
			i++
		}
		return fmt.Sprintf("images differ at byte %#x (%d and %d bytes)", i, len(a), len(b))
	}
	if !bytes.Equal(sa.encode(), sb.encode()) {
		return "states differ"
	}
	return "identical"
}

// txnLine builds a txn body from a script line's reads=, ranges= and
// writes= (see TestScenarios).
func txnLine(kv map[string]string) *TxnBody {
	var b TxnBody
	split := func(s, sep string) []string {
		if s == "" {
			return nil
		}
		return strings.Split(s, sep)
	}
	pair := func(s string) ([]byte, uint64) {
		k, v, _ := strings.Cut(s, "@")
		n, _ := strconv.ParseUint(v, 10, 64)
		return []byte(k), n
	}
	for _, rd := range split(kv["reads"], ",") {
		k, v := pair(rd)
		b.Reads = append(b.Reads, TxnRead{Key: k, Version: v})
	}
	for _, rg := range split(kv["ranges"], ",") {
		span, rest, _ := strings.Cut(rg, ":")
		lim, pairs, _ := strings.Cut(rest, ":")
		start, end, _ := strings.Cut(span, "..")
		limit, _ := strconv.ParseUint(lim, 10, 32)
		h := blink.NewRangeHash()
		var n uint32
		for _, p := range split(pairs, ";") {
			h = h.Add(pair(p))
			n++
		}
		var e []byte
		if end != "" {
			e = []byte(end)
		}
		b.Ranges = append(b.Ranges, TxnRange{Start: []byte(start), End: e, Limit: uint32(limit), Count: n, Hash: uint64(h)})
	}
	for _, w := range split(kv["writes"], ",") {
		if k, ok := strings.CutPrefix(w, "-"); ok {
			b.Writes = append(b.Writes, TxnWrite{Op: TxnDelete, Key: []byte(k)})
			continue
		}
		k, v, _ := strings.Cut(w, "=")
		b.Writes = append(b.Writes, TxnWrite{Op: TxnPut, Key: []byte(k), Value: []byte(v)})
	}
	return &b
}
