package main

import (
	"fmt"
	"io"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"unsafe"

	"github.com/cellstore/cell/regiontable"
	"github.com/cellstore/cell/server"
)

// serverField is the name of the server.Options field that o stores into
// c.srv, or "" for an option of cellserver's own (etcd, TLS files, the log
// level).
func serverField(c *config, o option) string {
	p := reflect.ValueOf(o.value.target()).Pointer()
	v := reflect.ValueOf(&c.srv).Elem()
	for i := range v.NumField() {
		if v.Field(i).Addr().Pointer() == p {
			return v.Type().Field(i).Name
		}
	}
	return ""
}

// optionNamed is the row named name of c's table.
func optionNamed(t *testing.T, c *config, name string) option {
	t.Helper()
	for _, o := range flatten(c.options()) {
		if o.name == name {
			return o
		}
	}
	t.Fatalf("no option --%s", name)
	return option{}
}

// valueOf is what text stores for option name: the target's value in a
// config of its own.
func valueOf(t *testing.T, name, text string) (any, error) {
	t.Helper()
	var c config
	o := optionNamed(t, &c, name)
	if err := o.apply(text); err != nil {
		return nil, err
	}
	return reflect.ValueOf(o.value.target()).Elem().Interface(), nil
}

// The table's rows are well formed: one row per flag name, each storing
// into a place of its own inside the config it was made for, with help,
// and a default its own value accepts.
func TestOptionTable(t *testing.T) {
	var c config
	lo, hi := uintptr(unsafe.Pointer(&c)), uintptr(unsafe.Pointer(&c))+unsafe.Sizeof(c)
	names, targets := map[string]bool{}, map[uintptr]string{}
	flagName := regexp.MustCompile(`^[a-z][a-z0-9]*(-[a-z0-9]+)*$`)
	for _, g := range c.options() {
		if g.title == "" || len(g.options) == 0 {
			t.Errorf("group %q: no title or no options", g.title)
		}
		for _, o := range g.options {
			switch {
			case !flagName.MatchString(o.name):
				t.Errorf("--%s: not a flag name of lower-case words joined by '-'", o.name)
			case names[o.name] || o.name == "version":
				t.Errorf("--%s: given twice", o.name)
			case o.help == "" || o.value == nil:
				t.Errorf("--%s: no help or no value", o.name)
			}
			names[o.name] = true
			p := reflect.ValueOf(o.value.target()).Pointer()
			if p < lo || p >= hi {
				t.Errorf("--%s stores outside the config", o.name)
			}
			if other, ok := targets[p]; ok {
				t.Errorf("--%s and --%s store into the same place", o.name, other)
			}
			targets[p] = o.name
			if _, err := valueOf(t, o.name, o.def); err != nil {
				t.Errorf("the default of --%s is refused: %v", o.name, err)
			}
			if o.serverDefault != "" && serverField(&c, o) == "" {
				t.Errorf("--%s sets no server.Options field but says what its default there is", o.name)
			}
		}
	}
}

// Every default of a flag that sets a server.Options field is the
// library's own default for that field (Options.EnsureDefaults), unless
// the row says why not; so a server that cellserver starts without flags
// runs with the options a Go program's server.New(Options{DataDir,
// Store}) gets.
func TestOptionDefaults(t *testing.T) {
	var lib server.Options
	lib.EnsureDefaults()
	libv := reflect.ValueOf(lib)
	var c config
	if f, g := serverField(&c, optionNamed(t, &c, "max-request-bytes")), serverField(&c, optionNamed(t, &c, "etcd-listen")); f != "MaxFrameSize" || g != "" {
		t.Fatalf("serverField: --max-request-bytes sets %q, --etcd-listen %q", f, g)
	}
	for _, o := range flatten(c.options()) {
		field := serverField(&c, o)
		if field == "" {
			continue
		}
		var d config
		od := optionNamed(t, &d, o.name)
		if err := od.apply(od.def); err != nil {
			t.Fatal(err)
		}
		d.srv.EnsureDefaults()
		got, want := reflect.ValueOf(d.srv).FieldByName(field).Interface(), libv.FieldByName(field).Interface()
		switch same := reflect.DeepEqual(got, want); {
		case !same && o.serverDefault == "":
			t.Errorf("--%s defaults to %q: Options.%s = %s, but server.Options' default is %s (change one, or say why they differ in serverDefault)",
				o.name, o.def, field, show(got), show(want))
		case same && o.serverDefault != "":
			t.Errorf("--%s: serverDefault says the library's default differs, but Options.%s = %s both ways", o.name, field, show(got))
		}
	}

	// And the whole: the defaults, through serverOptions, validate.
	cfg, err := parseFlags(nil, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	o := serverOptions(cfg, regiontable.NewMemory(), tlsConfs{}, server.TestingKnobs{}, nil)
	o.EnsureDefaults()
	if err := o.Validate(); err != nil {
		t.Fatalf("the flags' defaults: %v", err)
	}
}

// show formats an option's value: strings quoted, the rest as %v.
func show(v any) string {
	if s, ok := v.(string); ok {
		return strconv.Quote(s)
	}
	return fmt.Sprint(v)
}

// -h lists every flag of the table with its environment variable.
func TestHelpListsEveryOption(t *testing.T) {
	var out strings.Builder
	if _, err := parseFlags([]string{"-h"}, &out); err != errHelp {
		t.Fatalf("-h: %v", err)
	}
	var c config
	for _, o := range flatten(c.options()) {
		if !strings.Contains(out.String(), "  -"+o.name+" ") && !strings.Contains(out.String(), "  -"+o.name+"\n") {
			t.Errorf("-h does not list --%s", o.name)
		}
		if !strings.Contains(out.String(), "(env "+envName(o.name)+")") {
			t.Errorf("-h does not name %s", envName(o.name))
		}
	}
}

// Every flag's environment variable stands for it, below the command
// line; a bad value in the environment is refused as on the command line.
func TestOptionEnvironment(t *testing.T) {
	t.Setenv("CELL_SPLIT_FILL", "0.5")
	t.Setenv("CELL_BALANCE_INTERVAL", "0")
	t.Setenv("CELL_ETCD_PREFIX", "/other")
	t.Setenv("CELL_REPLICAS", "3")
	cfg, err := parseFlags([]string{"--replicas", "5"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.srv.SplitFill != 0.5 || cfg.srv.BalanceInterval >= 0 || cfg.etcdPrefix != "/other" || cfg.srv.Replicas != 5 {
		t.Fatalf("fill %v, balance %v, prefix %q, replicas %d", cfg.srv.SplitFill, cfg.srv.BalanceInterval, cfg.etcdPrefix, cfg.srv.Replicas)
	}
	t.Setenv("CELL_REPLICAS", "99")
	if _, err := parseFlags(nil, io.Discard); err == nil || !strings.Contains(err.Error(), `--replicas "99"`) {
		t.Fatalf("CELL_REPLICAS=99: %v", err)
	}
}
