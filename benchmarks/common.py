"""Helpers the benchmark scripts share (standard library only)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


class BenchError(Exception):
    pass


def log(msg: str) -> None:
    print(f"[bench] {msg}", file=sys.stderr, flush=True)


def target_dir() -> Path:
    env = os.environ.get("CARGO_TARGET_DIR")
    return Path(env) if env else REPO / "target"


def loadavg() -> list[float]:
    with open("/proc/loadavg") as f:
        return [float(x) for x in f.read().split()[:3]]


def pid_alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def free_port() -> int:
    """A TCP port free on loopback now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cpu_ticks(pid: int) -> int:
    """User plus system clock ticks `pid` has used (/proc/<pid>/stat)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])


def verdict(ok: bool) -> str:
    return "PASS" if ok else "MISS"


def newest_source_mtime() -> float:
    return max((p.stat().st_mtime for p in (REPO / "src").rglob("*.rs")), default=0.0)


def ensure_binary(explicit: str | None, force_build: bool) -> Path:
    """The release binary: `explicit`, else $CARGO_TARGET_DIR/release/binky,
    built first when missing or older than the newest file in src/."""
    if explicit:
        path = Path(explicit).resolve()
        if not os.access(path, os.X_OK):
            raise BenchError(f"--binary {path} is not an executable file")
        if newest_source_mtime() > path.stat().st_mtime:
            log(f"warning: {path} is older than the newest file in src/")
        return path
    path = target_dir() / "release" / "binky"
    stale = path.exists() and newest_source_mtime() > path.stat().st_mtime
    if force_build or stale or not path.exists():
        why = "forced" if force_build else ("older than src/" if stale else "missing")
        log(f"building ({why}): cargo build --release (CARGO_TARGET_DIR={target_dir()})")
        env = dict(os.environ, CARGO_TARGET_DIR=str(target_dir()))
        r = subprocess.run(["cargo", "build", "--release"], cwd=REPO, env=env)
        if r.returncode != 0 or not path.exists():
            raise BenchError("cargo build --release failed")
    return path


def interrupt_on_signals() -> None:
    """SIGTERM and SIGHUP unwind like Ctrl-C (KeyboardInterrupt), so a
    benchmark's `finally` cleans up what it started."""
    def on_signal(signum, _frame):
        raise KeyboardInterrupt(f"signal {signum}")
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGHUP, on_signal)
