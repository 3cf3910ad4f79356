package storetest

import (
	"context"
	"fmt"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/magiconair/properties"
	ycsbclient "github.com/pingcap/go-ycsb/pkg/client"
	"github.com/pingcap/go-ycsb/pkg/measurement"
	"github.com/pingcap/go-ycsb/pkg/prop"
	_ "github.com/pingcap/go-ycsb/pkg/workload" // registers "core"
	"github.com/pingcap/go-ycsb/pkg/ycsb"

	"github.com/cellstore/cell/ycsb/internal/keyrange"
)

// Run sizes of RunWorkload: small, so that the tests take seconds.
const (
	records    = 2000
	operations = 2000
	threads    = 4
)

// WorkloadFile returns the path of one of ycsb/workloads' files
// ("workloada").
func WorkloadFile(name string) string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "workloads", name)
}

// RunWorkload loads a table and runs a workload file against the
// binding dbName with go-ycsb's client, core workload and the binding's
// properties extra, and fails the test on any error the binding
// returned, on a scan that returned fewer records than asked for where
// that many were loaded, or on records out of order. Values are
// deterministic (dataintegrity=true: each starts with its key), so a
// record's position in a scan can be checked, and go-ycsb's workload
// checks every value read.
func RunWorkload(t *testing.T, dbName, workloadName, table string, extra map[string]string) {
	t.Helper()
	p, err := properties.LoadFile(WorkloadFile(workloadName), properties.UTF8)
	if err != nil {
		t.Fatal(err)
	}
	set := map[string]string{
		prop.RecordCount: strconv.Itoa(records), prop.OperationCount: strconv.Itoa(operations),
		prop.ThreadCount: strconv.Itoa(threads), prop.TableName: table,
		prop.DataIntegrity: "true", prop.Silence: "true", prop.LogInterval: "3600",
	}
	for k, v := range extra {
		set[k] = v
	}
	for k, v := range set {
		p.MustSet(k, v)
	}
	db, err := ycsb.GetDBCreator(dbName).Create(p)
	if err != nil {
		t.Fatalf("create %s: %v", dbName, err)
	}
	defer db.Close()
	chk := &checker{DB: db, t: t, records: records, prefix: p.GetString(prop.KeyPrefix, prop.KeyPrefixDefault),
		padding: int(p.GetInt64(prop.ZeroPadding, prop.ZeroPaddingDefault)), table: table}
	for _, transactions := range []bool{false, true} {
		p.MustSet(prop.DoTransactions, strconv.FormatBool(transactions))
		if _, err := keyrange.Fix(p); err != nil {
			t.Fatal(err)
		}
		measurement.InitMeasure(p)
		w, err := ycsb.GetWorkloadCreator("core").Create(p)
		if err != nil {
			t.Fatal(err)
		}
		ycsbclient.NewClient(p, w, chk).Run(context.Background())
		w.Close()
	}
	chk.report()
}

// checker wraps a binding: it counts operations and errors and checks
// every scan's result.
type checker struct {
	ycsb.DB
	t       *testing.T
	records int
	prefix  string
	padding int
	table   string

	mu     sync.Mutex
	ops    map[string]int
	errs   []string
	scans  int // scans whose whole range was loaded, checked
	issues []string
}

// note records an operation's outcome.
func (c *checker) note(op string, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ops == nil {
		c.ops = map[string]int{}
	}
	c.ops[op]++
	if err != nil && len(c.errs) < 5 {
		c.errs = append(c.errs, fmt.Sprintf("%s: %v", op, err))
	} else if err != nil {
		c.errs = append(c.errs, "")
	}
}

// issue records a wrong result.
func (c *checker) issue(format string, args ...any) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.issues = append(c.issues, fmt.Sprintf(format, args...))
}

// report fails the test on errors or wrong results, and on a run that
// did nothing.
func (c *checker) report() {
	c.t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t.Logf("table %s: operations %v, scans checked %d", c.table, c.ops, c.scans)
	if len(c.errs) > 0 {
		c.t.Errorf("%d operations failed, first: %s", len(c.errs), strings.Join(c.errs[:min(5, len(c.errs))], "; "))
	}
	if len(c.issues) > 0 {
		c.t.Errorf("%d wrong results, first: %s", len(c.issues), strings.Join(c.issues[:min(5, len(c.issues))], "; "))
	}
	if c.ops["insert"] < c.records {
		c.t.Errorf("%d inserts, want at least the %d records loaded", c.ops["insert"], c.records)
	}
}

func (c *checker) Read(ctx context.Context, table, key string, fields []string) (map[string][]byte, error) {
	v, err := c.DB.Read(ctx, table, key, fields)
	if err == nil && len(v) == 0 {
		c.issue("read %s: no fields", key)
	}
	c.note("read", err)
	return v, err
}

func (c *checker) Update(ctx context.Context, table, key string, values map[string][]byte) error {
	err := c.DB.Update(ctx, table, key, values)
	c.note("update", err)
	return err
}

func (c *checker) Insert(ctx context.Context, table, key string, values map[string][]byte) error {
	err := c.DB.Insert(ctx, table, key, values)
	c.note("insert", err)
	return err
}

func (c *checker) Delete(ctx context.Context, table, key string) error {
	err := c.DB.Delete(ctx, table, key)
	c.note("delete", err)
	return err
}

// Scan checks the result: never more than count records; where the
// start key and the count-1 keys after it were all loaded, exactly count
// records, the i-th that of key start+i (each value begins with its key).
func (c *checker) Scan(ctx context.Context, table, startKey string, count int, fields []string) ([]map[string][]byte, error) {
	res, err := c.DB.Scan(ctx, table, startKey, count, fields)
	c.note("scan", err)
	if err != nil {
		return res, err
	}
	if len(res) > count {
		c.issue("scan %s %d: %d records", startKey, count, len(res))
	}
	n, perr := strconv.Atoi(strings.TrimPrefix(startKey, c.prefix))
	if perr != nil {
		c.issue("scan start %q: not a key of this workload", startKey)
		return res, err
	}
	if n+count > c.records {
		return res, err // past the loaded keys: inserts race with the scan
	}
	if len(res) != count {
		c.issue("scan %s %d: %d records", startKey, count, len(res))
		return res, err
	}
	for i, rec := range res {
		want := fmt.Sprintf("%s%0*d:", c.prefix, c.padding, n+i)
		if got := string(rec["field0"]); !strings.HasPrefix(got, want) {
			c.issue("scan %s %d: record %d is %.30q, want key %s", startKey, count, i, got, want)
			break
		}
	}
	c.mu.Lock()
	c.scans++
	c.mu.Unlock()
	return res, err
}
