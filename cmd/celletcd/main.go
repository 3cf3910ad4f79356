// Command celletcd is etcd itself, built from the go.etcd.io/etcd/server/v3
// module that Cell pins in go.mod: the etcd of the docker-compose cluster
// (deploy/docker), whose images are built offline. Its flags are etcd's
// own (celletcd --help).
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
