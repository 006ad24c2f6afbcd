#!/usr/bin/env python3
"""Benchmark `binky up`: Binky's own overhead when bringing examples/hello up.

Run from anywhere:

    python3 benchmarks/up.py               # full run: 20 samples of each kind
    python3 benchmarks/up.py --runs 5      # quick run
    python3 benchmarks/up.py --json        # JSON on stdout instead of the table

Python 3 standard library only. It uses the release binary at
$CARGO_TARGET_DIR/release/binky (default <repo>/target/release/binky) and runs
`cargo build --release` first when that binary is missing or older than the
newest file in src/; `--binary PATH` uses another one. Everything happens in a
fresh temporary BINKY_HOME and a throwaway clone of the repository under /tmp,
both removed at the end (worlds removed, daemon stopped), also on error.

What is compared, in one interleaved run:
  (a) `binky up w<i>` for a fresh world (new branch, new worktree), whole process;
  (b) the services on their own: `python3 api.py` then `python3 web.py`, each
      started and polled on /healthz every 5 ms until it answers 200;
  (c) `binky up` on a world that was just `down`ed, and a no-op `up` on a running one.
Overhead = median(a) − median(b). See benchmarks/README.md.
"""

from __future__ import annotations

import argparse
import http.client
import json
import math
import os
import platform
import re
import select
import shutil
import signal
import socket
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

from common import BenchError, ensure_binary, interrupt_on_signals, loadavg, log, pid_alive, verdict

REPO = Path(__file__).resolve().parent.parent
EXAMPLE = "examples/hello"
PROJECT = "hello"

# Targets from the issue.
TARGET_OVERHEAD_MS = 100.0           # median(up, fresh world) − median(services alone)
TARGET_DOWN_UP_OVERHEAD_MS = 150.0   # median(up after down) − median(services alone)

POLL_SLEEP_S = 0.005                 # baseline health-poll sleep between attempts
UP_TIMEOUT_S = 120.0


# --------------------------------------------------------------------------
# Binary and environment
# --------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def clean_env() -> dict[str, str]:
    """The caller's environment without any BINKY_* variable."""
    return {k: v for k, v in os.environ.items() if not k.startswith("BINKY_")}


def bench_env(home: Path) -> dict[str, str]:
    """The environment every binky process gets: no inherited BINKY_*, a
    private home and free proxy ports (so no other daemon's ports are used)."""
    env = clean_env()
    proxy = free_port()
    https = free_port()
    while https == proxy:
        https = free_port()
    env.update(
        BINKY_HOME=str(home),
        BINKY_PROXY_PORT=str(proxy),
        BINKY_HTTPS_PORT=str(https),
        NO_COLOR="1",
    )
    return env


def run(binary: Path, env: dict[str, str], *args: str, check: bool = True,
        timeout: float = 60) -> subprocess.CompletedProcess:
    r = subprocess.run(
        [str(binary), *args], env=env, capture_output=True, text=True, timeout=timeout,
        stdin=subprocess.DEVNULL,
    )
    if check and r.returncode != 0:
        raise BenchError(
            f"`binky {' '.join(args)}` exited {r.returncode}:\n{r.stdout}{r.stderr}"
        )
    return r


# --------------------------------------------------------------------------
# Statistics
# --------------------------------------------------------------------------


def percentile(sorted_ms: list[float], p: float) -> float:
    """Nearest-rank percentile (p90 of 20 samples is the 18th smallest)."""
    k = max(1, math.ceil(p / 100 * len(sorted_ms)))
    return sorted_ms[k - 1]


def summarise(ms: list[float]) -> dict:
    s = sorted(ms)
    return {
        "n": len(s),
        "min_ms": round(s[0], 2),
        "median_ms": round(statistics.median(s), 2),
        "mean_ms": round(statistics.fmean(s), 2),
        "p90_ms": round(percentile(s, 90), 2),
        "max_ms": round(s[-1], 2),
    }


def median(xs: list[float]) -> float | None:
    return round(statistics.median(xs), 2) if xs else None


# --------------------------------------------------------------------------
# Timed `binky` runs with per-step stderr timestamps
# --------------------------------------------------------------------------

# Progress lines, as `binky up` prints them when stderr is not a terminal
# ("· <message>", see src/commands/world.rs and src/daemon/world.rs).
STEP_PATTERNS = [
    (re.compile(r"^· worktree for "), lambda m: "worktree"),
    (re.compile(r"^· \d+ port\(s\) reserved"), lambda m: "ports"),
    (re.compile(r"^· \S+ slice for (\S+)"), lambda m: f"provision {m.group(1)}"),
    (re.compile(r"^· starting (\S+)"), lambda m: f"start {m.group(1)}"),
    (re.compile(r"^· (\S+)\s+pid \d+"), lambda m: f"{m.group(1)} ready"),
    (re.compile(r"^· stopping "), lambda m: "stop"),
]


