// Package redis is the go-ycsb binding of Redis over go-redis v9,
// registered as "redis". It stores records as Java YCSB's Redis binding
// does, with one difference in the index, so that Scan is a range in key
// order as in the other stores.
//
// A YCSB record is a hash "table/key" with one hash field per YCSB field.
// Every record key is also a member of a sorted set, the table's index
// "_index/table", with score 0, so that the set orders its members
// lexicographically: Scan is ZRANGEBYLEX index [start + LIMIT 0 count,
// then the hashes of those keys in one pipeline. (Java YCSB scores
// members by the key's hashCode and ranges by score, which is not key
// order.) Insert writes the hash and the index entry in one MULTI/EXEC;
// Update is HSET of the given fields (Redis merges them into the hash:
// the same record the other bindings leave); Delete removes both.
//
// Properties:
//
//	redis.addr       host:port (127.0.0.1:6379)
//	redis.pool_size  connections (default: threadcount, at least 10)
//	redis.timeout    per-operation deadline (10s)
package redis

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/magiconair/properties"
	"github.com/pingcap/go-ycsb/pkg/prop"
	"github.com/pingcap/go-ycsb/pkg/ycsb"
	goredis "github.com/redis/go-redis/v9"

	"github.com/cellstore/cell/ycsb/internal/record"
)

// Property names.
const (
	PropAddr     = "redis.addr"
	PropPoolSize = "redis.pool_size"
	PropTimeout  = "redis.timeout"
)

// Name is the binding's name on go-ycsb's command line.
const Name = "redis"

// ErrNotFound is returned by Read of a record that is not there.
var ErrNotFound = errors.New("redis: record not found")

func init() { ycsb.RegisterDBCreator(Name, creator{}) }

type creator struct{}

// Create connects to the Redis server the properties name and checks it
// answers.
func (creator) Create(p *properties.Properties) (ycsb.DB, error) {
	addr := p.GetString(PropAddr, "127.0.0.1:6379")
	pool := p.GetInt(PropPoolSize, max(10, p.GetInt(prop.ThreadCount, 1)))
	c := goredis.NewClient(&goredis.Options{Addr: addr, PoolSize: pool})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.Ping(ctx).Err(); err != nil {
		c.Close()
		return nil, fmt.Errorf("redis: connect to %s: %w", addr, err)
	}
	return &DB{c: c, timeout: p.GetParsedDuration(PropTimeout, 10*time.Second)}, nil
}

// DB is the binding: one go-redis client (a connection pool) shared by
// every YCSB thread.
type DB struct {
	c       *goredis.Client
	timeout time.Duration
}

// indexKey is the sorted set that orders table's record keys.
func indexKey(table string) string { return "_index/" + table }

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
	k := record.Key(table, key)
	if len(fields) == 0 {
		return fieldsOf(k, db.c.HGetAll(ctx, k))
	}
	return valuesOf(k, fields, db.c.HMGet(ctx, k, fields...))
}

// fieldsOf converts an HGETALL reply.
func fieldsOf(k string, cmd *goredis.MapStringStringCmd) (map[string][]byte, error) {
	m, err := cmd.Result()
	if err != nil {
		return nil, err
	}
	if len(m) == 0 {
		return nil, fmt.Errorf("%w: %s", ErrNotFound, k)
	}
	out := make(map[string][]byte, len(m))
	for f, v := range m {
		out[f] = []byte(v)
	}
	return out, nil
}

// valuesOf converts an HMGET reply of fields.
func valuesOf(k string, fields []string, cmd *goredis.SliceCmd) (map[string][]byte, error) {
	vs, err := cmd.Result()
	if err != nil {
		return nil, err
	}
	out := make(map[string][]byte, len(fields))
	for i, v := range vs {
		if s, ok := v.(string); ok {
			out[fields[i]] = []byte(s)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%w: %s", ErrNotFound, k)
	}
	return out, nil
}

// Scan returns up to count records from startKey on, in key order: the
// keys from the index, then their hashes in one pipeline.
func (db *DB) Scan(ctx context.Context, table, startKey string, count int, fields []string) ([]map[string][]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, db.timeout)
	defer cancel()
	keys, err := db.c.ZRangeByLex(ctx, indexKey(table), &goredis.ZRangeBy{
		Min: "[" + record.Key(table, startKey), Max: "+", Count: int64(count),
	}).Result()
	if err != nil {
		return nil, err
	}
	pipe := db.c.Pipeline()
	all := make([]*goredis.MapStringStringCmd, len(keys))
	some := make([]*goredis.SliceCmd, len(keys))
	for i, k := range keys {
		if len(fields) == 0 {
			all[i] = pipe.HGetAll(ctx, k)
		} else {
			some[i] = pipe.HMGet(ctx, k, fields...)
		}
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return nil, err
	}
	out := make([]map[string][]byte, 0, len(keys))
	for i, k := range keys {
		var f map[string][]byte
		if len(fields) == 0 {
			f, err = fieldsOf(k, all[i])
		} else {
			f, err = valuesOf(k, fields, some[i])
		}
		if err != nil {
			return nil, err
		}
		out = append(out, f)
	}
	return out, nil
}

// Update writes values into the record's hash (HSET: Redis merges them).
func (db *DB) Update(ctx context.Context, table, key string, values map[string][]byte) error {
	ctx, cancel := context.WithTimeout(ctx, db.timeout)
	defer cancel()
	return db.c.HSet(ctx, record.Key(table, key), hashArgs(values)...).Err()
}

// Insert writes the record's hash and its index entry, in one
// transaction.
func (db *DB) Insert(ctx context.Context, table, key string, values map[string][]byte) error {
	ctx, cancel := context.WithTimeout(ctx, db.timeout)
	defer cancel()
	k := record.Key(table, key)
	_, err := db.c.TxPipelined(ctx, func(pipe goredis.Pipeliner) error {
		pipe.HSet(ctx, k, hashArgs(values)...)
		pipe.ZAdd(ctx, indexKey(table), goredis.Z{Score: 0, Member: k})
		return nil
	})
	return err
}

// Delete removes the record's hash and its index entry, in one
// transaction.
func (db *DB) Delete(ctx context.Context, table, key string) error {
	ctx, cancel := context.WithTimeout(ctx, db.timeout)
	defer cancel()
	k := record.Key(table, key)
	_, err := db.c.TxPipelined(ctx, func(pipe goredis.Pipeliner) error {
		pipe.Del(ctx, k)
		pipe.ZRem(ctx, indexKey(table), k)
		return nil
	})
	return err
}

// hashArgs flattens values into HSET's field, value arguments.
func hashArgs(values map[string][]byte) []any {
	args := make([]any, 0, 2*len(values))
	for f, v := range values {
		args = append(args, f, v)
	}
	return args
}
