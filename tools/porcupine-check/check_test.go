package main

import (
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
)

func check(t *testing.T, history string) porcupine.CheckResult {
	t.Helper()
	ops, err := ParseHistory([]byte(history))
	if err != nil {
		t.Fatalf("parse: %v", err)
	}
	res, _ := Check(ops, 10*time.Second)
	return res
}

func TestConcurrentWritesAndReadsAreLinearizable(t *testing.T) {
	h := `[
	  {"client": 0, "op": "set", "key": "a", "value": "x", "call": 0, "return": 10},
	  {"client": 1, "op": "set", "key": "a", "value": "y", "call": 5, "return": 15},
	  {"client": 2, "op": "get", "key": "a", "output": "x", "call": 12, "return": 20},
	  {"client": 0, "op": "append", "key": "a", "value": "z", "call": 21, "return": 30},
	  {"client": 2, "op": "get", "key": "a", "output": "xz", "call": 31, "return": 40},
	  {"client": 1, "op": "get", "key": "b", "output": "", "call": 0, "return": 40}
	]`
	if res := check(t, h); res != porcupine.Ok {
		t.Fatalf("a linearizable history was judged %s", res)
	}
}

func TestAPendingWriteMayTakeEffectLateOrNever(t *testing.T) {
	// The set of "y" got no reply: one read sees it long after, another read before that
	// does not, both fine.
	h := `[
	  {"client": 0, "op": "set", "key": "a", "value": "x", "call": 0, "return": 10},
	  {"client": 1, "op": "set", "key": "a", "value": "y", "call": 11, "return": null},
	  {"client": 2, "op": "get", "key": "a", "output": "x", "call": 50, "return": 60},
	  {"client": 2, "op": "get", "key": "a", "output": "y", "call": 70, "return": 80},
	  {"client": 3, "op": "get", "key": "a", "call": 90, "return": null}
	]`
	if res := check(t, h); res != porcupine.Ok {
		t.Fatalf("a linearizable history with pending writes was judged %s", res)
	}
}

func TestAReadOfAValueNeverWrittenIsAViolation(t *testing.T) {
	h := `[
	  {"client": 0, "op": "set", "key": "a", "value": "x", "call": 0, "return": 10},
	  {"client": 1, "op": "get", "key": "a", "output": "ghost", "call": 20, "return": 30}
	]`
	if res := check(t, h); res != porcupine.Illegal {
		t.Fatalf("a read of a value never written was judged %s", res)
	}
}

func TestAStaleReadAfterACompletedWriteIsAViolation(t *testing.T) {
	h := `[
	  {"client": 0, "op": "set", "key": "a", "value": "old", "call": 0, "return": 10},
	  {"client": 0, "op": "set", "key": "a", "value": "new", "call": 20, "return": 30},
	  {"client": 1, "op": "get", "key": "a", "output": "old", "call": 40, "return": 50}
	]`
	if res := check(t, h); res != porcupine.Illegal {
		t.Fatalf("a stale read was judged %s", res)
	}
}

func TestALostAcknowledgedAppendIsAViolation(t *testing.T) {
	h := `[
	  {"client": 0, "op": "append", "key": "a", "value": "1,", "call": 0, "return": 10},
	  {"client": 1, "op": "append", "key": "a", "value": "2,", "call": 20, "return": 30},
	  {"client": 2, "op": "get", "key": "a", "output": "2,", "call": 40, "return": 50}
	]`
	if res := check(t, h); res != porcupine.Illegal {
		t.Fatalf("a lost acknowledged append was judged %s", res)
	}
}

