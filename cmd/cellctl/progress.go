package main

import (
	"os"

	"github.com/schollz/progressbar/v3"
	"golang.org/x/term"
)

// progress is a progress bar on stderr when stderr is a terminal, and
// nothing otherwise or when turned off (so that piped and captured output
// stays clean). Not safe for concurrent use.
type progress struct {
	bar *progressbar.ProgressBar
	g   *globals
	msg string
	off bool
}

func newProgress(g *globals, msg string, off bool) *progress {
	return &progress{g: g, msg: msg, off: off || !isTerminal(g.stderr)}
}

// set shows done of total.
func (p *progress) set(done, total int) {
	if p.off {
		return
	}
	if p.bar == nil {
		p.bar = progressbar.NewOptions(total, progressbar.OptionSetWriter(p.g.stderr),
			progressbar.OptionSetDescription(p.msg), progressbar.OptionShowCount(),
			progressbar.OptionClearOnFinish(), progressbar.OptionSetPredictTime(true))
	}
	_ = p.bar.Set(done)
}

// describe replaces the bar's description.
func (p *progress) describe(msg string) {
	p.msg = msg
	if p.bar != nil {
		p.bar.Describe(msg)
	}
}

func (p *progress) finish() {
	if p.bar != nil {
		_ = p.bar.Finish()
	}
}

// isTerminal reports whether w is a terminal (not merely a character
// device: /dev/null is one too).
func isTerminal(w any) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}
