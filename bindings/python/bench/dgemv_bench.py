"""DGEMV (x <- A x / |A x|) committing every k iterations: through mojim.rvm against the same
loop saving its vector with numpy.save + os.fsync at the same rate, and without persistence.

    python bindings/python/bench/dgemv_bench.py [--n 512] [--iterations 5000] [--commit-every 10]
        [--disk-dir /var/tmp]

The saved file is on --disk-dir (an fsync on a memory file system would cost nothing). Each
variant's answer is checked against the run without persistence.
"""

import os

for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(var, "1")

import argparse  # noqa: E402
import statistics  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402

from _cluster import Mirror  # noqa: E402
from mojim import rvm  # noqa: E402


def matrix(n):
    return np.random.default_rng(2015).standard_normal((n, n)) / np.sqrt(n)


def step(a, x):
    y = a @ x
    x[:] = y / np.linalg.norm(y)


def plain(n, iters):
    a, x = matrix(n), np.ones(n)
    t = time.perf_counter()
    for _ in range(iters):
        step(a, x)
    return time.perf_counter() - t, x.copy()


def saved(n, iters, k, path):
    a, x = matrix(n), np.ones(n)
    t = time.perf_counter()
    for i in range(1, iters + 1):
        step(a, x)
        if i % k == 0 or i == iters:
            with open(path, "wb") as f:
                np.save(f, x)
                np.save(f, np.array([i]))
                f.flush()
                os.fsync(f.fileno())
    return time.perf_counter() - t, x.copy()


def recoverable(n, iters, k, cfg):
    with rvm.open(cfg) as mem:
        a, x, it = mem.array((n, n)), mem.array(n), mem.array(1, np.int64)
        a[:] = matrix(n)
        x[:] = 1.0
        mem.root = {"a": a, "x": x, "it": it}
        mem.commit()
        t = time.perf_counter()
        for i in range(1, iters + 1):
            step(a, x)
            it[0] = i
            if i % k == 0 or i == iters:
                mem.commit()
        el = time.perf_counter() - t
        out = x.copy()
        del a, x, it
    return el, out


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--n", type=int, default=512)
    p.add_argument("--iterations", type=int, default=5000)
    p.add_argument("--commit-every", type=int, default=10)
    p.add_argument("--disk-dir", default="/var/tmp")
    p.add_argument("--rounds", type=int, default=3)
    a = p.parse_args()
    commits = -(-a.iterations // a.commit_every)
    times = {"no persistence": [], "numpy.save + fsync": [], "mojim.rvm": []}
    m = Mirror("64MiB", {"lanes": "1"})
    try:
        for _ in range(a.rounds):  # rounds take turns; each variant's median is printed
            t, want = plain(a.n, a.iterations)
            times["no persistence"].append(t)
            with tempfile.TemporaryDirectory(prefix="mojim-dgemv-", dir=a.disk_dir) as d:
                t, got = saved(a.n, a.iterations, a.commit_every, os.path.join(d, "x.npy"))
            assert (got == want).all(), "the numpy.save run's answer differs"
            times["numpy.save + fsync"].append(t)
            t, got = recoverable(a.n, a.iterations, a.commit_every, m.cfg)
            assert (got == want).all(), "the mojim.rvm run's answer differs"
            times["mojim.rvm"].append(t)
    finally:
        m.close()
    base = statistics.median(times["no persistence"])
    print(f"dgemv {a.n} x {a.n}, {a.iterations} iterations, commit every {a.commit_every} "
          f"({commits} commits), median of {a.rounds} rounds")
    for name, ts in times.items():
        t = statistics.median(ts)
        print(f"  {name:20} {t:8.3f} s   {t / a.iterations * 1e6:8.1f} us/iteration   "
              f"{(t - base) / commits * 1e6:8.1f} us/commit over no persistence")


if __name__ == "__main__":
    main()
