package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"sort"
	"strings"
	"time"

	"github.com/anishathalye/porcupine"
)

// Op is one operation of a recorded history, as the tests write it, one JSON object each:
//
//	{"client": 3, "op": "set", "key": "k1", "value": "c3-17", "output": null, "call": 1200, "return": 1350}
//
// client is the sequential process that ran it; call and return are nanoseconds on one
// monotonic clock. An operation whose outcome is unknown (the connection died before the
// reply) has "return": null and no output: a write may have taken effect at any time after
// its call, or never; a read with no reply tells nothing and is left out.
//
// op names the command, and so the type of its key (a key takes operations of one type only;
// the checker refuses a history that mixes two on one key). value, score and output are, by op:
//
//	string keys ([KVModel])
//	  "get"      GET k                      output: the value read, "" for a missing key (no
//	                                        history writes "")
//	  "set"      SET k value                output: null
//	  "append"   APPEND k value             output: null
//	list keys ([ListModel])
//	  "rpush"    RPUSH k value              output: the list's new length (a number)
//	  "lpush"    LPUSH k value              output: the list's new length
//	  "lpop"     LPOP k                     output: the value popped, null for an empty list
//	  "lrange"   LRANGE k 0 -1              output: the whole list, an array of strings, head first
//	sorted-set keys ([ZSetModel]); value is the member, score an integer (a JSON number)
//	  "zadd"     ZADD k score value         output: 1 if the member was added, 0 if updated
//	  "zincrby"  ZINCRBY k score value      output: the member's new score as the server wrote
//	                                        it (a string, "-3")
//	  "zrem"     ZREM k value               output: 1 if the member was removed, 0 if absent
//	  "zrange"   ZRANGE k 0 -1 WITHSCORES   output: the whole set as the server wrote it, lowest
//	                                        score first: ["m1", "-3", "m0", "2"]
//	  "zpopmin"  ZPOPMIN k                  output: ["member", "score"], [] for an empty set
//
// Scores are integers so that the text of a score is exact: the model expects the decimal
// form ("-3", "0", "12"). Fields an op does not use may be left out or null. The workload of
// crates/cli/tests names its keys by type (k0.. strings, l0.. lists, z0.. sorted sets), but
// the checker goes by the ops alone.
type Op struct {
	Client int             `json:"client"`
	Kind   string          `json:"op"`
	Key    string          `json:"key"`
	Value  string          `json:"value"`
	Score  *int64          `json:"score"`
	Output json.RawMessage `json:"output"`
	Call   int64           `json:"call"`
	Return *int64          `json:"return"`
}

// Input is an operation's input in the models.
type Input struct {
	Kind  string
	Key   string
	Value string
	// Score: zadd's score, zincrby's increment.
	Score int64
}

// Output is an operation's output in the models; which field holds it depends on the op.
type Output struct {
	// get's value, lpop's value, zincrby's score text.
	Value string
	// lpop of an empty list.
	Nil bool
	// rpush's and lpush's length, zadd's and zrem's 0 or 1.
	Int int64
	// lrange's list, zrange's members and scores, zpopmin's member and score.
	Values []string
	// Unknown: no reply was seen; any outcome is allowed.
	Unknown bool
}

// opShape says how each op is written: its type (the model that checks it), whether it takes a
// score, whether it only reads, and the form of its output.
type opShape struct {
	family string
	score  bool
	read   bool
	output outputForm
}

type outputForm int

const (
	outNone outputForm = iota
	outString
	outStringOrNull
	outInt
	outStrings
)

var shapes = map[string]opShape{
	"get":     {family: "string", read: true, output: outString},
	"set":     {family: "string", output: outNone},
	"append":  {family: "string", output: outNone},
	"rpush":   {family: "list", output: outInt},
	"lpush":   {family: "list", output: outInt},
	"lpop":    {family: "list", output: outStringOrNull},
	"lrange":  {family: "list", read: true, output: outStrings},
	"zadd":    {family: "zset", score: true, output: outInt},
	"zincrby": {family: "zset", score: true, output: outString},
	"zrem":    {family: "zset", output: outInt},
	"zrange":  {family: "zset", read: true, output: outStrings},
	"zpopmin": {family: "zset", output: outStrings},
}

// opNames lists the ops, for messages.
func opNames() []string {
	names := make([]string, 0, len(shapes))
	for k := range shapes {
		names = append(names, k)
	}
	sort.Strings(names)
	return names
}

