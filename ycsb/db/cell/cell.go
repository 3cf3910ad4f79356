// Package cell is the go-ycsb binding of Cell, over the Go client
// (github.com/cellstore/cell/client). Registered as "cell".
//
// A YCSB record is one Cell pair: key "table/key", value the record's
// fields encoded by package record. Read decodes the fields asked for;
// Scan is one count-limited Range from the start key to the end of the
// table; Update overwrites the record when it gives every field and
// otherwise reads, merges and writes it (not atomically: YCSB's
// contract asks for no more, and the etcd binding does the same);
// Insert is a Put; Delete a Delete.
//
// Properties:
//
//	cell.endpoints    etcd endpoints of the region table, comma-separated (127.0.0.1:2379)
//	cell.etcd-prefix  the region table's prefix in etcd ("" = the client's default, /cell)
//	cell.mode         locality mode: server, client, adaptive or ratio=P (adaptive)
//	cell.provider     one-sided reads: tcp, shm or auto (auto)
//	cell.timeout      per-operation deadline (10s)
package cell

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/magiconair/properties"
	"github.com/pingcap/go-ycsb/pkg/ycsb"

	"github.com/cellstore/cell/client"
	"github.com/cellstore/cell/locality"
	"github.com/cellstore/cell/ycsb/internal/record"
)

// Property names.
const (
	PropEndpoints  = "cell.endpoints"
	PropEtcdPrefix = "cell.etcd-prefix"
	PropMode       = "cell.mode"
	PropProvider   = "cell.provider"
	PropTimeout    = "cell.timeout"
	// PropCPUSlots is client.Config.CPUSlots: while a server-side call
	// waits, at most this many threads do client-side work over shm at
	// once (0, the default: no bound).
	PropCPUSlots = "cell.cpuslots"
)

// Name is the binding's name on go-ycsb's command line.
const Name = "cell"

// connectTimeout bounds client.New.
const connectTimeout = 30 * time.Second

func init() { ycsb.RegisterDBCreator(Name, creator{}) }

type creator struct{}

// Create connects to the store the properties name.
func (creator) Create(p *properties.Properties) (ycsb.DB, error) {
	cfg, err := config(p)
	if err != nil {
		return nil, err
	}
	timeout := p.GetParsedDuration(PropTimeout, 10*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), connectTimeout)
	defer cancel()
	c, err := client.New(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("cell: connect to %v: %w", cfg.Endpoints, err)
	}
	return &DB{c: c, timeout: timeout, fieldCount: record.FieldCount(p)}, nil
}

// config builds the client's Config from the properties.
func config(p *properties.Properties) (client.Config, error) {
	cfg := client.Config{
		Endpoints:  record.List(p.GetString(PropEndpoints, "127.0.0.1:2379")),
		EtcdPrefix: p.GetString(PropEtcdPrefix, ""),
		Provider:   p.GetString(PropProvider, client.ProviderAuto),
	}
	modeText := p.GetString(PropMode, "adaptive")
	mode, err := locality.ParseMode(modeText)
	if err != nil {
		return cfg, &record.PropertyError{Name: PropMode, Value: modeText, Err: err}
	}
	cfg.Mode = mode
	switch cfg.Provider {
	case client.ProviderAuto, client.ProviderTCP, client.ProviderSHM:
	default:
		return cfg, &record.PropertyError{Name: PropProvider, Value: cfg.Provider, Err: errors.New("want tcp, shm or auto")}
	}
	if len(cfg.Endpoints) == 0 {
		return cfg, &record.PropertyError{Name: PropEndpoints, Err: errors.New("no endpoint")}
	}
	slotsText := p.GetString(PropCPUSlots, "0")
	slots, err := strconv.Atoi(slotsText)
	if err != nil || slots < 0 {
		return cfg, &record.PropertyError{Name: PropCPUSlots, Value: slotsText, Err: errors.New("want 0 (no bound) or more")}
	}
	if slots > 0 {
		cfg.CPUSlots = client.NewCPUSlots(slots)
	}
	return cfg, nil
}

// DB is the binding: one client shared by every YCSB thread (the client
// is meant to be shared: its connections are pipelined).
type DB struct {
	c          *client.Client
	timeout    time.Duration
	fieldCount int
}

// Close closes the client.
func (db *DB) Close() error { return db.c.Close() }

// InitThread keeps ctx: the binding has no per-thread state.
func (db *DB) InitThread(ctx context.Context, _, _ int) context.Context { return ctx }

// CleanupThread does nothing.
func (db *DB) CleanupThread(context.Context) {}

// Read returns the fields of the record (all of them when fields is
// empty).
func (db *DB) Read(ctx context.Context, table, key string, fields []string) (map[string][]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, db.timeout)
	defer cancel()
	v, err := db.c.Get(ctx, []byte(record.Key(table, key)))
	if err != nil {
		return nil, err
	}
	return record.Decode(v, fields)
}

// Scan returns up to count records from startKey on, in key order: one
// Range limited to count (continued if a call returns fewer with more to
// come).
func (db *DB) Scan(ctx context.Context, table, startKey string, count int, fields []string) ([]map[string][]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, db.timeout)
	defer cancel()
	start, end := []byte(record.Key(table, startKey)), []byte(record.TableEnd(table))
	out := make([]map[string][]byte, 0, count)
	for len(out) < count && start != nil {
		pairs, resume, err := db.c.Range(ctx, start, end, client.RangeOptions{Limit: count - len(out)})
		if err != nil {
			return nil, err
		}
		for _, kv := range pairs {
			f, err := record.Decode(kv.Value, fields)
			if err != nil {
				return nil, fmt.Errorf("cell: %s: %w", kv.Key, err)
			}
			out = append(out, f)
		}
		start = resume
	}
	return out, nil
}

// Update writes values into the record: a Put of the whole record when
// values has every field, else a read, a merge and a Put.
func (db *DB) Update(ctx context.Context, table, key string, values map[string][]byte) error {
	ctx, cancel := context.WithTimeout(ctx, db.timeout)
	defer cancel()
	k := []byte(record.Key(table, key))
	if record.Whole(values, db.fieldCount) {
		return db.c.Put(ctx, k, record.Encode(values))
	}
	old, err := db.c.Get(ctx, k)
	if err != nil {
		return err
	}
	v, err := record.Merge(old, values)
	if err != nil {
		return fmt.Errorf("cell: %s: %w", k, err)
	}
	return db.c.Put(ctx, k, v)
}

// Insert writes the record.
func (db *DB) Insert(ctx context.Context, table, key string, values map[string][]byte) error {
	ctx, cancel := context.WithTimeout(ctx, db.timeout)
	defer cancel()
	return db.c.Put(ctx, []byte(record.Key(table, key)), record.Encode(values))
}

// Delete deletes the record.
func (db *DB) Delete(ctx context.Context, table, key string) error {
	ctx, cancel := context.WithTimeout(ctx, db.timeout)
	defer cancel()
	return db.c.Delete(ctx, []byte(record.Key(table, key)))
}
