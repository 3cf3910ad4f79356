package main

import (
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/cellstore/cell/wire"
)

// An option is one row of cellserver's table of flags (options.go): the
// flag --name, its environment variable CELL_NAME, its default, its help,
// and the value that parses, checks and stores it. The flag set, the
// environment, -h and docs/flags.md all come from the rows; a test holds
// each default that lands in server.Options to Options.EnsureDefaults.
type option struct {
	// name is the flag without its dashes: "data-dir" is --data-dir and
	// CELL_DATA_DIR (envName).
	name string
	// def is the default, written as it would be typed.
	def string
	// help is the flag's usage line, and its meaning in docs/flags.md.
	help string
	// value parses, checks and stores the flag's text.
	value value
	// bare: a boolean that may be given without a value, as etcd's are
	// (--client-cert-auth means --client-cert-auth=true).
	bare bool
	// serverDefault is set where the flag's default is not
	// server.Options' own for the field it sets: what the library's is,
	// and so why they differ (TestOptionDefaults).
	serverDefault string
}

// An optionGroup is a titled section of the table: a heading of
// docs/flags.md, with the document that tells more.
type optionGroup struct {
	title string
	// doc, when set, is a file of docs/ about the group's flags; every
	// flag of the group is named there, and its tables of flags must
	// agree with the table (TestOptionDocs).
	doc string
	// about, when set, is a paragraph of docs/flags.md under the title.
	about   string
	options []option
}

// A value parses an option's text into its place in config.
type value interface {
	// set parses and checks text and stores it; it stores nothing on
	// error, which says what is wanted ("want a whole number >= 1").
	set(text string) error
	// target is the pointer set stores through, a field of config (of
	// config.srv for the flags that set server.Options).
	target() any
}

