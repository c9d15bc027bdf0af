// Command etcd is etcd's own server entry point, built from the go.etcd.io/etcd
// module version that k8s.io/kubernetes requires, so that the API server and
// etcd come from one module graph.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
