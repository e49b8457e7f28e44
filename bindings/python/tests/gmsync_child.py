"""Run by test_gmsync_kill.py: syncs groups until killed, printing each acknowledged one.

Group i writes the same 64-byte record (i and 56 bytes derived from i) into slot i % SLOTS
of two areas 8 MiB apart, and sends both with one gmsync.
"""

import sys

import numpy as np

import mojim

SLOTS = 64
AREA_A = 4096
AREA_B = 8 << 20


def record(i: int) -> np.ndarray:
    r = np.empty(64, dtype=np.uint8)
    r[:8] = np.frombuffer(i.to_bytes(8, "little"), dtype=np.uint8)
    r[8:] = (np.arange(56, dtype=np.uint64) * 7 + i) & 0xFF
    return r


def main() -> None:
    cfg, start = sys.argv[1], int(sys.argv[2])
    region = mojim.Region(cfg)
    a = np.frombuffer(region, dtype=np.uint8, count=64 * SLOTS, offset=AREA_A).reshape(SLOTS, 64)
    b = np.frombuffer(region, dtype=np.uint8, count=64 * SLOTS, offset=AREA_B).reshape(SLOTS, 64)
    i = start
    while True:
        rec = record(i)
        j = i % SLOTS
        a[j] = rec
        b[j] = rec
        region.gmsync([a[j], b[j]])
        print(i, flush=True)
        i += 1


if __name__ == "__main__":
    main()
