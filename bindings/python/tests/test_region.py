"""mojim.Region against a real mirror: shared memory, sync points, errors, closing."""

import signal
import threading
import time

import numpy as np
import pytest

import mojim
from conftest import thread_states


def test_a_numpy_write_then_msync_is_on_the_mirror(cluster):
    rng = np.random.default_rng()
    with mojim.Region(cluster.cfg) as region:
        a = np.frombuffer(region, dtype=np.uint64, count=512, offset=8192)
        a[:] = rng.integers(0, 2**63, size=512, dtype=np.uint64)
        # Zero copies: the array, a memoryview and the region are the same bytes.
        mv = memoryview(region)
        assert bytes(mv[8192 : 8192 + 8]) == a[:1].tobytes()
        mv[100:105] = b"hello"
        assert region.range_of(a) == (8192, 4096)
        region.msync(a)
        region.msync(100, 5)
        expected = a.tobytes()
        del a, mv
    cluster.wait_applied()
    assert cluster.cat(8192, 4096) == expected
    assert cluster.cat(100, 5) == b"hello"


def test_views_are_checked_and_strided_views_sync_their_span(cluster):
    with mojim.Region(cluster.cfg) as region:
        a = np.frombuffer(region, dtype=np.float64, count=1024, offset=65536).reshape(32, 32)
        assert region.range_of(a[:, 3]) == (65536 + 3 * 8, 31 * 256 + 8)
        assert region.range_of(a[::-1, ::-1]) == (65536, 8192)
        assert region.range_of(a[4:4])[1] == 0
        a[:, 3] = 2.5
        region.gmsync([a[:, 3], (0, 8)])
        col = a[:, 3].copy()
        with pytest.raises(mojim.OutOfRange, match="not inside the region"):
            region.msync(np.zeros(8))
        with pytest.raises(mojim.OutOfRange, match="not inside the region"):
            region.gmsync([(0, 8), bytearray(16)])
        del a
    cluster.wait_applied()
    got = np.frombuffer(cluster.cat(65536, 8192), dtype=np.float64).reshape(32, 32)
    assert (got[:, 3] == col).all()


def test_bad_ranges_raise_out_of_range_and_send_nothing(cluster):
    with mojim.Region(cluster.cfg) as region:
        size = region.size
        region.msync(0, 8)
        before = region.status()["next_seq"]
        for args in [(size, 1), (size - 4, 8), (0, size + 1), (-1, 8), (0, -8)]:
            with pytest.raises(mojim.OutOfRange) as e:
                region.msync(*args)
            assert str(e.value), args
        with pytest.raises(mojim.OutOfRange, match=str(size)):
            region.gmsync([(0, 8), (size, 1)])
        with pytest.raises(mojim.OutOfRange):
            region.persist([(0, 8), (1, 2, 3)])
        with pytest.raises(TypeError):
            region.msync(0)
        assert region.status()["next_seq"] == before
        # mojim.Error is the base of every error of the library.
        assert issubclass(mojim.OutOfRange, mojim.Error)


def test_a_wrong_config_raises_config_error(cluster, tmp_path):
    with pytest.raises(mojim.ConfigError, match="no-such"):
        mojim.Region(tmp_path / "no-such.toml")
    cluster.edit({"mode": '"fastest"'})
    with pytest.raises(mojim.ConfigError, match="fastest"):
        mojim.Region(cluster.cfg)


def test_a_lost_mirror_raises_mirror_lost(cluster):
    with mojim.Region(cluster.cfg) as region:
        region.msync(0, 8)
        cluster.kill_mirror()
        with pytest.raises(mojim.MirrorLost, match="the mirror is lost"):
            region.msync(0, 8)
        assert region.status()["failed"]


def test_metrics_count_sync_points_and_see_the_mirror_lost(cluster):
    with mojim.Region(cluster.cfg) as region:
        m = region.metrics()
        assert m["mirror_state"] == "online"
        assert m["sync_seconds"]["count"] == 0
        for i in range(10):
            region.msync(i * 4096, 100)
        m = region.metrics()
        h = m["sync_seconds"]
        assert h["count"] == 10 == sum(h["counts"])
        assert len(h["counts"]) == len(h["bounds_seconds"]) + 1
        assert h["sum_seconds"] > 0
        assert (m["groups_sent"], m["bytes_sent"]) == (10, 1000)
        assert m["sync_failures"] == 0
        cluster.kill_mirror()
        with pytest.raises(mojim.MirrorLost):
            region.msync(0, 8)
        m = region.metrics()
        assert m["mirror_state"] == "lost"
        assert m["mirror_losses"] == 1
        assert m["vulnerable_seconds"] >= 0
        assert m["sync_failures"] == 1
        assert m["sync_seconds"]["count"] == 10


