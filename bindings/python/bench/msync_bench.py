"""What a 4 KiB msync costs from Python against Rust, in one run on one primary and mirror.

    python bindings/python/bench/msync_bench.py [--ops 20000] [--size 4096] [--mojim-bench-ops 20000]

Call by call, the loop takes turns between `region.msync(offset, size)` timed in Python
(`time.perf_counter_ns` around the call: the call, its argument parsing, the GIL released and
taken back, and the timer itself) and `region._msync_timed(offset, size)`, the same
`Primary::msync` timed inside Rust. Both go to the same lane of the same session, at random
page-aligned offsets of a 256 MiB region (mode sync, one thread, one lane), each after a small
store into its range; taking turns puts the machine's noise on both alike. The p50 of each and
their difference are printed. Then `mojim bench --mode sync` (Rust, its own process) runs
against the same mirror and region for reference.
"""

import argparse
import json
import subprocess
import time

import numpy as np

import mojim
from _cluster import Mirror


def interleaved(cfg, ops: int, size: int, warmup: int = 1000):
    with mojim.Region(cfg) as region:
        slots = region.size // size
        words = np.frombuffer(region, dtype=np.uint64)
        offs = (np.random.default_rng(1).integers(0, slots, size=2 * ops + warmup) * size).tolist()
        py = np.empty(ops, dtype=np.int64)
        rs = np.empty(ops, dtype=np.int64)
        msync, timed, clock = region.msync, region._msync_timed, time.perf_counter_ns
        for i in range(warmup):
            words[offs[i] // 8] = i
            msync(offs[i], size)
        for i in range(ops):
            off = offs[warmup + 2 * i]
            words[off // 8] = i
            t = clock()
            msync(off, size)
            py[i] = clock() - t
            off = offs[warmup + 2 * i + 1]
            words[off // 8] = i
            rs[i] = timed(off, size)
        del words
    return float(np.median(py)) / 1e3, float(np.median(rs)) / 1e3, float(py.mean()) / 1e3, float(rs.mean()) / 1e3


def mojim_bench(m: Mirror, ops: int, size: int) -> float:
    out = subprocess.run(
        [
            str(m.exe), "bench", "--mode", "sync", "--mirror", m.addr, "--config", str(m.cfg),
            "--size", str(size), "--threads", "1", "--lanes", "1", "--ops", str(ops), "--json",
        ],
        check=True,
        capture_output=True,
        text=True,
    )
    rows = [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]
    return float(rows[0]["p50_us"])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--ops", type=int, default=20000, help="calls of each kind")
    p.add_argument("--size", type=int, default=4096)
    p.add_argument("--mojim-bench-ops", type=int, default=20000, help="0: skip `mojim bench`")
    a = p.parse_args()
    m = Mirror("256MiB", {"lanes": "1", "log_capacity": '"64MiB"'})
    try:
        py50, rs50, pymean, rsmean = interleaved(m.cfg, a.ops, a.size)
        print(f"msync {a.size} B, {a.ops} calls each, taking turns (mirror {m.exe}):")
        print(f"  rust   (Primary::msync)  p50 {rs50:8.2f} us   mean {rsmean:8.2f} us")
        print(f"  python (Region.msync)    p50 {py50:8.2f} us   mean {pymean:8.2f} us")
        print(f"  python - rust            p50 {py50 - rs50:+8.2f} us   mean {pymean - rsmean:+8.2f} us")
        if a.mojim_bench_ops:
            rb = mojim_bench(m, a.mojim_bench_ops, a.size)
            print(f"  mojim bench --mode sync  p50 {rb:8.2f} us (its own process, same mirror and region)")
    finally:
        m.close()


if __name__ == "__main__":
    main()