func TestOneHistoryHoldsKeysOfEveryType(t *testing.T) {
	base := `
	  {"client": 0, "op": "set", "key": "k0", "value": "x", "call": 0, "return": 10},
	  {"client": 1, "op": "rpush", "key": "l0", "value": "x", "output": 1, "call": 0, "return": 10},
	  {"client": 2, "op": "zadd", "key": "z0", "value": "x", "score": 2, "output": 1, "call": 0, "return": 10},
	  {"client": 0, "op": "get", "key": "k0", "output": "x", "call": 20, "return": 30},
	  {"client": 1, "op": "lrange", "key": "l0", "output": ["x"], "call": 20, "return": 30},`
	if res := check(t, "["+base+`
	  {"client": 2, "op": "zrange", "key": "z0", "output": ["x", "2"], "call": 20, "return": 30}
	]`); res != porcupine.Ok {
		t.Fatalf("a linearizable history of three types was judged %s", res)
	}
	// A violation on one key fails the whole history.
	if res := check(t, "["+base+`
	  {"client": 2, "op": "zrange", "key": "z0", "output": ["x", "3"], "call": 20, "return": 30}
	]`); res != porcupine.Illegal {
		t.Fatalf("a history with a wrong score was judged %s", res)
	}
}

func TestTheSummaryCountsEachOp(t *testing.T) {
	ops, err := ParseHistory([]byte(`[
	  {"client": 0, "op": "set", "key": "k0", "value": "x", "call": 0, "return": 10},
	  {"client": 1, "op": "rpush", "key": "l0", "value": "x", "call": 0, "return": null},
	  {"client": 1, "op": "lpop", "key": "l0", "output": null, "call": 20, "return": 30},
	  {"client": 2, "op": "zpopmin", "key": "z0", "output": [], "call": 0, "return": 10}
	]`))
	if err != nil {
		t.Fatalf("parse: %v", err)
	}
	want := "4 operations (1 pending), 3 keys, 3 clients; string 1 (set 1); list 2 (lpop 1, rpush 1); zset 1 (zpopmin 1)"
	if got := Summarize(ops).String(); got != want {
		t.Fatalf("summary %q, want %q", got, want)
	}
}

func TestBadInputIsRefusedNamingTheOperation(t *testing.T) {
	for _, h := range []string{
		`{"op": "get"}`,
		`[{"client": 0, "op": "incr", "key": "a", "call": 0, "return": 1}]`,
		`[{"client": 0, "op": "get", "key": "a", "call": 0, "return": 1}]`,
		`[{"client": 0, "op": "set", "key": "a", "value": "x", "call": 5, "return": 1}]`,
		// A key of two types.
		`[{"client": 0, "op": "set", "key": "a", "value": "x", "call": 0, "return": 1},
		  {"client": 0, "op": "rpush", "key": "a", "value": "x", "output": 1, "call": 2, "return": 3}]`,
		// Outputs of the wrong form.
		`[{"client": 0, "op": "rpush", "key": "a", "value": "x", "output": "1", "call": 0, "return": 1}]`,
		`[{"client": 0, "op": "rpush", "key": "a", "value": "x", "call": 0, "return": 1}]`,
		`[{"client": 0, "op": "lrange", "key": "a", "output": "x", "call": 0, "return": 1}]`,
		`[{"client": 0, "op": "lpop", "key": "a", "output": ["x"], "call": 0, "return": 1}]`,
		`[{"client": 0, "op": "zincrby", "key": "a", "value": "m", "score": 1, "output": 1, "call": 0, "return": 1}]`,
		`[{"client": 0, "op": "zpopmin", "key": "a", "output": null, "call": 0, "return": 1}]`,
		// Scores: missing, not an integer, where none belongs.
		`[{"client": 0, "op": "zadd", "key": "a", "value": "m", "output": 1, "call": 0, "return": 1}]`,
		`[{"client": 0, "op": "zadd", "key": "a", "value": "m", "score": 1.5, "output": 1, "call": 0, "return": 1}]`,
		`[{"client": 0, "op": "zrem", "key": "a", "value": "m", "score": 1, "output": 1, "call": 0, "return": 1}]`,
	} {
		if _, err := ParseHistory([]byte(h)); err == nil {
			t.Errorf("accepted %s", h)
		}
	}
}
