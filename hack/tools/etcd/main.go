// Command etcd is etcd's own server entrypoint, built from the pinned go.etcd.io/etcd/server/v3
// module (etcd publishes no installable main package for the server).
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
