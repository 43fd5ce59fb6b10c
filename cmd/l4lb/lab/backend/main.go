// Command backend is the lab's backend server (lab.sh): on every address,
// it answers HTTP GET with its name (its first argument) and a newline, and
// echoes each line a raw TCP client sends on port 7 back to it. It runs in
// a backend's network namespace, where the VIP is on lo.
package main

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: backend NAME")
		os.Exit(2)
	}
	name := os.Args[1]
	echo, err := net.Listen("tcp", ":7")
	if err != nil {
		fmt.Fprintln(os.Stderr, "backend:", err)
		os.Exit(1)
	}
	go func() {
		for {
			c, err := echo.Accept()
			if err != nil {
				return
			}
			go func() {
				defer func() { _ = c.Close() }()
				r := bufio.NewReader(c)
				for {
					line, err := r.ReadString('\n')
					if err != nil {
						return
					}
					if _, err := io.WriteString(c, line); err != nil {
						return
					}
				}
			}()
		}
	}()
	err = http.ListenAndServe(":80", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = fmt.Fprintln(w, name)
	}))
	fmt.Fprintln(os.Stderr, "backend:", err)
	os.Exit(1)
}
