// Package etcd is the go-ycsb binding of etcd over clientv3, registered
// as "etcd". It replaces go-ycsb's own, whose Scan is not a count-limited
// range from the start key.
//
// A YCSB record is one etcd key, "table/key", its value the fields
// encoded by package record, as the cell binding stores them. Reads are
// linearizable (clientv3's default: a quorum read), so that a read costs
// what a read of the latest value costs in a consensus store; Scan is
// Get(start, WithRange(end of table), WithLimit(count)), also
// linearizable; Update overwrites the record when it gives every field,
// and otherwise reads, merges and writes it (as the cell binding does).
//
// Properties:
//
//	etcd.endpoints     comma-separated (127.0.0.1:2379)
//	etcd.dial_timeout  (5s)
//	etcd.timeout       per-operation deadline (10s)
package etcd

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/magiconair/properties"
	"github.com/pingcap/go-ycsb/pkg/ycsb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/cellstore/cell/ycsb/internal/record"
)

// Property names.
const (
	PropEndpoints   = "etcd.endpoints"
	PropDialTimeout = "etcd.dial_timeout"
	PropTimeout     = "etcd.timeout"
)

// Name is the binding's name on go-ycsb's command line.
const Name = "etcd"

// ErrNotFound is returned by Read and Update of a record that is not
// there.
var ErrNotFound = errors.New("etcd: record not found")

func init() { ycsb.RegisterDBCreator(Name, creator{}) }

type creator struct{}

// Create connects to the etcd cluster the properties name.
func (creator) Create(p *properties.Properties) (ycsb.DB, error) {
	endpoints := record.List(p.GetString(PropEndpoints, "127.0.0.1:2379"))
	if len(endpoints) == 0 {
		return nil, &record.PropertyError{Name: PropEndpoints, Err: errors.New("no endpoint")}
	}
	c, err := clientv3.New(clientv3.Config{
		Endpoints:   endpoints,
		DialTimeout: p.GetParsedDuration(PropDialTimeout, 5*time.Second),
	})
	if err != nil {
		return nil, fmt.Errorf("etcd: connect to %v: %w", endpoints, err)
	}
	return &DB{c: c, timeout: p.GetParsedDuration(PropTimeout, 10*time.Second), fieldCount: record.FieldCount(p)}, nil
}

// DB is the binding: one clientv3 client (one gRPC connection,
// multiplexed) shared by every YCSB thread.
type DB struct {
	c          *clientv3.Client
	timeout    time.Duration
	fieldCount int
}

// Close closes the client.
func (db *DB) Close() error { return db.c.Close() }

// InitThread keeps ctx: the binding has no per-thread state.
func (db *DB) InitThread(ctx context.Context, _, _ int) context.Context { return ctx }

// CleanupThread does nothing.
func (db *DB) CleanupThread(context.Context) {}

// get returns the stored value of k.
func (db *DB) get(ctx context.Context, k string) ([]byte, error) {
	resp, err := db.c.Get(ctx, k)
	if err != nil {
		return nil, err
	}
	if len(resp.Kvs) == 0 {
		return nil, fmt.Errorf("%w: %s", ErrNotFound, k)
	}
	return resp.Kvs[0].Value, nil
}

// Read returns the fields of the record (all of them when fields is
// empty).
func (db *DB) Read(ctx context.Context, table, key string, fields []string) (map[string][]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, db.timeout)
	defer cancel()
	v, err := db.get(ctx, record.Key(table, key))
	if err != nil {
		return nil, err
	}
	return record.Decode(v, fields)
}

// Scan returns up to count records from startKey on, in key order.
func (db *DB) Scan(ctx context.Context, table, startKey string, count int, fields []string) ([]map[string][]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, db.timeout)
	defer cancel()
	resp, err := db.c.Get(ctx, record.Key(table, startKey),
		clientv3.WithRange(record.TableEnd(table)), clientv3.WithLimit(int64(count)))
	if err != nil {
		return nil, err
	}
	out := make([]map[string][]byte, 0, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		f, err := record.Decode(kv.Value, fields)
		if err != nil {
			return nil, fmt.Errorf("etcd: %s: %w", kv.Key, err)
		}
		out = append(out, f)
	}
	return out, nil
}

// Update writes values into the record: a Put of the whole record when
// values has every field, else a read, a merge and a Put.
func (db *DB) Update(ctx context.Context, table, key string, values map[string][]byte) error {
	ctx, cancel := context.WithTimeout(ctx, db.timeout)
	defer cancel()
	k := record.Key(table, key)
	if record.Whole(values, db.fieldCount) {
		_, err := db.c.Put(ctx, k, string(record.Encode(values)))
		return err
	}
	old, err := db.get(ctx, k)
	if err != nil {
		return err
	}
	v, err := record.Merge(old, values)
	if err != nil {
		return fmt.Errorf("etcd: %s: %w", k, err)
	}
	_, err = db.c.Put(ctx, k, string(v))
	return err
}

// Insert writes the record.
func (db *DB) Insert(ctx context.Context, table, key string, values map[string][]byte) error {
	ctx, cancel := context.WithTimeout(ctx, db.timeout)
	defer cancel()
	_, err := db.c.Put(ctx, record.Key(table, key), string(record.Encode(values)))
	return err
}

// Delete deletes the record.
func (db *DB) Delete(ctx context.Context, table, key string) error {
	ctx, cancel := context.WithTimeout(ctx, db.timeout)
	defer cancel()
	_, err := db.c.Delete(ctx, record.Key(table, key))
	return err
}
