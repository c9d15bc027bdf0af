// Command freeport prints N (default 1) distinct free TCP ports on 127.0.0.1,
// one a line. It binds each to port 0, keeps all of them open until every port
// is picked (so they are distinct), then closes them.
package main

import (
	"fmt"
	"net"
	"os"
	"strconv"
)

func main() {
	n := 1
	if len(os.Args) > 1 {
		v, err := strconv.Atoi(os.Args[1])
		if err != nil || v < 1 || v > 64 {
			fmt.Fprintln(os.Stderr, "usage: freeport [N]  (1..64)")
			os.Exit(2)
		}
		n = v
	}
	ls := make([]net.Listener, 0, n)
	for i := 0; i < n; i++ {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			fmt.Fprintln(os.Stderr, "freeport:", err)
			os.Exit(1)
		}
		ls = append(ls, l)
	}
	for _, l := range ls {
		fmt.Println(l.Addr().(*net.TCPAddr).Port)
		l.Close()
	}
}
