"""A mirror on loopback for the benchmarks: `mojim init` in a fresh folder (memory-backed),
`mojim serve`, and the configuration aimed at it; everything removed on close."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import threading
from pathlib import Path
from typing import Dict

REPO = Path(__file__).resolve().parents[3]


def mojim_bin() -> Path:
    if os.environ.get("MOJIM_BIN"):
        return Path(os.environ["MOJIM_BIN"])
    root = Path(os.environ.get("CARGO_TARGET_DIR", REPO / "target"))
    for profile in ("release", "debug"):
        if (root / profile / "mojim").is_file():
            return root / profile / "mojim"
    raise SystemExit("no mojim binary: cargo build --release -p mojim-cli (or set MOJIM_BIN)")


class Mirror:
    def __init__(self, size: str, settings: Dict[str, str]) -> None:
        self.exe = mojim_bin()
        base = "/dev/shm" if os.access("/dev/shm", os.W_OK) else None
        self.dir = Path(tempfile.mkdtemp(prefix="mojim-pybench-", dir=base))
        self.cfg = self.dir / "mojim.toml"
        subprocess.run(
            [str(self.exe), "init", "--dir", str(self.dir), "--size", size, "--listen", "127.0.0.1:0"],
            check=True,
            capture_output=True,
        )
        self.proc = subprocess.Popen(
            [str(self.exe), "serve", "--config", str(self.cfg), "--listen", "127.0.0.1:0"],
            stdout=subprocess.PIPE,
            text=True,
            env=dict(os.environ, MOJIM_LOG="warn"),
        )
        assert self.proc.stdout is not None
        self.addr = ""
        for line in self.proc.stdout:
            if line.startswith("serving on "):
                self.addr = line.split()[-1]
                break
        out = self.proc.stdout
        threading.Thread(target=lambda: [None for _ in out], daemon=True).start()
        lines, section = self.cfg.read_text().splitlines(), ""
        for i, line in enumerate(lines):
            if line.startswith("["):
                section = line.strip()
            key = line.split("=")[0].strip()
            if section == "[primary]" and key == "mirror":
                lines[i] = f'mirror = "{self.addr}"'
            elif key in settings:
                lines[i] = f"{key} = {settings[key]}"
        self.cfg.write_text("\n".join(lines) + "\n")

    def close(self) -> None:
        self.proc.kill()
        self.proc.wait()
        shutil.rmtree(self.dir, ignore_errors=True)
