// Command porcupine-check checks a history of string, list and sorted-set keys recorded by a
// Mojim test for linearizability with Porcupine (github.com/anishathalye/porcupine), each key
// with the model of its type (see [HistoryModel]).
//
// Usage:
//
//	porcupine-check [-timeout 60s] [-html out.html] history.json
//
// The history is a JSON array of operations (see [Op]). Exit status: 0 linearizable,
// 1 not linearizable (the visualization is written to -html if given), 2 bad input,
// 3 the check timed out before deciding.
package main

import (
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/anishathalye/porcupine"
)

func main() {
	timeout := flag.Duration("timeout", 60*time.Second, "give up (exit 3) after this long")
	html := flag.String("html", "", "on a violation, write Porcupine's visualization to this file")
	flag.Parse()
	if flag.NArg() != 1 {
		fmt.Fprintln(os.Stderr, "usage: porcupine-check [-timeout 60s] [-html out.html] history.json")
		os.Exit(2)
	}
	path := flag.Arg(0)
	data, err := os.ReadFile(path)
	if err != nil {
		fmt.Fprintf(os.Stderr, "porcupine-check: read the history %s: %v\n", path, err)
		os.Exit(2)
	}
	ops, err := ParseHistory(data)
	if err != nil {
		fmt.Fprintf(os.Stderr, "porcupine-check: %s: %v\n", path, err)
		os.Exit(2)
	}
	res, info := Check(ops, *timeout)
	s := Summarize(ops)
	fmt.Printf("%s: %s\n", s, res)
	switch res {
	case porcupine.Ok:
		os.Exit(0)
	case porcupine.Illegal:
		if *html != "" {
			if err := porcupine.VisualizePath(HistoryModel, info, *html); err != nil {
				fmt.Fprintf(os.Stderr, "porcupine-check: write the visualization %s: %v\n", *html, err)
			} else {
				fmt.Printf("visualization: %s\n", *html)
			}
		}
		os.Exit(1)
	default:
		fmt.Fprintf(os.Stderr, "porcupine-check: no answer within %v (raise -timeout, or record a shorter history)\n", *timeout)
		os.Exit(3)
	}
}