def classify(line: str) -> str:
    for rx, name in STEP_PATTERNS:
        m = rx.search(line)
        if m:
            return name(m)
    return line.strip()[:40]


class Timed:
    """One whole-process run: wall time, exit code, output, stderr lines
    each stamped (ms since spawn) when it arrived."""

    def __init__(self, wall_ms: float, rc: int, stdout: str, lines: list[tuple[float, str]],
                 t0_epoch_ms: float):
        self.wall_ms = wall_ms
        self.rc = rc
        self.stdout = stdout
        self.lines = lines
        self.t0_epoch_ms = t0_epoch_ms

    def steps(self) -> list[tuple[str, float]]:
        """[(step name, ms since spawn)] of the progress lines ("· …"), with
        `spawn` at 0 and `exit` at the end. Notes and the final summary are
        not steps: their time falls in the last interval."""
        out = [("spawn", 0.0)]
        out += [(classify(l), t) for t, l in self.lines if l.startswith("· ")]
        out.append(("exit", self.wall_ms))
        return out

    def notes(self) -> list[str]:
        return [l.strip() for _, l in self.lines if l.startswith("note:")]

    def service_ms(self) -> float:
        """Time between `starting X` and `X ready`, summed over services."""
        total = 0.0
        for svc in ("api", "web"):
            s, r = self.at(f"start {svc}"), self.at(f"{svc} ready")
            if s is not None and r is not None:
                total += r - s
        return total

    def intervals(self) -> list[tuple[str, float]]:
        st = self.steps()
        return [(f"{a} → {b}", tb - ta) for (a, ta), (b, tb) in zip(st, st[1:])]

    def at(self, step: str) -> float | None:
        for name, t in self.steps():
            if name == step:
                return t
        return None


def timed_binky(binary: Path, env: dict[str, str], *args: str,
                timeout: float = UP_TIMEOUT_S) -> Timed:
    """Runs binky with stderr and stdout on pipes read unbuffered (os.read
    via select), stamping each stderr line as it arrives. The wall time is
    spawn → exit, like subprocess.run."""
    t0_epoch = time.time_ns()
    t0 = time.perf_counter_ns()
    p = subprocess.Popen([str(binary), *args], env=env, stdin=subprocess.DEVNULL,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, bufsize=0)
    out_fd, err_fd = p.stdout.fileno(), p.stderr.fileno()
    open_fds = {out_fd, err_fd}
    out = bytearray()
    pending = b""
    lines: list[tuple[float, str]] = []
    deadline = time.monotonic() + timeout
    try:
        while open_fds:
            left = deadline - time.monotonic()
            if left <= 0:
                raise BenchError(f"`binky {' '.join(args)}` took longer than {timeout:g} s")
            ready, _, _ = select.select(list(open_fds), [], [], left)
            now = time.perf_counter_ns()
            for fd in ready:
                chunk = os.read(fd, 65536)
                if not chunk:
                    open_fds.discard(fd)
                    continue
                if fd == out_fd:
                    out += chunk
                    continue
                pending += chunk
                while b"\n" in pending:
                    line, pending = pending.split(b"\n", 1)
                    lines.append(((now - t0) / 1e6, line.decode(errors="replace")))
        rc = p.wait(timeout=max(1.0, deadline - time.monotonic()))
        t1 = time.perf_counter_ns()
    except BaseException:
        p.kill()
        p.wait()
        raise
    finally:
        p.stdout.close()
        p.stderr.close()
    if pending:
        lines.append(((t1 - t0) / 1e6, pending.decode(errors="replace")))
    return Timed((t1 - t0) / 1e6, rc, out.decode(errors="replace"), lines, t0_epoch / 1e6)


def checked(t: Timed, what: str) -> Timed:
    if t.rc != 0:
        err = "\n".join(l for _, l in t.lines)
        raise BenchError(f"{what} exited {t.rc}:\n{t.stdout}{err}")
    return t


# --------------------------------------------------------------------------
# Service logs: when the service printed "listening" and first answered the probe
# --------------------------------------------------------------------------

STAMP_RX = re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?)Z ")


def stamp_epoch_ms(line: str) -> float | None:
    m = STAMP_RX.match(line)
    if not m:
        return None
    s = m.group(1)
    fmt = "%Y-%m-%dT%H:%M:%S.%f" if "." in s else "%Y-%m-%dT%H:%M:%S"
    dt = datetime.strptime(s, fmt)
    return (dt - datetime(1970, 1, 1)).total_seconds() * 1000