def test_tickets(cluster):
    with mojim.Region(cluster.cfg) as region:
        t1 = region.persist([(0, 8)])
        t2 = region.persist([(4096, 64), (8, 8)])
        region.wait(t2)
        region.wait(t1)
        assert 0 < t1.seq < t2.seq
        assert repr(t2) == f"<mojim.Ticket seq={t2.seq}>"


def test_close_while_views_are_alive_is_safe(cluster):
    region = mojim.Region(cluster.cfg)
    a = np.frombuffer(region, dtype=np.uint8, count=16)
    with pytest.raises(mojim.Busy, match="1 view"):
        region.close()
    a[:] = 7
    region.msync(a)
    del a
    assert region.views == 0
    region.close()
    region.close()  # twice: nothing
    assert region.closed
    with pytest.raises(mojim.Closed):
        region.msync(0, 8)
    with pytest.raises(mojim.Closed):
        memoryview(region)
    # A with block ends while an array lives: the mapping stays until the array is gone.
    with mojim.Region(cluster.cfg) as region:
        b = np.frombuffer(region, dtype=np.uint8, count=16)
    assert region.closed and (b == 7).all()
    b[:] = 9  # still mapped
    with pytest.raises(mojim.Closed):
        region.msync(0, 16)
    del b


def test_a_thread_blocked_in_msync_lets_python_run(make_cluster):
    # Causal, not timed: the mirror is frozen, so one thread's msync cannot return until this
    # thread, running Python code meanwhile, thaws it. With the GIL held through msync, this
    # thread would run only once msync gave up (after the 60 s heartbeat timeout) and would find
    # the other thread finished.
    c = make_cluster(edits={"heartbeat_timeout_ms": "60000"})
    c.start_mirror()
    with mojim.Region(c.cfg) as region:
        region.msync(0, 8)
        before = region.status()["next_seq"]
        c.signal_mirror(signal.SIGSTOP)
        result = {}

        def sync():
            try:
                region.msync(4096, 4096)
                result["ok"] = True
            except mojim.Error as e:  # pragma: no cover - reported below
                result["error"] = e

        t = threading.Thread(target=sync)
        t.start()
        steps = 0
        while region.status()["next_seq"] == before:  # until its group is queued
            steps += 1
            time.sleep(0.001)
        assert t.is_alive() and not result, f"msync returned while the mirror was frozen: {result}"
        assert sum(range(100_000)) == 4_999_950_000  # Python code, run while it waits
        assert t.is_alive()
        c.signal_mirror(signal.SIGCONT)
        t.join(60)
        assert result.get("ok"), result


def test_a_stopped_mirror_has_every_thread_stopped_when_signal_mirror_returns(make_cluster):
    # `kill` only queues SIGSTOP: without waiting, a thread of the mirror could still acknowledge
    # a group, as it once did in the test above.
    c = make_cluster()
    c.start_mirror()
    c.signal_mirror(signal.SIGSTOP)
    states = thread_states(c.mirror.pid)
    c.signal_mirror(signal.SIGCONT)
    assert len(states) > 1 and all(s in "Tt" for s in states), states


def test_sync_points_of_two_threads_overlap(cluster):
    # Both threads' groups are in flight at once: each thread waits at a barrier between its
    # persist and its wait, which only works if neither holds the GIL while the other syncs.
    with mojim.Region(cluster.cfg) as region:
        barrier = threading.Barrier(2, timeout=60)
        errors = []

        def work(at):
            try:
                for i in range(50):
                    t = region.persist([(at + 64 * (i % 16), 64)])
                    barrier.wait()
                    region.wait(t)
                    region.msync(at, 4096)
            except Exception as e:  # pragma: no cover - reported below
                errors.append(e)
                barrier.abort()

        ts = [threading.Thread(target=work, args=(at,)) for at in (1 << 20, 2 << 20)]
        [t.start() for t in ts]
        [t.join(120) for t in ts]
        assert not errors, errors
