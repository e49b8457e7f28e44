package main

import (
	"fmt"

	"github.com/anishathalye/porcupine"
)

// listState is one list key's value: its length and its elements, head first, in the
// encoding of encoding.go. A missing key is the empty list (Redis deletes a list when its last
// element goes).
type listState struct {
	n   int
	enc string
}

// ListModel is a model of Redis lists, partitioned by key: RPUSH and LPUSH (the reply, the
// list's new length, is checked), LPOP (the head, or nil on an empty list) and LRANGE k 0 -1
// (the whole list).
var ListModel = porcupine.Model{
	Partition: partitionByKey,
	Init:      func() interface{} { return listState{} },
	Step: func(state, input, output interface{}) (bool, interface{}) {
		st := state.(listState)
		in := input.(Input)
		out := output.(Output)
		switch in.Kind {
		case "rpush":
			next := listState{st.n + 1, st.enc + encodeString(in.Value)}
			return out.Unknown || out.Int == int64(next.n), next
		case "lpush":
			next := listState{st.n + 1, encodeString(in.Value) + st.enc}
			return out.Unknown || out.Int == int64(next.n), next
		case "lpop":
			if st.n == 0 {
				return out.Unknown || out.Nil, st
			}
			head, rest := splitHead(st.enc)
			return out.Unknown || (!out.Nil && out.Value == head), listState{st.n - 1, rest}
		case "lrange":
			return out.Unknown || (len(out.Values) == st.n && encodeStrings(out.Values) == st.enc), st
		}
		panic(fmt.Sprintf("the list model was given a %q operation", in.Kind))
	},
	Hash: func(state interface{}) uint64 { return hashString(state.(listState).enc) },
	DescribeOperation: func(input, output interface{}) string {
		in := input.(Input)
		out := output.(Output)
		var res string
		switch {
		case out.Unknown:
			res = "unknown"
		case in.Kind == "rpush" || in.Kind == "lpush":
			res = fmt.Sprint(out.Int)
		case in.Kind == "lpop" && out.Nil:
			res = "nil"
		case in.Kind == "lpop":
			res = fmt.Sprintf("%q", out.Value)
		default:
			res = fmt.Sprintf("%q", out.Values)
		}
		switch in.Kind {
		case "rpush", "lpush":
			return fmt.Sprintf("%s(%q, %q) -> %s", in.Kind, in.Key, in.Value, res)
		default:
			return fmt.Sprintf("%s(%q) -> %s", in.Kind, in.Key, res)
		}
	},
	DescribeState: func(state interface{}) string {
		return fmt.Sprintf("%q", decodeStrings(state.(listState).enc))
	},
}
