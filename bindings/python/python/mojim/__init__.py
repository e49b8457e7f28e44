"""Mojim: replicated persistent memory.

A region is mapped memory made durable on a mirror at sync points::

    import mojim, numpy as np
    with mojim.Region("mojim.toml") as region:
        a = np.frombuffer(region, dtype=np.float64, count=1024)   # shares the region's memory
        a[:] = 1.5                                                 # ordinary stores
        region.msync(a)                                            # on the mirror when this returns
        del a                                                      # views keep the region mapped

``mojim.rvm`` keeps NumPy arrays in recoverable memory: allocate, commit, recover.
"""

from ._mojim import (
    AddressTaken,
    Busy,
    Closed,
    ConfigError,
    CoordinatorError,
    Diverged,
    Error,
    Fenced,
    ForeignPointer,
    HandshakeFailed,
    IoError,
    LayoutError,
    MirrorLost,
    OutOfRange,
    PeerMisbehaved,
    RedisError,
    Refused,
    Region,
    RegionLocked,
    RvmFull,
    StateError,
    StorageError,
    Ticket,
    TooLarge,
)

from . import rvm

__all__ = [
    "AddressTaken",
    "Busy",
    "Closed",
    "ConfigError",
    "CoordinatorError",
    "Diverged",
    "Error",
    "Fenced",
    "ForeignPointer",
    "HandshakeFailed",
    "IoError",
    "LayoutError",
    "MirrorLost",
    "OutOfRange",
    "PeerMisbehaved",
    "RedisError",
    "Refused",
    "Region",
    "RegionLocked",
    "RvmFull",
    "StateError",
    "StorageError",
    "Ticket",
    "TooLarge",
    "rvm",
]
