package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/magiconair/properties"
	"github.com/pingcap/go-ycsb/pkg/client"
	"github.com/pingcap/go-ycsb/pkg/measurement"
	"github.com/pingcap/go-ycsb/pkg/prop"
	_ "github.com/pingcap/go-ycsb/pkg/workload" // registers "core"
	"github.com/pingcap/go-ycsb/pkg/ycsb"
	"github.com/spf13/cobra"

	_ "github.com/cellstore/cell/ycsb/db/cell"  // registers "cell"
	_ "github.com/cellstore/cell/ycsb/db/etcd"  // registers "etcd"
	_ "github.com/cellstore/cell/ycsb/db/redis" // registers "redis"
	"github.com/cellstore/cell/ycsb/internal/keyrange"
)

// ErrUnknownDB is returned for a binding name that is not registered.
var ErrUnknownDB = errors.New("unknown binding (want cell, etcd or redis)")

// flags are the load and run commands' flags, as go-ycsb's.
type flags struct {
	propertyFiles  []string
	propertyValues []string
	table          string
	threads        int
	target         int
	interval       int
}

func newRootCommand(ctx context.Context) *cobra.Command {
	root := &cobra.Command{
		Use:           "cell-ycsb",
		Short:         "go-ycsb's core workloads against cell, etcd or redis",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.AddCommand(
		newClientCommand(ctx, "load", "load the records (YCSB load phase)", false),
		newClientCommand(ctx, "run", "run the operations (YCSB transaction phase)", true),
	)
	return root
}

// newClientCommand is go-ycsb's load or run command.
func newClientCommand(ctx context.Context, name, short string, transactions bool) *cobra.Command {
	var f flags
	cmd := &cobra.Command{
		Use:   name + " cell|etcd|redis",
		Short: short,
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			p, err := f.properties(cmd, name, transactions)
			if err != nil {
				return err
			}
			return runClient(ctx, args[0], p)
		},
	}
	fs := cmd.Flags()
	fs.StringSliceVarP(&f.propertyFiles, "property_file", "P", nil, "a property file (workload); repeat for more")
	fs.StringArrayVarP(&f.propertyValues, "prop", "p", nil, "a property name=value, overriding the files")
	fs.StringVar(&f.table, "table", "", "table name (default: the table property, else "+prop.TableNameDefault+")")
	fs.IntVar(&f.threads, "threads", 1, "YCSB threads (the threadcount property)")
	fs.IntVar(&f.target, "target", 0, "operations per second to aim at (0: as fast as possible)")
	fs.IntVar(&f.interval, "interval", 10, "seconds between progress reports")
	return cmd
}

// properties merges the property files, the -p values and the flags, as
// go-ycsb's main does.
func (f *flags) properties(cmd *cobra.Command, command string, transactions bool) (*properties.Properties, error) {
	p := properties.NewProperties()
	if len(f.propertyFiles) > 0 {
		var err error
		if p, err = properties.LoadFiles(f.propertyFiles, properties.UTF8, false); err != nil {
			return nil, err
		}
	}
	set := func(k, v string) error {
		_, _, err := p.Set(k, v)
		return err
	}
	for _, kv := range f.propertyValues {
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			return nil, fmt.Errorf("-p %q: want name=value", kv)
		}
		if err := set(k, v); err != nil {
			return nil, err
		}
	}
	if f.table != "" {
		if err := set(prop.TableName, f.table); err != nil {
			return nil, err
		}
	}
	changed := map[string]string{"threads": prop.ThreadCount, "target": prop.Target, "interval": prop.LogInterval}
	values := map[string]int{"threads": f.threads, "target": f.target, "interval": f.interval}
	for flag, key := range changed {
		if cmd.Flags().Changed(flag) {
			if err := set(key, strconv.Itoa(values[flag])); err != nil {
				return nil, err
			}
		}
	}
	if err := set(prop.DoTransactions, strconv.FormatBool(transactions)); err != nil {
		return nil, err
	}
	return p, set(prop.Command, command)
}

// runClient runs go-ycsb's client for the binding dbName and prints the
// properties, the progress and the measurements as go-ycsb does.
func runClient(ctx context.Context, dbName string, p *properties.Properties) error {
	if addr, ok := p.Get(prop.DebugPprof); ok {
		servePprof(addr)
	}
	if fixed, err := keyrange.Fix(p); err != nil {
		return err
	} else if fixed {
		fmt.Printf("insertcount=%s: keys of the zipfian run end at the last loaded one (package keyrange: go-ycsb's off-by-one)\n", p.GetString(prop.InsertCount, ""))
	}
	measurement.InitMeasure(p)
	if _, _, err := p.Set(prop.TableName, p.GetString(prop.TableName, prop.TableNameDefault)); err != nil {
		return err
	}
	workloadName := p.GetString(prop.Workload, "core")
	wc := ycsb.GetWorkloadCreator(workloadName)
	if wc == nil {
		return fmt.Errorf("workload %q is not registered", workloadName)
	}
	workload, err := wc.Create(p)
	if err != nil {
		return fmt.Errorf("create workload %s: %w", workloadName, err)
	}
	defer workload.Close()
	dc := ycsb.GetDBCreator(dbName)
	if dc == nil {
		return fmt.Errorf("%q: %w", dbName, ErrUnknownDB)
	}
	db, err := dc.Create(p)
	if err != nil {
		return fmt.Errorf("create db %s: %w", dbName, err)
	}
	defer db.Close()

	printProperties(p)
	start := time.Now()
	client.NewClient(p, workload, client.DbWrapper{DB: db}).Run(ctx)
	fmt.Println("**********************************************")
	fmt.Printf("Run finished, takes %s\n", time.Since(start))
	measurement.Output()
	return ctx.Err()
}

// printProperties prints every property, sorted, between go-ycsb's
// rulers.
func printProperties(p *properties.Properties) {
	fmt.Println("***************** properties *****************")
	keys := p.Keys()
	slices.Sort(keys)
	for _, k := range keys {
		fmt.Printf("%q=%q\n", k, p.GetString(k, ""))
	}
	fmt.Println("**********************************************")
}
