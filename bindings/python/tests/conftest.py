"""Shared pieces of the Python tests: a folder with a configuration and a region, and a real
`mojim serve` mirror on loopback in a child process, removed afterwards.

The `mojim` binary is `$MOJIM_BIN`, else `mojim` in `$CARGO_TARGET_DIR` or the repository's
`target` (debug, then release): `./scripts/test` builds it. Without it a test skips, unless
`MOJIM_TEST_STRICT` is set (as `./scripts/test` sets it): then it fails.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import List, Optional

import pytest

REPO = Path(__file__).resolve().parents[3]
WAIT_S = 60.0


def thread_states(pid: int) -> List[str]:
    """The state letter of each thread of `pid` (`/proc/PID/task/*/stat`, the field after the
    command's closing parenthesis)."""
    states = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            stat = (task / "stat").read_text()
        except FileNotFoundError:  # the thread ended meanwhile
            continue
        states.append(stat[stat.rindex(")") + 2])
    return states


def wait_all_threads_stopped(pid: int) -> None:
    t0 = time.monotonic()
    while True:
        states = thread_states(pid)
        if states and all(s in "Tt" for s in states):
            return
        assert time.monotonic() - t0 < WAIT_S, f"process {pid} did not stop: thread states {states}"
        time.sleep(0.001)


def mojim_bin() -> Optional[Path]:
    if os.environ.get("MOJIM_BIN"):
        return Path(os.environ["MOJIM_BIN"])
    roots = [Path(os.environ["CARGO_TARGET_DIR"])] if os.environ.get("CARGO_TARGET_DIR") else []
    roots.append(REPO / "target")
    for root in roots:
        for profile in ("debug", "release"):
            p = root / profile / "mojim"
            if p.is_file() and os.access(p, os.X_OK):
                return p
    return None


def need_mojim() -> Path:
    p = mojim_bin()
    if p is None:
        why = "the mojim binary is not built (cargo build -p mojim-cli, or set MOJIM_BIN)"
        if os.environ.get("MOJIM_TEST_STRICT", "0") != "0":
            pytest.fail(f"this test cannot run: {why} (MOJIM_TEST_STRICT is set)")
        pytest.skip(why)
    return p


def test_root() -> str:
    shm = "/dev/shm"
    if os.path.isdir(shm) and os.access(shm, os.W_OK):
        return shm
    return tempfile.gettempdir()


class Cluster:
    """A folder with `mojim.toml` (aimed at the running mirror) and `region.mojim`, and a
    mirror serving from `<folder>/mirror`."""

    def __init__(self, size: str = "16MiB", edits: Optional[dict] = None) -> None:
        self.exe = need_mojim()
        self.dir = Path(tempfile.mkdtemp(prefix="mojim-py-", dir=test_root()))
        self.cfg = self.dir / "mojim.toml"
        self.mirror: Optional[subprocess.Popen] = None
        self.addr = ""
        self.run("init", "--dir", str(self.dir), "--size", size, "--listen", "127.0.0.1:0")
        # Small logs: the tests' groups are small, and the folder is in memory.
        self.edit({"log_capacity": '"4MiB"', **(edits or {})})

    def run(self, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        return subprocess.run([str(self.exe), *args], capture_output=True, check=check, timeout=WAIT_S)

    def edit(self, settings: dict) -> None:
        """Sets `key = value` lines of mojim.toml (each key where it first appears)."""
        lines = self.cfg.read_text().splitlines()
        for key, value in settings.items():
            for i, line in enumerate(lines):
                if line.split("=")[0].strip() == key:
                    lines[i] = f"{key} = {value}"
                    break
            else:
                raise KeyError(f"{key} is not in mojim.toml")
        self.cfg.write_text("\n".join(lines) + "\n")

    def start_mirror(self) -> str:
        assert self.mirror is None
        env = dict(os.environ, MOJIM_LOG=os.environ.get("MOJIM_LOG", "warn"))
        self.mirror = subprocess.Popen(
            [str(self.exe), "serve", "--config", str(self.cfg), "--listen", "127.0.0.1:0"],
            stdout=subprocess.PIPE,
            text=True,
            env=env,
        )
        assert self.mirror.stdout is not None
        for line in self.mirror.stdout:
            if line.startswith("serving on "):
                self.addr = line.split()[-1]
                break
        else:
            raise RuntimeError(f"the mirror exited before it served: {self.mirror.wait()}")
        out = self.mirror.stdout
        threading.Thread(target=lambda: [None for _ in out], daemon=True).start()
        # The primary's side of the file names the mirror's address.
        lines = self.cfg.read_text().splitlines()
        section = ""
        for i, line in enumerate(lines):
            if line.startswith("["):
                section = line.strip()
            if section == "[primary]" and line.split("=")[0].strip() == "mirror":
                lines[i] = f'mirror = "{self.addr}"'
        self.cfg.write_text("\n".join(lines) + "\n")
        return self.addr

    def kill_mirror(self) -> None:
        if self.mirror is not None:
            self.mirror.kill()
            self.mirror.wait()
            self.mirror = None

    def signal_mirror(self, sig: int) -> None:
        """Sends `sig` to the mirror. For SIGSTOP it returns only once every thread of the mirror
        is stopped: `kill` only queues the signal, and on a busy machine a thread can go on
        acknowledging groups for milliseconds after it."""
        assert self.mirror is not None
        os.kill(self.mirror.pid, sig)
        if sig == signal.SIGSTOP:
            wait_all_threads_stopped(self.mirror.pid)

    def status(self) -> dict:
        out = self.run("status", "--config", str(self.cfg), "--addr", self.addr, "--json")
        return json.loads(out.stdout)

    def wait_applied(self) -> dict:
        """Waits until the mirror has applied every group it received."""
        t0 = time.monotonic()
        while True:
            st = self.status()
            if st["lag_groups"] == 0 and st["applied_seq"] >= st["last_received_seq"]:
                return st
            assert time.monotonic() - t0 < WAIT_S, f"the mirror did not catch up: {st}"
            time.sleep(0.01)

    def cat(self, offset: int, length: int) -> bytes:
        """The mirror's bytes, one consistent image (`mojim cat`)."""
        out = self.run(
            "cat", "--config", str(self.cfg), "--addr", self.addr,
            "--offset", str(offset), "--len", str(length),
        )
        return out.stdout

    def close(self) -> None:
        if self.mirror is not None:
            try:
                os.kill(self.mirror.pid, signal.SIGCONT)
            except ProcessLookupError:
                pass
        self.kill_mirror()
        shutil.rmtree(self.dir, ignore_errors=True)


@pytest.fixture
def cluster():
    c = Cluster()
    c.start_mirror()
    yield c
    c.close()


@pytest.fixture
def make_cluster():
    made: List[Cluster] = []

    def make(**kw) -> Cluster:
        c = Cluster(**kw)
        made.append(c)
        return c

    yield make
    for c in made:
        c.close()