def service_log_marks(home: Path, world: str, service: str, since_epoch_ms: float) -> dict:
    """From the world's log (stamped by `binky log-writer`, ms resolution):
    ms after `since` at which the service printed "listening" and served its
    first successful GET /healthz (which is the daemon's health probe)."""
    p = home / "logs" / PROJECT / world / f"{service}.log"
    marks: dict = {}
    try:
        text = p.read_text(errors="replace")
    except OSError:
        return marks
    for line in text.splitlines():
        t = stamp_epoch_ms(line)
        # The stamp has ms resolution and is taken by another process: allow
        # a couple of ms of slack before `since`.
        if t is None or t < since_epoch_ms - 2:
            continue
        rel = t - since_epoch_ms
        if "listening on" in line and "listening" not in marks:
            marks["listening"] = rel
        elif "GET /healthz" in line and " 200 " in line and "first_probe_200" not in marks:
            marks["first_probe_200"] = rel
    return marks


# --------------------------------------------------------------------------
# (b) The services on their own
# --------------------------------------------------------------------------


def wait_healthy(port: int, proc: subprocess.Popen, timeout: float = 30.0) -> int:
    """Polls GET /healthz on 127.0.0.1:port until 200; returns the attempts."""
    deadline = time.monotonic() + timeout
    attempts = 0
    while True:
        attempts += 1
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
        try:
            conn.request("GET", "/healthz")
            if conn.getresponse().status == 200:
                return attempts
        except OSError:
            pass
        finally:
            conn.close()
        if proc.poll() is not None:
            raise BenchError(f"baseline service on :{port} exited {proc.returncode}")
        if time.monotonic() > deadline:
            raise BenchError(f"baseline service on :{port} not healthy after {timeout:g} s")
        time.sleep(POLL_SLEEP_S)


def stop_proc(p: subprocess.Popen) -> None:
    if p.poll() is None:
        try:
            os.killpg(p.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        try:
            p.wait(timeout=5)
        except subprocess.TimeoutExpired:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            p.wait()


def baseline_once(python: str, hello: Path, db_file: Path, live: list) -> dict:
    """Starts api then web (web needs the api), each until /healthz is 200."""
    env = clean_env()
    api_port = free_port()
    web_port = free_port()
    while web_port == api_port:
        web_port = free_port()
    procs = []
    try:
        t0 = time.perf_counter_ns()
        api = subprocess.Popen(
            [python, "api.py"], cwd=hello, stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
            env=dict(env, PORT=str(api_port), DATABASE_URL=f"sqlite://{db_file}"),
        )
        procs.append(api)
        live.append(api)
        api_polls = wait_healthy(api_port, api)
        t1 = time.perf_counter_ns()
        web = subprocess.Popen(
            [python, "web.py", "--port", str(web_port)], cwd=hello,
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            start_new_session=True,
            env=dict(env, API_URL=f"http://localhost:{api_port}",
                     API_PUBLIC_URL=f"http://localhost:{api_port}"),
        )
        procs.append(web)
        live.append(web)
        web_polls = wait_healthy(web_port, web)
        t2 = time.perf_counter_ns()
    finally:
        for p in procs:
            stop_proc(p)
            live.remove(p)
    return {
        "api_ms": (t1 - t0) / 1e6,
        "web_ms": (t2 - t1) / 1e6,
        "total_ms": (t2 - t0) / 1e6,
        "api_polls": api_polls,
        "web_polls": web_polls,
    }


# --------------------------------------------------------------------------
# Daemon lifecycle, machine facts
# --------------------------------------------------------------------------


def daemon_pid(binary: Path, env: dict[str, str]) -> int | None:
    r = run(binary, env, "daemon", "status", "--json", check=False)
    try:
        info = json.loads(r.stdout)
    except json.JSONDecodeError:
        return None
    return int(info["pid"]) if info.get("running") else None


def stop_daemon(binary: Path, env: dict[str, str], pid: int | None) -> None:
    try:
        run(binary, env, "daemon", "stop", check=False, timeout=20)
    except subprocess.TimeoutExpired:
        log("warning: `binky daemon stop` timed out")
    if pid is None:
        return
    deadline = time.monotonic() + 5
    while pid_alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    if pid_alive(pid):
        log(f"warning: daemon pid {pid} still alive after stop; sending SIGTERM")
        try:
            os.kill(pid, signal.SIGTERM)
            time.sleep(1)
            if pid_alive(pid):
                os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def service_pids(binary: Path, env: dict[str, str]) -> list[int]:
    """Pids of every supervised process (a fallback for clean-up)."""
    try:
        r = run(binary, env, "status", "--json", check=False, timeout=20)
        report = json.loads(r.stdout)
    except (subprocess.TimeoutExpired, json.JSONDecodeError, OSError):
        return []
    return [s["pid"] for p in report.get("projects", []) for w in p.get("worlds", [])
            for s in w.get("services", []) if s.get("pid")]


def daemon_log_findings(home: Path) -> list[str]:
    p = home / "daemon.log"
    if not p.exists():
        return []
    return [l.rstrip() for l in p.read_text(errors="replace").splitlines()
            if " WARN " in l or " ERROR " in l or "panick" in l]


def git(*args: str, cwd: Path = REPO) -> str:
    return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=30).stdout.strip()


