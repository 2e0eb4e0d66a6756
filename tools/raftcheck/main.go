// raftcheck: the replicated server's load generator and linearizability checker.
//
//	raftcheck load [--nodes a,b,c] [--clients 8] [--value-bytes 4096] [--seconds 20]
//	raftcheck linearizability --bin target/debug/wisckey [--seconds 60]
//	raftcheck check HISTORY.json
//
// `load` puts into a running cluster and prints ops/s and latency percentiles.
// `linearizability` runs a cluster of `<bin> serve` processes under faults, records the
// clients' history and checks it with porcupine (exit status 1 when not linearizable).
// `check` checks a history written by `linearizability` (or by hand).
package main

import (
	"fmt"
	"os"

	"github.com/anishathalye/porcupine"
)

func main() {
	if len(os.Args) < 2 {
		usage()
	}
	var err error
	switch os.Args[1] {
	case "load":
		err = runLoad(os.Args[2:])
	case "linearizability":
		err = runLinearizability(os.Args[2:])
	case "check":
		err = runCheck(os.Args[2:])
	default:
		usage()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "raftcheck:", err)
		os.Exit(1)
	}
}

func usage() {
	fmt.Fprintln(os.Stderr, "usage: raftcheck load|linearizability|check [flags] (raftcheck <command> -h for flags)")
	os.Exit(2)
}

func runCheck(args []string) error {
	if len(args) != 1 {
		return fmt.Errorf("usage: raftcheck check HISTORY.json")
	}
	h, err := readHistory(args[0])
	if err != nil {
		return err
	}
	res, err := h.check(0, "")
	if err != nil {
		return err
	}
	fmt.Printf("porcupine: %s (%d operations)\n", res, len(h.Ops))
	if res != porcupine.Ok {
		return fmt.Errorf("%s is not linearizable", args[0])
	}
	return nil
}
