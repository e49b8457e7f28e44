package main

import (
	"encoding/json"
	"fmt"
	"math"
	"time"

	"github.com/anishathalye/porcupine"
)

// Op is one operation of a recorded history, as the tests write it:
//
//	{"client": 3, "op": "set", "key": "k1", "value": "c3-17", "output": null, "call": 1200, "return": 1350}
//
// op is "get", "set" or "append"; value is what a set or append wrote; output is what a get
// read ("" for a missing key; the tests never write ""). call and return are nanoseconds on
// one monotonic clock. An operation whose outcome is unknown (the connection died before the
// reply) has "return": null: a write may have taken effect at any time after its call, or
// never; a read with no reply tells nothing and is left out.
type Op struct {
	Client int     `json:"client"`
	Kind   string  `json:"op"`
	Key    string  `json:"key"`
	Value  string  `json:"value"`
	Output *string `json:"output"`
	Call   int64   `json:"call"`
	Return *int64  `json:"return"`
}

// Input is an operation's input in the model.
type Input struct {
	Kind  string
	Key   string
	Value string
}

// Output is an operation's output in the model.
type Output struct {
	Value string
	// Unknown: no reply was seen; any outcome is allowed.
	Unknown bool
}

// ParseHistory reads a JSON history into Porcupine operations, checking each field.
func ParseHistory(data []byte) ([]porcupine.Operation, error) {
	var raw []Op
	if err := json.Unmarshal(data, &raw); err != nil {
		return nil, fmt.Errorf("not a JSON array of operations: %v", err)
	}
	ops := make([]porcupine.Operation, 0, len(raw))
	for i, o := range raw {
		if o.Client < 0 {
			return nil, fmt.Errorf("operation %d: client %d is negative", i, o.Client)
		}
		switch o.Kind {
		case "get", "set", "append":
		default:
			return nil, fmt.Errorf("operation %d: op %q is not one of get, set, append", i, o.Kind)
		}
		if o.Kind == "get" && o.Return != nil && o.Output == nil {
			return nil, fmt.Errorf("operation %d: a get with a reply needs its output", i)
		}
		if o.Return != nil && *o.Return < o.Call {
			return nil, fmt.Errorf("operation %d: return %d is before call %d", i, *o.Return, o.Call)
		}
		ret := int64(math.MaxInt64)
		out := Output{Unknown: true}
		if o.Return != nil {
			ret = *o.Return
			out = Output{}
			if o.Output != nil {
				out.Value = *o.Output
			}
		} else if o.Kind == "get" {
			continue
		}
		ops = append(ops, porcupine.Operation{
			ClientId: o.Client,
			Input:    Input{Kind: o.Kind, Key: o.Key, Value: o.Value},
			Call:     o.Call,
			Output:   out,
			Return:   ret,
		})
	}
	return ops, nil
}

// Check runs Porcupine's checker with [KVModel] on ops.
func Check(ops []porcupine.Operation, timeout time.Duration) (porcupine.CheckResult, porcupine.LinearizationInfo) {
	return porcupine.CheckOperationsVerbose(KVModel, ops, timeout)
}

// Summary counts a history's operations.
type Summary struct {
	Ops, Pending, Keys, Clients int
}

// Summarize counts ops.
func Summarize(ops []porcupine.Operation) Summary {
	keys := map[string]bool{}
	clients := map[int]bool{}
	s := Summary{Ops: len(ops)}
	for _, o := range ops {
		keys[o.Input.(Input).Key] = true
		clients[o.ClientId] = true
		if o.Output.(Output).Unknown {
			s.Pending++
		}
	}
	s.Keys, s.Clients = len(keys), len(clients)
	return s
}