def git_describe() -> str | None:
    try:
        rev = git("rev-parse", "--short", "HEAD")
        dirty = git("status", "--porcelain", "--untracked-files=no")
        return f"{rev}{'-dirty' if dirty else ''}" if rev else None
    except (OSError, subprocess.TimeoutExpired):
        return None


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


# --------------------------------------------------------------------------
# Main
# --------------------------------------------------------------------------


def breakdown(runs: list[Timed]) -> list[dict]:
    """Median of each consecutive-step interval, in the order steps occur."""
    order: list[str] = []
    vals: dict[str, list[float]] = {}
    for t in runs:
        for name, ms in t.intervals():
            if name not in vals:
                order.append(name)
                vals[name] = []
            vals[name].append(ms)
    return [{"step": n, "n": len(vals[n]), "median_ms": median(vals[n]),
             "p90_ms": round(percentile(sorted(vals[n]), 90), 2)} for n in order]


def service_view(runs: list[Timed], marks: list[dict]) -> dict:
    """Per service, medians of: spawn request → "listening" in its log →
    first 200 probe in its log → the ready line at the client."""
    out = {}
    for svc in ("api", "web"):
        to_listen, listen_to_probe, probe_to_ready, start_to_ready = [], [], [], []
        for t, m in zip(runs, marks):
            s, r = t.at(f"start {svc}"), t.at(f"{svc} ready")
            mk = m.get(svc, {})
            if s is None or r is None:
                continue
            start_to_ready.append(r - s)
            if "listening" in mk and "first_probe_200" in mk:
                to_listen.append(mk["listening"] - s)
                listen_to_probe.append(mk["first_probe_200"] - mk["listening"])
                probe_to_ready.append(r - mk["first_probe_200"])
        out[svc] = {
            "start_to_ready_ms": median(start_to_ready),
            "start_to_listening_ms": median(to_listen),
            "listening_to_first_probe_200_ms": median(listen_to_probe),
            "first_probe_200_to_ready_line_ms": median(probe_to_ready),
            "n_with_log_marks": len(to_listen),
        }
    return out


