// Command etcd is the etcd server, run through etcdmain as etcd's own binary is.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