// envName is the environment variable standing for a flag:
// --data-dir is CELL_DATA_DIR.
func envName(flagName string) string {
	return "CELL_" + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

// register adds o to fs, reading its text into *text: the default is the
// environment variable's value when that is set, and the command line
// overrides both.
func (o *option) register(fs *flag.FlagSet, text *string) {
	def := o.def
	if v, ok := os.LookupEnv(envName(o.name)); ok {
		def = v
	}
	usage := o.help + " (env " + envName(o.name) + ")"
	if o.bare {
		*text = def
		fs.Var(bareBool{text}, o.name, usage)
		return
	}
	fs.StringVar(text, o.name, def, usage)
}

// apply parses text into o's place, naming the flag and the text on error.
func (o *option) apply(text string) error {
	if err := o.value.set(text); err != nil {
		return fmt.Errorf("--%s %q: %w", o.name, text, err)
	}
	return nil
}

// bareBool is a flag holding a boolean's text, parsed later, that may be
// given bare as etcd's are (--client-cert-auth means true).
type bareBool struct{ p *string }

func (b bareBool) String() string {
	if b.p == nil {
		return ""
	}
	return *b.p
}
func (b bareBool) Set(v string) error { *b.p = v; return nil }
func (b bareBool) IsBoolFlag() bool   { return true }

// parsed is a value of type T, made by parse.
type parsed[T any] struct {
	p     *T
	parse func(string) (T, error)
}

func (v parsed[T]) set(s string) error {
	x, err := v.parse(s)
	if err != nil {
		return err
	}
	*v.p = x
	return nil
}

func (v parsed[T]) target() any { return v.p }

// want is a parse that says what it wants, whatever failed.
func want[T any](parse func(string) (T, error), what string) func(string) (T, error) {
	return func(s string) (T, error) {
		x, err := parse(s)
		if err != nil {
			return x, fmt.Errorf("want %s", what)
		}
		return x, nil
	}
}

// text is any text.
func text(p *string) value {
	return parsed[string]{p, func(s string) (string, error) { return s, nil }}
}

// list is comma-separated text; blank items are dropped.
func list(p *[]string) value {
	return parsed[[]string]{p, func(s string) ([]string, error) {
		var l []string
		for _, it := range strings.Split(s, ",") {
			if it = strings.TrimSpace(it); it != "" {
				l = append(l, it)
			}
		}
		return l, nil
	}}
}

// choice is a value of a type of its own, parsed by parse; what, when
// set, replaces parse's error ("auto, on or off").
func choice[T any](p *T, parse func(string) (T, error), what string) value {
	if what != "" {
		parse = want(parse, what)
	}
	return parsed[T]{p, parse}
}

// boolean is true or false (strconv.ParseBool).
func boolean(p *bool) value { return choice(p, strconv.ParseBool, "true or false") }

// optionalBool is true, false, or empty for nil: not said.
func optionalBool(p **bool) value {
	return parsed[*bool]{p, func(s string) (*bool, error) {
		if s == "" {
			return nil, nil
		}
		b, err := strconv.ParseBool(s)
		if err != nil {
			return nil, fmt.Errorf("want true or false")
		}
		return &b, nil
	}}
}

// whole is a whole number in [lo, hi]; hi 0 is no bound.
func whole(p *int, lo, hi int) value {
	what := fmt.Sprintf("a whole number >= %d", lo)
	if hi != 0 {
		what = fmt.Sprintf("a whole number from %d to %d", lo, hi)
	}
	return parsed[int]{p, func(s string) (int, error) {
		n, err := strconv.Atoi(s)
		if err != nil || n < lo || hi != 0 && n > hi {
			return 0, fmt.Errorf("want %s", what)
		}
		return n, nil
	}}
}

// count is a whole number of at least lo, as a uint64.
func count(p *uint64, lo uint64) value {
	return parsed[uint64]{p, func(s string) (uint64, error) {
		n, err := strconv.ParseUint(s, 10, 64)
		if err != nil || n < lo {
			return 0, fmt.Errorf("want a whole number >= %d", lo)
		}
		return n, nil
	}}
}

// size is a byte size (parseSize) in [lo, hi]; hi 0 is no bound. what,
// when set, replaces the error (parseSize's, for a size out of bounds).
func size[T int | uint64](p *T, lo, hi uint64, what string) value {
	return parsed[T]{p, func(s string) (T, error) {
		n, err := parseSize(s)
		if err == nil && (n < lo || hi != 0 && n > hi) {
			err = fmt.Errorf("want a size from %d to %d bytes", lo, hi)
		}
		switch {
		case err != nil && what != "":
			return 0, fmt.Errorf("want %s", what)
		case err != nil:
			return 0, err
		}
		return T(n), nil
	}}
}

// frameBody is the largest request or reply body, stored as the frame size
// it makes (with the header).
func frameBody(p *int) value {
	return parsed[int]{p, func(s string) (int, error) {
		n, err := parseSize(s)
		if err != nil || n < 64<<10 || n > 1<<32-1-wire.HeaderSize {
			return 0, fmt.Errorf("want a size from 64KiB to below 4GiB")
		}
		return wire.HeaderSize + int(n), nil
	}}
}

// duration is a time.Duration of at least lo.
func duration(p *time.Duration, lo time.Duration) value {
	return parsed[time.Duration]{p, func(s string) (time.Duration, error) {
		d, err := time.ParseDuration(s)
		if err != nil || d < lo {
			return 0, fmt.Errorf("want a duration of at least %v", lo)
		}
		return d, nil
	}}
}

// seconds is a whole number of seconds, at least one.
func seconds(p *time.Duration) value {
	return parsed[time.Duration]{p, func(s string) (time.Duration, error) {
		d, err := time.ParseDuration(s)
		if err != nil || d < time.Second || d%time.Second != 0 {
			return 0, fmt.Errorf("want a whole number of seconds, at least 1s")
		}
		return d, nil
	}}
}

// orNever is a duration where 0 means never, stored as server.Options'
// never: negative (0 there is the default).
func orNever(p *time.Duration) value {
	return parsed[time.Duration]{p, func(s string) (time.Duration, error) {
		d, err := time.ParseDuration(s)
		if err != nil || d < 0 {
			return 0, fmt.Errorf("want a duration, 0 for never")
		}
		if d == 0 {
			return -1, nil
		}
		return d, nil
	}}
}

// fraction is a number in (0, 1].
func fraction(p *float64) value {
	return parsed[float64]{p, func(s string) (float64, error) {
		f, err := strconv.ParseFloat(s, 64)
		if err != nil || !(f > 0 && f <= 1) {
			return 0, fmt.Errorf("want a number in (0, 1]")
		}
		return f, nil
	}}
}
