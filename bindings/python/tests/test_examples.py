"""The examples in examples/python, run against a real mirror."""

import os
import random
import signal
import subprocess
import sys

import numpy as np

from conftest import REPO

EXAMPLES = REPO / "examples" / "python"


def run(*args, **kw):
    return subprocess.run([sys.executable, *map(str, args)], capture_output=True, text=True, timeout=300, **kw)


def test_fig1_count_and_log_reach_the_mirror(cluster):
    for round_ in (1, 2):  # the second run goes on from the first's state
        out = run(EXAMPLES / "fig1.py", cluster.cfg, "--n", "300")
        assert out.returncode == 0, out.stderr
        assert f"access count: {300 * round_}" in out.stdout
        assert f"log: {300 * round_} entries" in out.stdout
    cluster.wait_applied()
    assert int.from_bytes(cluster.cat(0, 8), "little") == 600
    assert int.from_bytes(cluster.cat(64, 8), "little") == 600
    last = cluster.cat(4096 + 599 * 128, 128)
    assert last.startswith(b"entry 000599: the quick brown fox") and last.endswith(b"."), last


def test_dgemv_killed_at_random_ends_as_an_uninterrupted_run(cluster):
    seed = int(os.environ.get("MOJIM_TEST_SEED", random.randrange(2**32)))
    print(f"seed {seed} (replay with MOJIM_TEST_SEED={seed})")
    rng = random.Random(seed)
    shape = ["--n", "128", "--iterations", "3000", "--commit-every", "7"]
    ref = run(EXAMPLES / "dgemv.py", "--reference", *shape)
    assert ref.returncode == 0, ref.stderr
    want = ref.stdout.split()[-1]

    kills = resumed = 0
    for attempt in range(50):
        child = subprocess.Popen(
            [sys.executable, str(EXAMPLES / "dgemv.py"), str(cluster.cfg), *shape],
            stdout=subprocess.PIPE,
            text=True,
        )
        assert child.stdout is not None
        kill_at = rng.randrange(5, 120) if kills < 4 else None  # commit lines before the kill
        lines = []
        for line in child.stdout:
            lines.append(line.strip())
            if line.startswith("resumed at"):
                resumed += int(line.split()[-1]) > 0
            if kill_at is not None and len(lines) >= kill_at:
                child.send_signal(signal.SIGKILL)
                kills += 1
                break
        child.stdout.read()
        rc = child.wait()
        if rc == 0:
            break
        assert rc == -signal.SIGKILL, f"dgemv failed ({rc}): {lines[-5:]}"
    assert rc == 0, "dgemv did not finish"
    assert lines[-1] == f"result {want}", (lines[-3:], want)
    assert kills >= 1 and resumed >= 1, (kills, resumed)