def benchmark(args: argparse.Namespace, binary: Path, state: dict) -> dict:
    res: dict = {
        "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "machine": {
            "cpus": os.cpu_count(),
            "cpu_model": cpu_model(),
            "kernel": platform.release(),
            "loadavg_start": loadavg(),
        },
        "binary": str(binary),
        "git": git_describe(),
        "config": {"runs": args.runs, "warmup": args.warmup, "example": EXAMPLE,
                   "baseline_poll_sleep_ms": POLL_SLEEP_S * 1000},
    }
    home: Path = state["home"]
    env: dict[str, str] = state["env"]
    res["binky_version"] = run(binary, env, "--version").stdout.strip()
    python = shutil.which("python3", path=env.get("PATH"))
    if not python:
        raise BenchError("python3 is not on PATH (examples/hello needs it)")
    res["python"] = subprocess.run([python, "--version"], capture_output=True,
                                   text=True).stdout.strip()

    # 1. A throwaway clone: worktrees land beside it, not beside this repo.
    clone = Path(tempfile.mkdtemp(prefix="bku-repo-", dir="/tmp"))
    state["clone"] = clone
    if git("status", "--porcelain", "--", EXAMPLE):
        log(f"warning: {EXAMPLE} has uncommitted changes; the clone has the committed files")
    r = subprocess.run(["git", "clone", "-q", str(REPO), str(clone)],
                       capture_output=True, text=True, timeout=120)
    if r.returncode != 0:
        raise BenchError(f"git clone failed: {r.stderr}")
    hello = clone / EXAMPLE
    if args.health_interval:
        # What-if: the same example with a shorter health-probe interval.
        # Changed and committed in the throwaway clone only (worktrees check
        # out its HEAD); this repository is not touched.
        toml = hello / "binky.toml"
        text = toml.read_text()
        new_text, n = re.subn(
            r'^health = "(/[^"]*)"$',
            lambda m: f'health = {{ http = "{m.group(1)}", interval = "{args.health_interval}" }}',
            text, flags=re.M)
        if n == 0:
            raise BenchError(f"--health-interval: no `health = \"/…\"` line in {toml}")
        toml.write_text(new_text)
        r = subprocess.run(["git", "-c", "user.name=bench", "-c", "user.email=bench@localhost",
                            "commit", "-qam", "bench: health interval"], cwd=clone,
                           capture_output=True, text=True, timeout=60)
        if r.returncode != 0:
            raise BenchError(f"git commit in the clone failed: {r.stderr}")
        r = run(binary, env, "check", str(toml), check=False)
        if r.returncode != 0:
            raise BenchError(f"the edited binky.toml does not check:\n{r.stdout}{r.stderr}")
        log(f"health probes every {args.health_interval} ({n} service(s)) in the clone")
    res["config"]["health_interval"] = args.health_interval or "default (250ms)"
    wt_root = clone.parent / f"{clone.name}.worktrees"
    state["wt_root"] = wt_root
    res["clone"] = {"path": str(clone), "files": len(git("ls-files", cwd=clone).splitlines()),
                    "worktree_root": str(wt_root)}
    log(f"clone {clone} ({res['clone']['files']} files), BINKY_HOME={home}")
    proj = ["-p", str(hello)]

    run(binary, env, "daemon", "start")
    pid = daemon_pid(binary, env)
    if pid is None:
        raise BenchError("the daemon did not start")
    state["pid"] = pid
    if not os.path.samefile(f"/proc/{pid}/exe", binary):
        raise BenchError(f"daemon pid {pid} runs {os.readlink(f'/proc/{pid}/exe')}, "
                         f"not {binary}")
    res["daemon_pid"] = pid

    def up(name: str) -> Timed:
        state["worlds"].add(name)
        return checked(timed_binky(binary, env, *proj, "up", name), f"`binky up {name}`")

    def remove(name: str) -> None:
        run(binary, env, *proj, "remove", "--force", name)
        state["worlds"].discard(name)

    # 2. Warm-up: the first `up` builds the golden SQLite file; the rest (and
    # one baseline run each) warm the page cache and Python's bytecode cache.
    golden_db: Path | None = None
    for k in range(args.warmup):
        name = f"wu{k + 1}"
        t = up(name)
        log(f"warm-up up {name}: {t.wall_ms:.0f} ms")
        if golden_db is None:
            found = sorted((home / "slices" / "sqlite").glob(f"{PROJECT}_golden_*.sqlite3"))
            if not found:
                raise BenchError("no golden SQLite file after the warm-up `up`")
            golden_db = found[0]
            base_db = home / "baseline.sqlite3"
            src = sqlite3.connect(golden_db)
            dst = sqlite3.connect(base_db)
            src.backup(dst)
            dst.close()
            src.close()
        remove(name)
        baseline_once(python, hello, base_db, state["live"])
    assert golden_db is not None
    golden_mtime = golden_db.stat().st_mtime_ns
    res["golden"] = str(golden_db)

    # The existing world for (c): up once (untimed).
    steady = "steady"
    up(steady)

    # 3. Interleaved: (a) fresh up + remove, (b) services alone, (c) down then
    # up, then a no-op up. Rotating order, so load drift hits all alike.
    fresh: list[Timed] = []
    fresh_marks: list[dict] = []
    base: list[dict] = []
    again: list[Timed] = []
    again_marks: list[dict] = []
    noop: list[Timed] = []
    down_ms: list[float] = []

    def unit_a(i: int) -> None:
        name = f"w{i + 1}"
        wt = wt_root / name
        if wt.exists():
            raise BenchError(f"{wt} exists before `up {name}`: not a fresh world")
        t = up(name)
        if not wt.is_dir():
            raise BenchError(f"`up {name}` did not create {wt}")
        fresh.append(t)
        fresh_marks.append({s: service_log_marks(home, name, s, t.t0_epoch_ms)
                            for s in ("api", "web")})
        remove(name)

    def unit_b(i: int) -> None:
        base.append(baseline_once(python, hello, base_db, state["live"]))

    def unit_c(i: int) -> None:
        d = timed_binky(binary, env, *proj, "down", steady)
        checked(d, f"`binky down {steady}`")
        down_ms.append(d.wall_ms)
        t = up(steady)
        again.append(t)
        again_marks.append({s: service_log_marks(home, steady, s, t.t0_epoch_ms)
                            for s in ("api", "web")})
        n = up(steady)
        if any(l.startswith("· ") for _, l in n.lines):
            raise BenchError("the no-op `up` on a running world did work: "
                             + "; ".join(l for _, l in n.lines))
        noop.append(n)

    units = [unit_a, unit_b, unit_c]
    for i in range(args.runs):
        k = i % len(units)
        for u in units[k:] + units[:k]:
            u(i)
        log(f"run {i + 1}/{args.runs}: fresh up {fresh[-1].wall_ms:.0f} ms, services alone "
            f"{base[-1]['total_ms']:.0f} ms, up after down {again[-1].wall_ms:.0f} ms, "
            f"no-op up {noop[-1].wall_ms:.1f} ms")

    if golden_db.stat().st_mtime_ns != golden_mtime:
        res["notes"] = ["the golden file changed during the timed runs (rebuilt?)"]
    res["machine"]["loadavg_end"] = loadavg()

    a = summarise([t.wall_ms for t in fresh])
    b = summarise([x["total_ms"] for x in base])
    c = summarise([t.wall_ms for t in again])
    polls = [x["api_polls"] + x["web_polls"] for x in base]
    res["timings"] = {
        "up_fresh": a,
        "services_alone": b,
        "services_alone_api": summarise([x["api_ms"] for x in base]),
        "services_alone_web": summarise([x["web_ms"] for x in base]),
        "up_after_down": c,
        "up_noop": summarise([t.wall_ms for t in noop]),
        "down": summarise(down_ms),
    }
    res["baseline_polling"] = {
        "sleep_ms": POLL_SLEEP_S * 1000,
        "mean_attempts_per_run": round(statistics.fmean(polls), 1),
        # Mean time between attempts (sleep + one refused/answered request).
        "mean_interval_ms": round(
            sum(x["total_ms"] for x in base) / max(1, sum(polls)), 2),
    }
    res["overhead"] = {
        "fresh_median_ms": round(a["median_ms"] - b["median_ms"], 2),
        "fresh_p90_ms": round(a["p90_ms"] - b["p90_ms"], 2),
        "after_down_median_ms": round(c["median_ms"] - b["median_ms"], 2),
        "after_down_p90_ms": round(c["p90_ms"] - b["p90_ms"], 2),
    }
    # Attribution: overhead = binky's own steps (everything outside
    # `starting X` → `X ready`) + how much longer the services take to be
    # declared ready inside `up` than on their own.
    res["attribution"] = {}
    for key, runs in (("up_fresh", fresh), ("up_after_down", again)):
        in_up = median([t.service_ms() for t in runs])
        res["attribution"][key] = {
            "outside_service_steps_ms": median([t.wall_ms - t.service_ms() for t in runs]),
            "service_steps_ms": in_up,
            "service_steps_minus_alone_ms": round(in_up - b["median_ms"], 2),
        }
    notes = [n for t in fresh + again for n in t.notes()]
    if notes:
        res["up_notes"] = {"count": len(notes), "examples": sorted(set(notes))[:10]}
    res["breakdown"] = {"up_fresh": breakdown(fresh), "up_after_down": breakdown(again)}
    res["services_in_up"] = {"up_fresh": service_view(fresh, fresh_marks),
                             "up_after_down": service_view(again, again_marks)}
    if args.raw:
        res["raw"] = {
            "up_fresh": [{"wall_ms": t.wall_ms, "lines": t.lines, "log_marks": m}
                         for t, m in zip(fresh, fresh_marks)],
            "services_alone": base,
            "up_after_down": [{"wall_ms": t.wall_ms, "lines": t.lines, "log_marks": m}
                              for t, m in zip(again, again_marks)],
            "up_noop": [t.wall_ms for t in noop],
            "down": down_ms,
        }
    res["targets"] = {
        "overhead_fresh_ms": {
            "target": f"< {TARGET_OVERHEAD_MS:g} ms",
            "value": res["overhead"]["fresh_median_ms"],
            "pass": res["overhead"]["fresh_median_ms"] < TARGET_OVERHEAD_MS,
        },
        "overhead_after_down_ms": {
            "target": f"< {TARGET_DOWN_UP_OVERHEAD_MS:g} ms",
            "value": res["overhead"]["after_down_median_ms"],
            "pass": res["overhead"]["after_down_median_ms"] < TARGET_DOWN_UP_OVERHEAD_MS,
        },
    }
    return res


