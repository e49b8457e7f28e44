package main

import (
	"testing"

	"github.com/anishathalye/porcupine"
)

func TestConcurrentSortedSetOperationsAreLinearizable(t *testing.T) {
	// c2's ZINCRBY answered 7, so it went before c0's second ZADD of a; members of one score
	// are in member order; c3's ZADD of c got no reply and is seen later; ZPOPMIN of an empty
	// set answers nothing.
	h := `[
	  {"client": 0, "op": "zadd", "key": "z", "value": "a", "score": 5, "output": 1, "call": 0, "return": 10},
	  {"client": 1, "op": "zadd", "key": "z", "value": "x", "score": 3, "output": 1, "call": 0, "return": 10},
	  {"client": 2, "op": "zincrby", "key": "z", "value": "a", "score": 2, "output": "7", "call": 11, "return": 20},
	  {"client": 0, "op": "zadd", "key": "z", "value": "a", "score": 1, "output": 0, "call": 12, "return": 18},
	  {"client": 1, "op": "zadd", "key": "z", "value": "b", "score": 3, "output": 1, "call": 12, "return": 18},
	  {"client": 2, "op": "zrange", "key": "z", "output": ["a", "1", "b", "3", "x", "3"], "call": 21, "return": 30},
	  {"client": 3, "op": "zadd", "key": "z", "value": "c", "score": -4, "call": 21, "return": null},
	  {"client": 1, "op": "zrem", "key": "z", "value": "d", "output": 0, "call": 31, "return": 35},
	  {"client": 1, "op": "zrem", "key": "z", "value": "x", "output": 1, "call": 36, "return": 40},
	  {"client": 0, "op": "zincrby", "key": "z", "value": "e", "score": -1, "output": "-1", "call": 31, "return": 40},
	  {"client": 2, "op": "zpopmin", "key": "z", "output": ["c", "-4"], "call": 41, "return": 50},
	  {"client": 2, "op": "zrange", "key": "z", "output": ["e", "-1", "a", "1", "b", "3"], "call": 51, "return": 60},
	  {"client": 4, "op": "zpopmin", "key": "y", "output": [], "call": 0, "return": 5},
	  {"client": 4, "op": "zrange", "key": "y", "output": [], "call": 6, "return": 10}
	]`
	if res := check(t, h); res != porcupine.Ok {
		t.Fatalf("a linearizable sorted-set history was judged %s", res)
	}
}

func TestAPendingIncrementMayTakeEffectLateOrNever(t *testing.T) {
	h := `[
	  {"client": 0, "op": "zadd", "key": "z", "value": "a", "score": 1, "output": 1, "call": 0, "return": 10},
	  {"client": 1, "op": "zincrby", "key": "z", "value": "a", "score": 10, "call": 11, "return": null},
	  {"client": 2, "op": "zrange", "key": "z", "output": ["a", "1"], "call": 20, "return": 30},
	  {"client": 2, "op": "zpopmin", "key": "z", "output": ["a", "11"], "call": 40, "return": 50}
	]`
	if res := check(t, h); res != porcupine.Ok {
		t.Fatalf("a sorted-set history with a pending increment was judged %s", res)
	}
}

func TestAMemberAddedTwiceIsAViolation(t *testing.T) {
	h := `[
	  {"client": 0, "op": "zadd", "key": "z", "value": "a", "score": 1, "output": 1, "call": 0, "return": 10},
	  {"client": 1, "op": "zadd", "key": "z", "value": "a", "score": 2, "output": 1, "call": 20, "return": 30}
	]`
	if res := check(t, h); res != porcupine.Illegal {
		t.Fatalf("a member added twice was judged %s", res)
	}
}

func TestAnIncrementOfALostScoreIsAViolation(t *testing.T) {
	h := `[
	  {"client": 0, "op": "zadd", "key": "z", "value": "a", "score": 4, "output": 1, "call": 0, "return": 10},
	  {"client": 1, "op": "zincrby", "key": "z", "value": "a", "score": 1, "output": "1", "call": 20, "return": 30}
	]`
	if res := check(t, h); res != porcupine.Illegal {
		t.Fatalf("an increment that missed an acknowledged score was judged %s", res)
	}
}

func TestARangeOutOfScoreOrderIsAViolation(t *testing.T) {
	// Ties go by member: b before x.
	h := `[
	  {"client": 0, "op": "zadd", "key": "z", "value": "x", "score": 3, "output": 1, "call": 0, "return": 10},
	  {"client": 0, "op": "zadd", "key": "z", "value": "b", "score": 3, "output": 1, "call": 11, "return": 20},
	  {"client": 1, "op": "zrange", "key": "z", "output": ["x", "3", "b", "3"], "call": 30, "return": 40}
	]`
	if res := check(t, h); res != porcupine.Illegal {
		t.Fatalf("a range out of order was judged %s", res)
	}
}

func TestAPopOfAMemberThatIsNotTheLowestIsAViolation(t *testing.T) {
	h := `[
	  {"client": 0, "op": "zadd", "key": "z", "value": "a", "score": 1, "output": 1, "call": 0, "return": 10},
	  {"client": 0, "op": "zadd", "key": "z", "value": "b", "score": 2, "output": 1, "call": 11, "return": 20},
	  {"client": 1, "op": "zrem", "key": "z", "value": "a", "call": 21, "return": null},
	  {"client": 2, "op": "zpopmin", "key": "z", "output": ["b", "2"], "call": 30, "return": 40},
	  {"client": 2, "op": "zpopmin", "key": "z", "output": ["a", "1"], "call": 50, "return": 60}
	]`
	if res := check(t, h); res != porcupine.Illegal {
		t.Fatalf("a pop of a member above the lowest was judged %s", res)
	}
}

func TestARemovalThatMissesOrRemovesTwiceIsAViolation(t *testing.T) {
	for name, h := range map[string]string{
		"a removal that missed an added member": `[
		  {"client": 0, "op": "zadd", "key": "z", "value": "a", "score": 1, "output": 1, "call": 0, "return": 10},
		  {"client": 1, "op": "zrem", "key": "z", "value": "a", "output": 0, "call": 20, "return": 30}
		]`,
		"a member removed twice": `[
		  {"client": 0, "op": "zadd", "key": "z", "value": "a", "score": 1, "output": 1, "call": 0, "return": 10},
		  {"client": 1, "op": "zrem", "key": "z", "value": "a", "output": 1, "call": 20, "return": 30},
		  {"client": 2, "op": "zrem", "key": "z", "value": "a", "output": 1, "call": 40, "return": 50}
		]`,
	} {
		if res := check(t, h); res != porcupine.Illegal {
			t.Errorf("%s was judged %s", name, res)
		}
	}
}
