package main

import (
	"testing"

	"github.com/anishathalye/porcupine"
)

func TestConcurrentPushesPopsAndRangesAreLinearizable(t *testing.T) {
	// b's LPUSH goes after a's RPUSH (its length says so); c's RPUSH got no reply and is seen
	// later; the list empties and LPOP answers nil, on this key and on one never pushed to.
	h := `[
	  {"client": 0, "op": "rpush", "key": "l", "value": "a", "output": 1, "call": 0, "return": 10},
	  {"client": 1, "op": "lpush", "key": "l", "value": "b", "output": 2, "call": 5, "return": 15},
	  {"client": 2, "op": "lrange", "key": "l", "output": ["b", "a"], "call": 12, "return": 20},
	  {"client": 0, "op": "rpush", "key": "l", "value": "c", "call": 21, "return": null},
	  {"client": 1, "op": "lpop", "key": "l", "output": "b", "call": 22, "return": 30},
	  {"client": 2, "op": "lrange", "key": "l", "output": ["a", "c"], "call": 40, "return": 50},
	  {"client": 3, "op": "lpop", "key": "l", "output": "a", "call": 51, "return": 55},
	  {"client": 3, "op": "lpop", "key": "l", "output": "c", "call": 56, "return": 57},
	  {"client": 3, "op": "lpop", "key": "l", "output": null, "call": 58, "return": 60},
	  {"client": 2, "op": "lrange", "key": "l", "output": [], "call": 61, "return": 70},
	  {"client": 4, "op": "lpop", "key": "m", "output": null, "call": 0, "return": 5},
	  {"client": 4, "op": "lrange", "key": "m", "call": 6, "return": null}
	]`
	if res := check(t, h); res != porcupine.Ok {
		t.Fatalf("a linearizable list history was judged %s", res)
	}
}

func TestAPendingPopMayTakeEffectLateOrNever(t *testing.T) {
	h := `[
	  {"client": 0, "op": "rpush", "key": "l", "value": "a", "output": 1, "call": 0, "return": 10},
	  {"client": 1, "op": "lpop", "key": "l", "call": 11, "return": null},
	  {"client": 2, "op": "lrange", "key": "l", "output": ["a"], "call": 20, "return": 30},
	  {"client": 2, "op": "lrange", "key": "l", "output": [], "call": 40, "return": 50}
	]`
	if res := check(t, h); res != porcupine.Ok {
		t.Fatalf("a list history with a pending pop was judged %s", res)
	}
}

func TestAPushWhoseLengthMissesAnAcknowledgedPushIsAViolation(t *testing.T) {
	h := `[
	  {"client": 0, "op": "rpush", "key": "l", "value": "a", "output": 1, "call": 0, "return": 10},
	  {"client": 1, "op": "rpush", "key": "l", "value": "b", "output": 1, "call": 20, "return": 30}
	]`
	if res := check(t, h); res != porcupine.Illegal {
		t.Fatalf("a push that lost an acknowledged push was judged %s", res)
	}
}

func TestAPopFromTheTailIsAViolation(t *testing.T) {
	h := `[
	  {"client": 0, "op": "rpush", "key": "l", "value": "a", "output": 1, "call": 0, "return": 10},
	  {"client": 0, "op": "rpush", "key": "l", "value": "b", "output": 2, "call": 11, "return": 20},
	  {"client": 1, "op": "lpop", "key": "l", "output": "b", "call": 30, "return": 40}
	]`
	if res := check(t, h); res != porcupine.Illegal {
		t.Fatalf("a pop of the tail was judged %s", res)
	}
}

func TestAnEmptyPopAfterAnAcknowledgedPushIsAViolation(t *testing.T) {
	h := `[
	  {"client": 0, "op": "lpush", "key": "l", "value": "a", "output": 1, "call": 0, "return": 10},
	  {"client": 1, "op": "lpop", "key": "l", "output": null, "call": 20, "return": 30}
	]`
	if res := check(t, h); res != porcupine.Illegal {
		t.Fatalf("an empty pop after a push was judged %s", res)
	}
}

func TestARangeInTheWrongOrderIsAViolation(t *testing.T) {
	h := `[
	  {"client": 0, "op": "rpush", "key": "l", "value": "a", "output": 1, "call": 0, "return": 10},
	  {"client": 0, "op": "rpush", "key": "l", "value": "b", "output": 2, "call": 11, "return": 20},
	  {"client": 1, "op": "lrange", "key": "l", "output": ["b", "a"], "call": 30, "return": 40}
	]`
	if res := check(t, h); res != porcupine.Illegal {
		t.Fatalf("a range in the wrong order was judged %s", res)
	}
}

func TestAPopOfAValueNeverPushedIsAViolation(t *testing.T) {
	h := `[
	  {"client": 0, "op": "lpop", "key": "l", "output": "ghost", "call": 0, "return": 10},
	  {"client": 0, "op": "rpush", "key": "l", "value": "a", "output": 1, "call": 20, "return": 30},
	  {"client": 1, "op": "lpop", "key": "l", "output": "a", "call": 40, "return": 50}
	]`
	if res := check(t, h); res != porcupine.Illegal {
		t.Fatalf("a pop of a value never pushed was judged %s", res)
	}
}
