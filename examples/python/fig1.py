"""The Mojim paper's Fig. 1 in Python: an access count made persistent with msync, and a log
append made atomic with gmsync (the entry and the tail pointer in one group).

    mojim init --dir node --size 16MiB --listen 127.0.0.1:7420
    mojim serve --config node/mojim.toml &
    python examples/python/fig1.py node/mojim.toml

Run it again: the count and the log go on from where they were (they live in the region).
"""

import argparse

import numpy as np

import mojim

COUNT_AT = 0  # u64: the access count
TAIL_AT = 64  # u64: entries in the log
LOG_AT = 4096  # the log: ENTRY-byte entries
ENTRY = 128


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("config", nargs="?", default="mojim.toml")
    p.add_argument("--n", type=int, default=1000, help="increments, and log entries appended")
    args = p.parse_args()

    with mojim.Region(args.config) as region:
        count = np.frombuffer(region, dtype=np.uint64, count=1, offset=COUNT_AT)
        tail = np.frombuffer(region, dtype=np.uint64, count=1, offset=TAIL_AT)
        slots = (region.size - LOG_AT) // ENTRY
        log = np.frombuffer(region, dtype=np.uint8, count=slots * ENTRY, offset=LOG_AT).reshape(slots, ENTRY)

        # Fig. 1, top: the count is persistent after every increment.
        for _ in range(args.n):
            count[0] += 1
            region.msync(count)
        print(f"access count: {int(count[0])}")

        # Fig. 1, bottom: the entry and the tail pointer reach the mirror together or not at all.
        for _ in range(args.n):
            t = int(tail[0])
            entry = f"entry {t:06}: the quick brown fox jumps over the lazy dog".encode().ljust(ENTRY, b".")
            log[t % slots] = np.frombuffer(entry, dtype=np.uint8)
            tail[0] = t + 1
            region.gmsync([log[t % slots], tail])
        print(f"log: {int(tail[0])} entries")
        del count, tail, log  # views keep the region mapped


if __name__ == "__main__":
    main()
