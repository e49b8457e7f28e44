#!/usr/bin/env python3
"""Commits numbered LMDB transactions and says so after each commit returns.

    loader.py DIR [--writemap] [--map-size BYTES] [--count N] [--value-size BYTES] [--start I]

Transaction i puts key b"k%08d" % i with value(i, size) and prints "committed i" once
txn.commit() returned (LMDB's durability point). An ordinary LMDB program: it knows nothing of
Mojim; run it under libmojim_preload.so to replicate DIR/data.mdb.

    loader.py --bench DIR [--count N] [--value-size BYTES] [--writemap] [--no-sync]

commits N transactions of one put each (a fresh key, a random value) and prints one JSON line:
{"total_ns": ..., "lat_ns": [...]}, each commit's latency (begin, put, commit) in nanoseconds.
--no-sync opens the environment with sync and metasync off (nothing is flushed).

    loader.py --check DIR N [--value-size BYTES]

opens DIR read-only and checks that transactions 0..N (N exclusive) are all there with their
values; prints "entries E" (every key in the database). Exits 1 naming the first missing one.
"""
import argparse
import json
import os
import sys
import time

import lmdb


def value(i, size):
    unit = b"v%08d;" % i
    return (unit * (size // len(unit) + 1))[:size]


def load(a):
    env = lmdb.open(a.dir, map_size=a.map_size, writemap=a.writemap, metasync=True, sync=True)
    for i in range(a.start, a.start + a.count):
        with env.begin(write=True) as txn:
            txn.put(b"k%08d" % i, value(i, a.value_size))
        print("committed %d" % i, flush=True)
    env.close()


def bench(a):
    sync = not a.no_sync
    env = lmdb.open(a.dir, map_size=a.map_size, writemap=a.writemap, metasync=sync, sync=sync)
    val = os.urandom(a.value_size)
    lat = []
    t0 = time.perf_counter_ns()
    for i in range(a.start, a.start + a.count):
        s = time.perf_counter_ns()
        with env.begin(write=True) as txn:
            txn.put(b"k%08d" % i, val)
        lat.append(time.perf_counter_ns() - s)
    total = time.perf_counter_ns() - t0
    env.close()
    print(json.dumps({"total_ns": total, "lat_ns": lat}), flush=True)


def check(a):
    env = lmdb.open(a.dir, readonly=True, lock=False, map_size=a.map_size)
    with env.begin() as txn:
        for i in range(a.count):
            v = txn.get(b"k%08d" % i)
            if v != value(i, a.value_size):
                print("transaction %d is missing or wrong: %r" % (i, None if v is None else v[:32]), file=sys.stderr)
                sys.exit(1)
        print("entries %d" % txn.stat()["entries"], flush=True)
    env.close()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("dir")
    p.add_argument("n", nargs="?", type=int)
    p.add_argument("--check", action="store_true")
    p.add_argument("--bench", action="store_true")
    p.add_argument("--no-sync", action="store_true")
    p.add_argument("--writemap", action="store_true")
    p.add_argument("--map-size", type=int, default=8 << 20)
    p.add_argument("--count", type=int, default=1 << 30)
    p.add_argument("--start", type=int, default=0)
    p.add_argument("--value-size", type=int, default=100)
    a = p.parse_args()
    if a.check:
        a.count = a.n
        check(a)
    elif a.bench:
        bench(a)
    else:
        load(a)


if __name__ == "__main__":
    main()