def fmt(v: float | None) -> str:
    return "—" if v is None else f"{v:.1f}"


def print_table(res: dict) -> None:
    m = res["machine"]
    print(f"binky up benchmark — {res['date']}")
    print(f"  {res['binky_version']} ({res.get('git') or 'no git'}), {res['binary']}")
    print(f"  {m['cpus']} CPUs ({m['cpu_model']}), Linux {m['kernel']}, {res['python']}, "
          f"load {m['loadavg_start'][0]:.2f} → {m['loadavg_end'][0]:.2f}")
    print(f"  project {EXAMPLE} in a clone with {res['clone']['files']} tracked files; "
          f"golden SQLite file built in the warm-up; health interval "
          f"{res['config']['health_interval']}")
    print()
    t = res["timings"]
    n = t["up_fresh"]["n"]
    print(f"Whole process (spawn → exit) / services alone, {n} runs each, interleaved")
    print(f"  {'':<34}{'min':>8}{'median':>9}{'mean':>9}{'p90':>9}{'max':>9}  (ms)")
    rows = [
        ("(a) up, fresh world", "up_fresh"),
        ("(b) services alone (api + web)", "services_alone"),
        ("      api start → healthy", "services_alone_api"),
        ("      web start → healthy", "services_alone_web"),
        ("(c) up after down", "up_after_down"),
        ("    up, already running (no-op)", "up_noop"),
        ("    down (not a target)", "down"),
    ]
    for label, key in rows:
        v = t[key]
        print(f"  {label:<34}{v['min_ms']:>8.1f}{v['median_ms']:>9.1f}{v['mean_ms']:>9.1f}"
              f"{v['p90_ms']:>9.1f}{v['max_ms']:>9.1f}")
    bp = res["baseline_polling"]
    print(f"  (b) polls /healthz with {bp['sleep_ms']:g} ms sleeps: one attempt every "
          f"{bp['mean_interval_ms']:.1f} ms on average, {bp['mean_attempts_per_run']:.0f} "
          f"attempts per run (api + web)")
    o = res["overhead"]
    print(f"  overhead, fresh world:  median {o['fresh_median_ms']:.1f} ms, "
          f"p90 {o['fresh_p90_ms']:.1f} ms  (a − b)")
    print(f"  overhead, after down:   median {o['after_down_median_ms']:.1f} ms, "
          f"p90 {o['after_down_p90_ms']:.1f} ms  (c − b)")
    print()
    for key, title in (("up_fresh", "(a) up, fresh world"), ("up_after_down",
                                                             "(c) up after down")):
        print(f"Where {title} spends its time: medians between progress lines on stderr")
        for row in res["breakdown"][key]:
            print(f"  {row['step']:<36}{fmt(row['median_ms']):>8}   p90 {fmt(row['p90_ms']):>7}"
                  f"  (n={row['n']})")
        print("  per service, from `starting X` (ms, medians; log stamps have 1 ms resolution):")
        print(f"  {'':<8}{'→ listening':>13}{'→ first 200 probe':>19}{'→ ready line':>14}"
              f"{'start → ready':>15}{'alone':>8}")
        for svc, v in res["services_in_up"][key].items():
            alone = t[f"services_alone_{svc}"]["median_ms"]
            print(f"  {svc:<8}{fmt(v['start_to_listening_ms']):>13}"
                  f"{fmt(v['listening_to_first_probe_200_ms']):>19}"
                  f"{fmt(v['first_probe_200_to_ready_line_ms']):>14}"
                  f"{fmt(v['start_to_ready_ms']):>15}{alone:>8.1f}")
        print()
    print("Overhead split (medians): binky's own steps + extra time the services take inside up")
    for key, label in (("up_fresh", "(a) fresh world"), ("up_after_down", "(c) after down")):
        at = res["attribution"][key]
        print(f"  {label:<18} outside `starting X → X ready`: "
              f"{fmt(at['outside_service_steps_ms']):>6} ms;  service steps "
              f"{fmt(at['service_steps_ms'])} ms − alone {t['services_alone']['median_ms']:.1f} ms"
              f" = {fmt(at['service_steps_minus_alone_ms'])} ms")
    print()
    print("Targets")
    tg = res["targets"]
    rows = [("overhead, fresh world", tg["overhead_fresh_ms"], ""),
            ("overhead, up after down", tg["overhead_after_down_ms"],
             f" (up after down < {t['services_alone']['median_ms'] + TARGET_DOWN_UP_OVERHEAD_MS:.0f}"
             " ms)")]
    for name, v, extra in rows:
        print(f"  {name:<24}{v['value']:>9.1f} ms   target {v['target'] + extra:<36}"
              f"{verdict(v['pass'])}")
    for note in res.get("notes", []):
        print(f"note: {note}")
    if res.get("up_notes"):
        u = res["up_notes"]
        print(f"note: `up` printed {u['count']} note(s), e.g. {u['examples'][0]!r} "
              "(a program outside this BINKY_HOME held a port in the range)")
    if res.get("daemon_log_findings"):
        print()
        print("daemon.log warnings/errors:")
        for line in res["daemon_log_findings"][:20]:
            print(f"  {line}")