// decodeOutput reads a replied operation's output in the form its op writes.
func decodeOutput(raw json.RawMessage, form outputForm) (Output, error) {
	null := len(raw) == 0 || bytes.Equal(raw, []byte("null"))
	var out Output
	switch form {
	case outNone:
		return out, nil
	case outString, outStringOrNull:
		if null {
			if form == outString {
				return out, fmt.Errorf("needs its output, a string")
			}
			out.Nil = true
			return out, nil
		}
		if err := json.Unmarshal(raw, &out.Value); err != nil {
			return out, fmt.Errorf("output %s is not a string", raw)
		}
	case outInt:
		if null || json.Unmarshal(raw, &out.Int) != nil {
			return out, fmt.Errorf("output %s is not an integer", raw)
		}
	case outStrings:
		if null || json.Unmarshal(raw, &out.Values) != nil {
			return out, fmt.Errorf("output %s is not an array of strings", raw)
		}
		if out.Values == nil {
			out.Values = []string{}
		}
	}
	return out, nil
}

// ParseHistory reads a JSON history into Porcupine operations, checking each field and that
// no key takes operations of two types.
func ParseHistory(data []byte) ([]porcupine.Operation, error) {
	var raw []Op
	if err := json.Unmarshal(data, &raw); err != nil {
		return nil, fmt.Errorf("not a JSON array of operations: %v", err)
	}
	ops := make([]porcupine.Operation, 0, len(raw))
	keyFamily := map[string]string{}
	for i, o := range raw {
		if o.Client < 0 {
			return nil, fmt.Errorf("operation %d: client %d is negative", i, o.Client)
		}
		shape, ok := shapes[o.Kind]
		if !ok {
			return nil, fmt.Errorf("operation %d: op %q is not one of %v", i, o.Kind, opNames())
		}
		if f, seen := keyFamily[o.Key]; seen && f != shape.family {
			return nil, fmt.Errorf("operation %d: %s on key %q, which earlier operations use as a %s key "+
				"(a key holds one type: give each type its own keys)", i, o.Kind, o.Key, f)
		}
		keyFamily[o.Key] = shape.family
		if shape.score != (o.Score != nil) {
			if shape.score {
				return nil, fmt.Errorf("operation %d: %s needs its score (an integer)", i, o.Kind)
			}
			return nil, fmt.Errorf("operation %d: %s takes no score", i, o.Kind)
		}
		if o.Return != nil && *o.Return < o.Call {
			return nil, fmt.Errorf("operation %d: return %d is before call %d", i, *o.Return, o.Call)
		}
		in := Input{Kind: o.Kind, Key: o.Key, Value: o.Value}
		if o.Score != nil {
			in.Score = *o.Score
		}
		ret := int64(math.MaxInt64)
		out := Output{Unknown: true}
		if o.Return != nil {
			ret = *o.Return
			var err error
			if out, err = decodeOutput(o.Output, shape.output); err != nil {
				return nil, fmt.Errorf("operation %d: %s %v", i, o.Kind, err)
			}
		} else if shape.read {
			continue
		}
		ops = append(ops, porcupine.Operation{
			ClientId: o.Client,
			Input:    in,
			Call:     o.Call,
			Output:   out,
			Return:   ret,
		})
	}
	return ops, nil
}

// Check runs Porcupine's checker with [HistoryModel] on ops.
func Check(ops []porcupine.Operation, timeout time.Duration) (porcupine.CheckResult, porcupine.LinearizationInfo) {
	return porcupine.CheckOperationsVerbose(HistoryModel, ops, timeout)
}

// Summary counts a history's operations.
type Summary struct {
	Ops, Pending, Keys, Clients int
	// ByOp counts the operations of each op ("get", "rpush", ...).
	ByOp map[string]int
}

// Summarize counts ops.
func Summarize(ops []porcupine.Operation) Summary {
	keys := map[string]bool{}
	clients := map[int]bool{}
	s := Summary{Ops: len(ops), ByOp: map[string]int{}}
	for _, o := range ops {
		in := o.Input.(Input)
		keys[in.Key] = true
		clients[o.ClientId] = true
		s.ByOp[in.Kind]++
		if o.Output.(Output).Unknown {
			s.Pending++
		}
	}
	s.Keys, s.Clients = len(keys), len(clients)
	return s
}

// String writes the counts, by type and then by op.
func (s Summary) String() string {
	var b bytes.Buffer
	fmt.Fprintf(&b, "%d operations (%d pending), %d keys, %d clients", s.Ops, s.Pending, s.Keys, s.Clients)
	for _, family := range []string{"string", "list", "zset"} {
		total := 0
		var parts []string
		for _, name := range opNames() {
			if shapes[name].family == family && s.ByOp[name] > 0 {
				total += s.ByOp[name]
				parts = append(parts, fmt.Sprintf("%s %d", name, s.ByOp[name]))
			}
		}
		if total > 0 {
			fmt.Fprintf(&b, "; %s %d (%s)", family, total, strings.Join(parts, ", "))
		}
	}
	return b.String()
}
