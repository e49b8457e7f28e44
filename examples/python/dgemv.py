"""The Nephele report's DGEMV in NumPy on recoverable memory: x <- A x / |A x|, iterated,
committing every k iterations. Kill it (kill -9 included) and run it again: it goes on from
the last commit and ends with the same answer as a run that was never interrupted.

    mojim init --dir node --size 64MiB --listen 127.0.0.1:7420
    mojim serve --config node/mojim.toml &
    python examples/python/dgemv.py node/mojim.toml --n 512 --iterations 5000 --commit-every 10
    python examples/python/dgemv.py --reference --n 512 --iterations 5000   # in ordinary memory

It prints a line per commit (`iteration N`) and at the end `result <digest of x>`.
"""

import os

# One BLAS thread: the same sums in the same order on every run, so results compare exactly.
for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(var, "1")

import argparse  # noqa: E402
import hashlib  # noqa: E402

import numpy as np  # noqa: E402

from mojim import rvm  # noqa: E402


def matrix(n: int) -> np.ndarray:
    return np.random.default_rng(2015).standard_normal((n, n)) / np.sqrt(n)


def step(a: np.ndarray, x: np.ndarray) -> None:
    y = a @ x
    x[:] = y / np.linalg.norm(y)


def digest(x: np.ndarray) -> str:
    return hashlib.sha256(x.tobytes()).hexdigest()[:16]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("config", nargs="?", default="mojim.toml")
    p.add_argument("--n", type=int, default=512, help="rows and columns of A")
    p.add_argument("--iterations", type=int, default=5000)
    p.add_argument("--commit-every", type=int, default=10, help="iterations per commit (k)")
    p.add_argument("--reference", action="store_true", help="run in ordinary memory, no persistence")
    args = p.parse_args()

    if args.reference:
        a, x = matrix(args.n), np.ones(args.n)
        for _ in range(args.iterations):
            step(a, x)
        print(f"result {digest(x)}")
        return

    mem = rvm.open(args.config)
    roots = mem.root
    if roots:
        a, x, it = roots["a"], roots["x"], roots["it"]
        if a.shape != (args.n, args.n):
            raise SystemExit(f"the recovered A is {a.shape}, not {args.n} x {args.n}: use a fresh region")
        print(f"resumed at iteration {int(it[0])}", flush=True)
    else:
        a = mem.array((args.n, args.n), np.float64)
        x = mem.array(args.n, np.float64)
        it = mem.array(1, np.int64)
        a[:] = matrix(args.n)
        x[:] = 1.0
        mem.root = {"a": a, "x": x, "it": it}
        mem.commit()
    while it[0] < args.iterations:
        step(a, x)
        it[0] += 1
        if it[0] % args.commit_every == 0 or it[0] == args.iterations:
            mem.commit()
            print(f"iteration {int(it[0])}", flush=True)
    print(f"result {digest(x)}", flush=True)
    del a, x, it, roots
    mem.close()


if __name__ == "__main__":
    main()
