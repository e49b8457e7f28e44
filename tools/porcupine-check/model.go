package main

import (
	"fmt"
	"hash/fnv"
	"sort"

	"github.com/anishathalye/porcupine"
)

// KVModel is Porcupine's key-value model (get, put, append on string values), partitioned by
// key: a history is linearizable if and only if each key's is. The state is one key's value,
// "" when it is missing.
var KVModel = porcupine.Model{
	Partition: func(history []porcupine.Operation) [][]porcupine.Operation {
		m := map[string][]porcupine.Operation{}
		for _, o := range history {
			k := o.Input.(Input).Key
			m[k] = append(m[k], o)
		}
		keys := make([]string, 0, len(m))
		for k := range m {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		out := make([][]porcupine.Operation, 0, len(keys))
		for _, k := range keys {
			out = append(out, m[k])
		}
		return out
	},
	Init: func() interface{} { return "" },
	Step: func(state, input, output interface{}) (bool, interface{}) {
		st := state.(string)
		in := input.(Input)
		out := output.(Output)
		switch in.Kind {
		case "get":
			return out.Unknown || out.Value == st, st
		case "set":
			return true, in.Value
		default: // append
			return true, st + in.Value
		}
	},
	Hash: func(state interface{}) uint64 {
		h := fnv.New64a()
		h.Write([]byte(state.(string)))
		return h.Sum64()
	},
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
