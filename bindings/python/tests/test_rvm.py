"""mojim.rvm: NumPy arrays in recoverable memory come back after kill -9 as last committed."""

import json
import subprocess
import sys

import numpy as np
import pytest

import mojim
from mojim import rvm

POINT = np.dtype([("x", "<f8"), ("y", "<f8"), ("tag", "S8")])

CHILD = """
import json, os, signal, sys
import numpy as np
from mojim import rvm
mem = rvm.open(sys.argv[1])
assert mem.root == {}, mem.root
m = mem.array((64, 32), "float64")
n = mem.array(1, np.int64)
pts = mem.array(3, np.dtype([("x", "<f8"), ("y", "<f8"), ("tag", "S8")]))
m[:] = np.arange(64 * 32).reshape(64, 32) / 7
n[0] = 41
pts["x"], pts["y"], pts["tag"] = [1, 2, 3], [4, 5, 6], [b"a", b"bb", b"ccc"]
mem.root = {"m": m, "n": n, "pts": pts}
mem.commit()
n[0] = 42
mem.commit()
print(json.dumps({k: int(v.__array_interface__["data"][0]) for k, v in mem.root.items()}), flush=True)
m[:] = -1        # never committed
n[0] = 43
os.kill(os.getpid(), signal.SIGKILL)
"""


def test_arrays_are_recovered_with_their_last_commit(cluster):
    child = subprocess.run([sys.executable, "-c", CHILD, str(cluster.cfg)], capture_output=True, text=True)
    assert child.returncode == -9, child.stderr
    addresses = json.loads(child.stdout)

    mem = rvm.open(cluster.cfg)
    st = mem.status()
    assert st["recovery"] is not None and st["seq"] >= 3, st
    roots = mem.root
    assert sorted(roots) == ["m", "n", "pts"]
    for k, a in roots.items():  # the same addresses as before the crash
        assert a.__array_interface__["data"][0] == addresses[k]
    assert roots["m"].shape == (64, 32) and roots["m"].dtype == np.float64
    assert (roots["m"] == np.arange(64 * 32).reshape(64, 32) / 7).all()
    assert roots["n"].tolist() == [42]
    assert roots["pts"].dtype == POINT
    assert roots["pts"]["tag"].tolist() == [b"a", b"bb", b"ccc"]

    # A root replaced and an array freed, committed, are so after the next recovery.
    v = mem.array(10, np.uint32)
    v[:] = 5
    mem.free(roots["m"])
    mem.root = {"n": roots["n"], "v": v}
    mem.commit()
    with pytest.raises(mojim.OutOfRange, match="not in recoverable memory"):
        mem.root = {"z": np.zeros(3)}
    with pytest.raises(mojim.Busy):
        mem.close()
    del roots, v, a
    mem.close()

    with rvm.open(cluster.cfg) as mem:
        roots = mem.root
        assert sorted(roots) == ["n", "v"]
        assert roots["v"].tolist() == [5] * 10 and roots["n"].tolist() == [42]
        del roots


def test_opening_twice_in_one_process_is_refused(cluster):
    with rvm.open(cluster.cfg) as mem:
        with pytest.raises(mojim.RegionLocked, match="open as primary in this process already"):
            rvm.open(cluster.cfg)
        assert mem.status()["backend"] == "mojim"