def cleanup(binary: Path, state: dict) -> None:
    env, home = state["env"], state["home"]
    for p in list(state["live"]):
        stop_proc(p)
    clone = state.get("clone")
    if state["worlds"] and clone is not None:
        pids = service_pids(binary, env)
        failed = False
        for name in sorted(state["worlds"]):
            try:
                r = run(binary, env, "-p", str(clone / EXAMPLE), "remove", "--force", name,
                        check=False, timeout=60)
                if r.returncode != 0:
                    failed = True
                    log(f"warning: remove {name}: {r.stderr.strip()}")
            except subprocess.TimeoutExpired:
                failed = True
                log(f"warning: `remove --force {name}` timed out")
        if failed:
            for pid in pids:
                try:
                    os.killpg(pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
    stop_daemon(binary, env, state["pid"])
    state["findings"] = daemon_log_findings(home)
    if state["keep"]:
        log(f"kept {home}, {clone} and {state.get('wt_root')}")
        return
    shutil.rmtree(home, ignore_errors=True)
    for p in (clone, state.get("wt_root")):
        if p is not None:
            shutil.rmtree(p, ignore_errors=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--binary", help="binky binary to test (default: "
                    "$CARGO_TARGET_DIR/release/binky, built when missing or stale)")
    ap.add_argument("--build", action="store_true",
                    help="run `cargo build --release` first even if the binary is current")
    ap.add_argument("--runs", type=int, default=20, help="timed samples of each kind (20)")
    ap.add_argument("--warmup", type=int, default=2,
                    help="untimed fresh `up`s (+ baseline runs) first; the first builds "
                    "the golden file (2, at least 1)")
    ap.add_argument("--health-interval", metavar="DURATION",
                    help="what-if: set the services' health-probe interval (e.g. 10ms) in "
                    "the throwaway clone's binky.toml; the default leaves the example as is")
    ap.add_argument("--json", action="store_true",
                    help="print the JSON results on stdout instead of the table")
    ap.add_argument("--out", help="results file (default /tmp/binky-bench-up-<time>.json)")
    ap.add_argument("--raw", action="store_true",
                    help="include every sample and every stamped stderr line in the JSON")
    ap.add_argument("--keep", action="store_true",
                    help="keep the temporary BINKY_HOME and clone (daemon and worlds are "
                    "still stopped and removed)")
    args = ap.parse_args()
    if args.runs < 1 or args.warmup < 1:
        ap.error("--runs and --warmup must be at least 1")

    interrupt_on_signals()

    try:
        binary = ensure_binary(args.binary, args.build)
    except BenchError as e:
        log(f"error: {e}")
        return 2

    main_worktrees = git("worktree", "list", "--porcelain")
    home = Path(tempfile.mkdtemp(prefix="bku", dir="/tmp"))
    state: dict = {"home": home, "env": bench_env(home), "pid": None, "worlds": set(),
                   "live": [], "keep": args.keep, "findings": []}
    res: dict | None = None
    rc = 0
    try:
        res = benchmark(args, binary, state)
    except (BenchError, subprocess.TimeoutExpired, OSError, KeyError,
            json.JSONDecodeError) as e:
        log(f"error: {e}")
        tail = home / "daemon.log"
        if tail.exists():
            log("daemon.log (last 20 lines):\n" +
                "\n".join(tail.read_text(errors="replace").splitlines()[-20:]))
        rc = 1
    except KeyboardInterrupt:
        log("interrupted")
        rc = 130
    finally:
        cleanup(binary, state)
        if git("worktree", "list", "--porcelain") != main_worktrees:
            log(f"warning: the worktree list of {REPO} changed during the run")
    if res is None:
        return rc
    res["daemon_log_findings"] = state["findings"]
    out = Path(args.out or time.strftime("/tmp/binky-bench-up-%Y%m%d-%H%M%S.json"))
    out.write_text(json.dumps(res, indent=2) + "\n")
    if args.json:
        print(json.dumps(res, indent=2))
    else:
        print_table(res)
    log(f"results written to {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
