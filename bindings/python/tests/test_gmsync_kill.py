"""gmsync is all or nothing on the mirror when the primary is killed with SIGKILL mid-stream."""

import os
import random
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np

from gmsync_child import AREA_A, AREA_B, SLOTS, record

CHILD = Path(__file__).with_name("gmsync_child.py")


def test_groups_are_whole_on_the_mirror_after_kill_9(cluster):
    seed = int(os.environ.get("MOJIM_TEST_SEED", random.randrange(2**32)))
    print(f"seed {seed} (replay with MOJIM_TEST_SEED={seed})")
    rng = random.Random(seed)
    start = 1
    for round_ in range(4):
        child = subprocess.Popen(
            [sys.executable, str(CHILD), str(cluster.cfg), str(start)],
            stdout=subprocess.PIPE,
            text=True,
            env=dict(os.environ, PYTHONPATH=str(CHILD.parent)),
        )
        assert child.stdout is not None
        kill_after = rng.randrange(20, 400)
        acked = start - 1
        for line in child.stdout:
            acked = int(line)
            if acked - start + 1 >= kill_after:
                child.send_signal(signal.SIGKILL)
                break
        # Lines printed before the kill are acknowledged groups too.
        for line in child.stdout:
            if line.endswith("\n"):
                acked = int(line)
        rc = child.wait()
        assert rc == -signal.SIGKILL, f"round {round_}: the child ended by itself ({rc})"

        cluster.wait_applied()
        a = np.frombuffer(cluster.cat(AREA_A, 64 * SLOTS), dtype=np.uint8).reshape(SLOTS, 64)
        b = np.frombuffer(cluster.cat(AREA_B, 64 * SLOTS), dtype=np.uint8).reshape(SLOTS, 64)
        newest = 0
        for j in range(SLOTS):
            assert (a[j] == b[j]).all(), f"round {round_}, slot {j}: a group is torn ({a[j]} vs {b[j]})"
            i = int.from_bytes(a[j, :8].tobytes(), "little")
            if i == 0:
                assert not a[j].any(), f"slot {j}: a damaged record"
                continue
            assert i % SLOTS == j and (a[j] == record(i)).all(), f"slot {j}: a damaged record {i}"
            newest = max(newest, i)
        assert newest >= acked, f"round {round_}: group {acked} was acknowledged, the mirror has {newest}"
        start = newest + 1
