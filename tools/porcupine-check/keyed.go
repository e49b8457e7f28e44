package main

import (
	"hash/fnv"
	"sort"

	"github.com/anishathalye/porcupine"
)

// partitionByKey splits a history by key, keys in order: a history of independent keys is
// linearizable if and only if each key's is. Every model here partitions this way.
func partitionByKey(history []porcupine.Operation) [][]porcupine.Operation {
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
}

// hashString is FNV-1a of s, the hash of every model's state encoding.
func hashString(s string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(s))
	return h.Sum64()
}

// modelOf is the model of an op's type (the family in [shapes]).
func modelOf(kind string) *porcupine.Model {
	switch shapes[kind].family {
	case "string":
		return &KVModel
	case "list":
		return &ListModel
	case "zset":
		return &ZSetModel
	}
	panic("no model for op " + kind + " (ParseHistory lets only known ops through)")
}

// HistoryModel checks a history of string, list and sorted-set keys together: it partitions by
// key, and steps each key's operations with the model of their type ([KVModel], [ListModel] or
// [ZSetModel], picked by the op; ParseHistory makes sure a key's ops are of one type). A key's
// state starts as nil, no operation yet, which the model of its first operation reads as its
// own empty state. States of all three models compare with ==.
var HistoryModel = porcupine.Model{
	Partition: partitionByKey,
	Init:      func() interface{} { return nil },
	Step: func(state, input, output interface{}) (bool, interface{}) {
		m := modelOf(input.(Input).Kind)
		if state == nil {
			state = m.Init()
		}
		return m.Step(state, input, output)
	},
	Hash: func(state interface{}) uint64 {
		switch state.(type) {
		case nil:
			return 0
		case string:
			return KVModel.Hash(state)
		case listState:
			return ListModel.Hash(state)
		default:
			return ZSetModel.Hash(state)
		}
	},
	DescribeOperation: func(input, output interface{}) string {
		return modelOf(input.(Input).Kind).DescribeOperation(input, output)
	},
	DescribeState: func(state interface{}) string {
		switch state.(type) {
		case nil:
			return "(no operation yet)"
		case string:
			return KVModel.DescribeState(state)
		case listState:
			return ListModel.DescribeState(state)
		default:
			return ZSetModel.DescribeState(state)
		}
	},
}
