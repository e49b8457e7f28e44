package main

import (
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/anishathalye/porcupine"
)

// zsetState is one sorted-set key's value: its size and its members with their scores in
// Redis's order (score, then member bytewise), encoded as ZRANGE k 0 -1 WITHSCORES answers
// them, member then score's decimal text, in the encoding of encoding.go. The order makes the
// encoding canonical: equal sets have equal states. A missing key is the empty set.
type zsetState struct {
	n   int
	enc string
}

// zentry is one member of a sorted set.
type zentry struct {
	member string
	score  int64
}

// entries decodes a state.
func (st zsetState) entries() []zentry {
	flat := decodeStrings(st.enc)
	es := make([]zentry, 0, len(flat)/2)
	for i := 0; i+1 < len(flat); i += 2 {
		score, err := strconv.ParseInt(flat[i+1], 10, 64)
		if err != nil {
			panic("a sorted-set state holds a score that is not an integer: " + strconv.Quote(flat[i+1]))
		}
		es = append(es, zentry{flat[i], score})
	}
	return es
}

// zsetOf sorts es in Redis's order and encodes them.
func zsetOf(es []zentry) zsetState {
	sort.Slice(es, func(i, j int) bool {
		if es[i].score != es[j].score {
			return es[i].score < es[j].score
		}
		return es[i].member < es[j].member
	})
	var b strings.Builder
	for _, e := range es {
		b.WriteString(encodeString(e.member))
		b.WriteString(encodeString(strconv.FormatInt(e.score, 10)))
	}
	return zsetState{len(es), b.String()}
}

// find is the index of member in es, or -1.
func find(es []zentry, member string) int {
	for i, e := range es {
		if e.member == member {
			return i
		}
	}
	return -1
}

// ZSetModel is a model of Redis sorted sets with integer scores, partitioned by key: ZADD k
// score member (1 if added, 0 if its score was updated), ZINCRBY k incr member (the new score,
// as text), ZREM k member (1 or 0), ZRANGE k 0 -1 WITHSCORES (the whole set, in order) and
// ZPOPMIN k (the lowest member and its score, or nothing on an empty set). Scores are
// integers so their text is exact: a server writes an integer-valued double of up to 17
// digits in decimal, as the model does; keep them well inside ±2^53.
var ZSetModel = porcupine.Model{
	Partition: partitionByKey,
	Init:      func() interface{} { return zsetState{} },
	Step: func(state, input, output interface{}) (bool, interface{}) {
		st := state.(zsetState)
		in := input.(Input)
		out := output.(Output)
		if in.Kind == "zrange" {
			return out.Unknown || (len(out.Values) == 2*st.n && encodeStrings(out.Values) == st.enc), st
		}
		es := st.entries()
		i := find(es, in.Value)
		switch in.Kind {
		case "zadd":
			added := int64(0)
			if i < 0 {
				es, added = append(es, zentry{in.Value, in.Score}), 1
			} else {
				es[i].score = in.Score
			}
			return out.Unknown || out.Int == added, zsetOf(es)
		case "zincrby":
			if i < 0 {
				es, i = append(es, zentry{in.Value, 0}), len(es)
			}
			es[i].score += in.Score
			return out.Unknown || out.Value == strconv.FormatInt(es[i].score, 10), zsetOf(es)
		case "zrem":
			if i < 0 {
				return out.Unknown || out.Int == 0, st
			}
			es = append(es[:i], es[i+1:]...)
			return out.Unknown || out.Int == 1, zsetOf(es)
		case "zpopmin":
			if st.n == 0 {
				return out.Unknown || len(out.Values) == 0, st
			}
			lowest := []string{es[0].member, strconv.FormatInt(es[0].score, 10)}
			ok := out.Unknown || (len(out.Values) == 2 && out.Values[0] == lowest[0] && out.Values[1] == lowest[1])
			return ok, zsetOf(es[1:])
		}
		panic(fmt.Sprintf("the sorted-set model was given a %q operation", in.Kind))
	},
	Hash: func(state interface{}) uint64 { return hashString(state.(zsetState).enc) },
	DescribeOperation: func(input, output interface{}) string {
		in := input.(Input)
		out := output.(Output)
		var res string
		switch {
		case out.Unknown:
			res = "unknown"
		case in.Kind == "zadd" || in.Kind == "zrem":
			res = fmt.Sprint(out.Int)
		case in.Kind == "zincrby":
			res = fmt.Sprintf("%q", out.Value)
		default:
			res = fmt.Sprintf("%q", out.Values)
		}
		switch in.Kind {
		case "zadd", "zincrby":
			return fmt.Sprintf("%s(%q, %d, %q) -> %s", in.Kind, in.Key, in.Score, in.Value, res)
		case "zrem":
			return fmt.Sprintf("zrem(%q, %q) -> %s", in.Key, in.Value, res)
		default:
			return fmt.Sprintf("%s(%q) -> %s", in.Kind, in.Key, res)
		}
	},
	DescribeState: func(state interface{}) string {
		var parts []string
		for _, e := range state.(zsetState).entries() {
			parts = append(parts, fmt.Sprintf("%q: %d", e.member, e.score))
		}
		return "{" + strings.Join(parts, ", ") + "}"
	},
}
