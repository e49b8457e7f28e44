"""Recoverable memory for NumPy arrays: the Nephele API on a Mojim region.

Allocate arrays from recoverable memory, store into them as usual, and commit at points of
consistency; the pages written since the last commit are found by the kernel and sent to the
mirror as one atomic step. After a crash (``kill -9`` included), :func:`open` maps the memory
back at the same address with the last commit's contents, and :attr:`Rvm.root` gives the
arrays by name again::

    from mojim import rvm
    mem = rvm.open("mojim.toml")               # recovers if the region holds state
    roots = mem.root
    if "x" not in roots:                       # the first run
        x = mem.array((1000,), "float64")
        mem.root = {"x": x}
    else:
        x = roots["x"]                         # the last commit's contents
    x += 1.0
    mem.commit()

The roots are a dict of names to NumPy arrays that lie in recoverable memory: each is stored
as its name, dtype, shape and address (in a block of recoverable memory the RVM's root points
to). Arbitrary Python objects are out of scope: keep numbers in arrays (a one-element array
for a counter), and anything else in arrays of a structured dtype. Setting ``root`` takes
effect with the next commit, as every store does.
"""

from __future__ import annotations

import json
import os
from typing import Any, Dict, Mapping, Optional, Sequence, Tuple, Union

import numpy as np

from ._mojim import LayoutError, Memory, OutOfRange

__all__ = ["Rvm", "open"]

_MAGIC = b"MOJIMPY1"
_Shape = Union[int, Sequence[int]]


def _descr(dtype: np.dtype) -> Any:
    return np.lib.format.dtype_to_descr(dtype)


def _dtype(descr: Any) -> np.dtype:
    if isinstance(descr, list):
        descr = [tuple(f) if isinstance(f, list) else f for f in descr]
        descr = [(f[0], f[1], tuple(f[2])) if len(f) == 3 else f for f in descr]
    return np.lib.format.descr_to_dtype(descr)


class Rvm:
    """Recoverable memory opened from a configuration (see :func:`open`).

    ``array(shape, dtype)`` allocates a zeroed NumPy array in it, ``commit()`` makes every
    store since the last commit durable as one atomic step (the GIL released), ``root`` gets
    or sets the named arrays found again after recovery, ``status()`` reports the backend,
    tracking and what the last open recovered. A context manager: the ``with`` block's end
    closes it (arrays still alive keep it mapped until they are gone).
    """

    def __init__(self, memory: Memory) -> None:
        self._mem = memory
        self._bytes = np.frombuffer(memory, dtype=np.uint8)

    @property
    def memory(self) -> Memory:
        """The native object: alloc, free, commit, root address, buffer of the whole memory."""
        return self._mem

    def _at(self, address: int, dtype: np.dtype, shape: Tuple[int, ...]) -> np.ndarray:
        count = int(np.prod(shape, dtype=np.int64))
        off = address - self._mem.base
        if off < 0 or off + count * dtype.itemsize > self._mem.capacity:
            raise LayoutError(
                f"an array of {count} x {dtype} at {address:#x} is not inside recoverable memory "
                f"({self._mem.base:#x}, {self._mem.capacity} bytes)"
            )
        return np.frombuffer(self._mem, dtype=dtype, count=count, offset=off).reshape(shape)

    def array(self, shape: _Shape, dtype: Any = np.float64) -> np.ndarray:
        """A zeroed C-contiguous array of ``shape`` and ``dtype`` in recoverable memory
        (recoverable once a commit has run after it: name it in ``root`` to find it again)."""
        dt = np.dtype(dtype)
        shp = (shape,) if isinstance(shape, int) else tuple(int(n) for n in shape)
        nbytes = int(np.prod(shp, dtype=np.int64)) * dt.itemsize
        addr = self._mem.alloc(max(nbytes, 1))
        return self._at(addr, dt, shp)

    def free(self, array: np.ndarray) -> None:
        """Frees the block an array from :meth:`array` lives in, as of the next commit."""
        self._mem.free(self._address(array))

    def _address(self, array: np.ndarray) -> int:
        addr = int(array.__array_interface__["data"][0])
        off = addr - self._mem.base
        if off < 0 or off + array.nbytes > self._mem.capacity:
            raise OutOfRange(
                f"this array ({array.nbytes} bytes at {addr:#x}) is not in recoverable memory "
                f"({self._mem.base:#x}, {self._mem.capacity} bytes): make it with Rvm.array"
            )
        return addr

    def commit(self) -> None:
        """Every store since the last commit, by any thread, as one atomic step."""
        self._mem.commit()

    @property
    def root(self) -> Dict[str, np.ndarray]:
        """The named arrays, as of the last ``root =`` (committed: as of the last commit)."""
        addr = self._mem.root
        if addr == 0:
            return {}
        off = addr - self._mem.base
        head = bytes(self._bytes[off : off + 16])
        if head[:8] != _MAGIC:
            raise LayoutError(
                f"the root at {addr:#x} is not a table of named arrays (written by another program?)"
            )
        n = int.from_bytes(head[8:16], "little")
        table = json.loads(bytes(self._bytes[off + 16 : off + 16 + n]).decode())
        return {
            name: self._at(e["address"], _dtype(e["dtype"]), tuple(e["shape"]))
            for name, e in table.items()
        }

    @root.setter
    def root(self, arrays: Mapping[str, np.ndarray]) -> None:
        table = {}
        for name, a in arrays.items():
            if not isinstance(a, np.ndarray) or not a.flags["C_CONTIGUOUS"]:
                raise OutOfRange(
                    f"root {name!r}: only C-contiguous NumPy arrays in recoverable memory can be roots"
                )
            table[str(name)] = {
                "address": self._address(a),
                "dtype": _descr(a.dtype),
                "shape": list(a.shape),
            }
        body = json.dumps(table, sort_keys=True).encode()
        addr = self._mem.alloc(16 + len(body))
        off = addr - self._mem.base
        self._bytes[off : off + 8] = np.frombuffer(_MAGIC, dtype=np.uint8)
        self._bytes[off + 8 : off + 16] = np.frombuffer(len(body).to_bytes(8, "little"), dtype=np.uint8)
        self._bytes[off + 16 : off + 16 + len(body)] = np.frombuffer(body, dtype=np.uint8)
        old = self._mem.root
        self._mem.root = addr
        if old:
            self._mem.free(old)

    def status(self) -> Dict[str, Any]:
        """Backend, tracking, capacity and use, commits, and what the last open recovered."""
        return self._mem.status()

    def close(self) -> None:
        """Drops stores since the last commit and unmaps (mojim.Busy while arrays are alive)."""
        del self._bytes
        try:
            self._mem.close()
        finally:
            if not self._mem.closed:
                self._bytes = np.frombuffer(self._mem, dtype=np.uint8)

    def __enter__(self) -> "Rvm":
        return self

    def __exit__(self, *exc: object) -> None:
        self._bytes = None  # type: ignore[assignment]
        self._mem.__exit__(*exc)


def open(
    config: Union[str, "os.PathLike[str]"] = "mojim.toml",
    *,
    mirror: Optional[str] = None,
    insecure: bool = False,
) -> Rvm:
    """Opens recoverable memory as ``config``'s ``[rvm]`` section says (the Mojim backend:
    ``[region]`` and ``[primary]``), recovering what it holds: the arrays come back at the
    same addresses with the last commit's contents. ``mirror`` replaces ``[primary] mirror``."""
    return Rvm(Memory(os.fspath(config), mirror=mirror, insecure=insecure))
