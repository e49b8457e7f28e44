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

func TestBadInputIsRefusedNamingTheOperation(t *testing.T) {
	for _, h := range []string{
		`{"op": "get"}`,
		`[{"client": 0, "op": "incr", "key": "a", "call": 0, "return": 1}]`,
		`[{"client": 0, "op": "get", "key": "a", "call": 0, "return": 1}]`,
		`[{"client": 0, "op": "set", "key": "a", "value": "x", "call": 5, "return": 1}]`,
	} {
		if _, err := ParseHistory([]byte(h)); err == nil {
			t.Errorf("accepted %s", h)
		}
	}
}
