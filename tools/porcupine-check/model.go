package main

import (
	"fmt"

	"github.com/anishathalye/porcupine"
)

// KVModel is Porcupine's key-value model (get, put, append on string values), partitioned by
// key: a history is linearizable if and only if each key's is. The state is one key's value,
// "" when it is missing.
var KVModel = porcupine.Model{
	Partition: partitionByKey,
	Init:      func() interface{} { return "" },
	Step: func(state, input, output interface{}) (bool, interface{}) {
		st := state.(string)
		in := input.(Input)
		out := output.(Output)
		switch in.Kind {
		case "get":
			return out.Unknown || out.Value == st, st
		case "set":
			return true, in.Value
		case "append":
			return true, st + in.Value
		}
		panic(fmt.Sprintf("the key-value model was given a %q operation", in.Kind))
	},
	Hash: func(state interface{}) uint64 { return hashString(state.(string)) },
	DescribeOperation: func(input, output interface{}) string {
		in := input.(Input)
		out := output.(Output)
		switch in.Kind {
		case "get":
			return fmt.Sprintf("get(%q) -> %q", in.Key, out.Value)
		case "set":
			if out.Unknown {
				return fmt.Sprintf("set(%q, %q) -> unknown", in.Key, in.Value)
			}
			return fmt.Sprintf("set(%q, %q)", in.Key, in.Value)
		default:
			if out.Unknown {
				return fmt.Sprintf("append(%q, %q) -> unknown", in.Key, in.Value)
			}
			return fmt.Sprintf("append(%q, %q)", in.Key, in.Value)
		}
	},
	DescribeState: func(state interface{}) string { return fmt.Sprintf("%q", state.(string)) },
}
