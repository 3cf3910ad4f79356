package client_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/cellstore/cell/client"
)

// Each example starts a single-node store of its own (startExampleStore,
// examplestore_test.go: what `go run ./cmd/cellserver` runs) and stops it
// at its end; endpoints are its etcd's, as 127.0.0.1:2379 is cellserver's.

// A program that connects to the store through its etcd, writes a key and
// reads it back.
func ExampleNew() {
	endpoints, stop := startExampleStore()
	defer stop()

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := client.New(ctx, client.Config{Endpoints: endpoints})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	if err := c.Put(ctx, []byte("hello"), []byte("world")); err != nil {
		log.Fatal(err)
	}
	v, err := c.Get(ctx, []byte("hello"))
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("hello=%s\n", v)
	// Output: hello=world
}

func ExampleClient_Get() {
	endpoints, stop := startExampleStore()
	defer stop()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := client.New(ctx, client.Config{Endpoints: endpoints})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	if err := c.Put(ctx, []byte("fruit/apple"), []byte("red")); err != nil {
		log.Fatal(err)
	}

	v, err := c.Get(ctx, []byte("fruit/apple"))
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("apple: %s\n", v)

	// A missing key is an error wrapping ErrNotFound.
	_, err = c.Get(ctx, []byte("fruit/durian"))
	if errors.Is(err, client.ErrNotFound) {
		fmt.Println("durian: not found")
	} else if err != nil {
		log.Fatal(err)
	}
	// Output:
	// apple: red
	// durian: not found
}

func ExampleClient_Put() {
	endpoints, stop := startExampleStore()
	defer stop()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := client.New(ctx, client.Config{Endpoints: endpoints})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	// Put replaces the previous value.
	for _, color := range []string{"green", "yellow"} {
		if err := c.Put(ctx, []byte("fruit/banana"), []byte(color)); err != nil {
			// errors.Is(err, client.ErrOutcomeUnknown): the put may or
			// may not have been applied (a Get tells which); any other
			// error: it was not.
			log.Fatal(err)
		}
	}
	v, err := c.Get(ctx, []byte("fruit/banana"))
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("banana: %s\n", v)
	// Output: banana: yellow
}

func ExampleClient_Delete() {
	endpoints, stop := startExampleStore()
	defer stop()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := client.New(ctx, client.Config{Endpoints: endpoints})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	if err := c.Put(ctx, []byte("fruit/cherry"), []byte("dark red")); err != nil {
		log.Fatal(err)
	}

	if err := c.Delete(ctx, []byte("fruit/cherry")); err != nil {
		log.Fatal(err)
	}
	// Deleting a key that is not there is an error wrapping ErrNotFound.
	err = c.Delete(ctx, []byte("fruit/cherry"))
	fmt.Println("second delete:", errors.Is(err, client.ErrNotFound))
	_, err = c.Get(ctx, []byte("fruit/cherry"))
	fmt.Println("get after delete:", errors.Is(err, client.ErrNotFound))
	// Output:
	// second delete: true
	// get after delete: true
}

// Range returns a slice of pairs, at most Limit of them, and the key to
// resume at; a loop over the pages reads a large range.
func ExampleClient_Range() {
	endpoints, stop := startExampleStore()
	defer stop()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := client.New(ctx, client.Config{Endpoints: endpoints})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	for i := range 5 {
		if err := c.Put(ctx, fmt.Appendf(nil, "k%d", i), fmt.Appendf(nil, "v%d", i)); err != nil {
			log.Fatal(err)
		}
	}

	// [k1, k4) two pairs at a time.
	start, end := []byte("k1"), []byte("k4")
	for page := 1; ; page++ {
		pairs, resume, err := c.Range(ctx, start, end, client.RangeOptions{Limit: 2})
		if err != nil {
			log.Fatal(err)
		}
		for _, kv := range pairs {
			fmt.Printf("page %d: %s=%s\n", page, kv.Key, kv.Value)
		}
		if resume == nil {
			break // the range is exhausted
		}
		start = resume
	}

	// Every key, in descending order (nil bounds are unbounded).
	pairs, _, err := c.Range(ctx, nil, nil, client.RangeOptions{Reverse: true, KeysOnly: true})
	if err != nil {
		log.Fatal(err)
	}
	for _, kv := range pairs {
		fmt.Printf("%s ", kv.Key)
	}
	fmt.Println()
	// Output:
	// page 1: k1=v1
	// page 1: k2=v2
	// page 2: k3=v3
	// k4 k3 k2 k1 k0
}

// Scan iterates over a range, fetching it page by page as the loop goes;
// with Prefix, over the keys that begin with start. A failure arrives as
// the last element's error.
func ExampleClient_Scan() {
	endpoints, stop := startExampleStore()
	defer stop()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := client.New(ctx, client.Config{Endpoints: endpoints})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	for _, k := range []string{"user/ada", "user/alan", "user/grace", "users", "vendor/acme"} {
		if err := c.Put(ctx, []byte(k), []byte("1")); err != nil {
			log.Fatal(err)
		}
	}

	for kv, err := range c.Scan(ctx, []byte("user/"), nil, client.RangeOptions{Prefix: true}) {
		if err != nil {
			log.Fatal(err)
		}
		fmt.Printf("%s\n", kv.Key)
	}
	// Output:
	// user/ada
	// user/alan
	// user/grace
}

func ExamplePrefixEnd() {
	fmt.Printf("%q\n", client.PrefixEnd([]byte("user/")))
	fmt.Printf("%q\n", client.PrefixEnd([]byte("a\xff")))
	fmt.Printf("%q\n", client.PrefixEnd([]byte("\xff\xff"))) // no end: unbounded
	fmt.Printf("%q\n", client.PrefixEnd(nil))                // the whole keyspace
	// Output:
	// "user0"
	// "b"
	// ""
	// ""
}
