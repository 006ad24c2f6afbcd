#!/usr/bin/env python3
"""Benchmark the binky daemon: `binky status` round trip, idle RSS, idle CPU.

Run from anywhere:

    python3 benchmarks/daemon.py                  # full run (60 s idle window)
    python3 benchmarks/daemon.py --idle-seconds 5 # quick run
    python3 benchmarks/daemon.py --json           # JSON on stdout instead of the table

Python 3 standard library only. It uses the release binary at
$CARGO_TARGET_DIR/release/binky (default <repo>/target/release/binky) and runs
`cargo build --release` first when that binary is missing; `--binary PATH`
uses another one. Everything happens in a fresh temporary BINKY_HOME under
/tmp, which is removed at the end (the daemon is stopped first), also on error.

See benchmarks/README.md for what is measured and how to read it.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import platform
import shutil
import signal
import socket
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import BenchError, interrupt_on_signals, loadavg, log, pid_alive, target_dir, verdict

REPO = Path(__file__).resolve().parent.parent

# Targets from the issue.
TARGET_STATUS_MEDIAN_MS = 5.0
TARGET_IDLE_RSS_MIB = 20.0
# "Idle CPU ≈ 0" made concrete: under 0.1 % of one core over the idle window.
TARGET_IDLE_CPU_PCT = 0.1

CLK_TCK = os.sysconf("SC_CLK_TCK")


# --------------------------------------------------------------------------
# Binary and environment
# --------------------------------------------------------------------------


def ensure_binary(explicit: str | None, force_build: bool) -> Path:
    if explicit:
        path = Path(explicit).resolve()
        if not os.access(path, os.X_OK):
            raise BenchError(f"--binary {path} is not an executable file")
        return path
    path = target_dir() / "release" / "binky"
    if force_build or not path.exists():
        log(f"building: cargo build --release (CARGO_TARGET_DIR={target_dir()})")
        env = dict(os.environ, CARGO_TARGET_DIR=str(target_dir()))
        r = subprocess.run(["cargo", "build", "--release"], cwd=REPO, env=env)
        if r.returncode != 0 or not path.exists():
            raise BenchError("cargo build --release failed")
    else:
        newest = max(
            (p.stat().st_mtime for p in (REPO / "src").rglob("*.rs")), default=0.0
        )
        if newest > path.stat().st_mtime:
            log(
                f"warning: {path} is older than the newest file in src/; "
                "pass --build to rebuild it first"
            )
    return path


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def bench_env(home: Path) -> dict[str, str]:
    """The environment every binky process gets: no inherited BINKY_*."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("BINKY_")}
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
        timeout: float = 30) -> subprocess.CompletedProcess:
    r = subprocess.run(
        [str(binary), *args], env=env, capture_output=True, text=True, timeout=timeout
    )
    if check and r.returncode != 0:
        raise BenchError(
            f"`binky {' '.join(args)}` exited {r.returncode}:\n{r.stdout}{r.stderr}"
        )
    return r


# --------------------------------------------------------------------------
# Seeding the registry
# --------------------------------------------------------------------------


def world_slug(name: str) -> str:
    """Mirror of src/slug.rs::world_slug (enough for the names used here)."""
    out, dash = [], False
    for c in name.lower():
        if c.isascii() and (c.islower() or c.isdigit()):
            out.append(c)
            dash = False
        elif not dash and out:
            out.append("-")
            dash = True
    base = "".join(out).rstrip("-")
    if base == name and base and len(base) <= 40:
        return base
    h = hashlib.sha256(name.encode()).hexdigest()[:6]
    head = base[:33].rstrip("-")
    return f"{head}-{h}" if head else f"w-{h}"


# (project, root, number of worlds, first port of its range)
PROJECTS = [("acme", "/srv/src/acme", 8, 20000), ("shop", "/srv/src/shop/app", 7, 21000)]
BRANCHES = [
    "main", "feat/login", "feat/billing-v2", "fix/crash-on-empty-cart", "agent-1",
    "agent-2", "agent-3", "Release/2024.06", "spike/wasm", "chore/deps",
    "feat/search", "agent-4", "hotfix/tls", "exp/new-proxy", "docs",
]


def seed_registry(db: Path, home: Path, n_worlds: int) -> dict:
    """Inserts projects, worlds, services and port reservations.

    Worlds are `stopped` (what `binky down` leaves: ports stay reserved) so
    that no future reconciliation tries to adopt processes that don't exist.
    """
    now = int(time.time())
    total_default = sum(p[2] for p in PROJECTS)
    con = sqlite3.connect(db)
    try:
        con.execute("PRAGMA foreign_keys=ON")
        version = con.execute("PRAGMA user_version").fetchone()[0]
        if version < 1:
            raise BenchError(f"registry schema version is {version}; expected >= 1")
        counts = {"projects": 0, "worlds": 0, "services": 0, "ports": 0}
        world_i = 0
        with con:
            for pname, root, share, port0 in PROJECTS:
                # Scale each project's share when --worlds differs from 15.
                k = max(1, round(share * n_worlds / total_default))
                if pname == PROJECTS[-1][0]:
                    k = n_worlds - world_i
                if k <= 0:
                    continue
                pid = con.execute(
                    "INSERT INTO projects(name, root, created_at) VALUES (?,?,?)",
                    (pname, root, now - 86400),
                ).lastrowid
                counts["projects"] += 1
                port = port0
                for j in range(k):
                    branch = BRANCHES[world_i % len(BRANCHES)]
                    if world_i >= len(BRANCHES):
                        branch = f"{branch}-{world_i}"
                    world_i += 1
                    slug = world_slug(branch)
                    wid = con.execute(
                        "INSERT INTO worlds(project_id, name, slug, path, state, intent,"
                        " grp, error, created_at, updated_at)"
                        " VALUES (?,?,?,?,?,NULL,?,NULL,?,?)",
                        (pid, branch, slug, f"{home}/wt/{pname}/{slug}", "stopped",
                         "agents" if branch.startswith("agent") else None,
                         now - 3600, now - 60),
                    ).lastrowid
                    counts["worlds"] += 1
                    # 2 or 3 services: api (primary + named port), web, and
                    # on every other world a port-less worker.
                    services = [("api", ["", "debug"]), ("web", [""])]
                    if j % 2 == 0:
                        services.append(("worker", []))
                    for seq, (sname, ports) in enumerate(services):
                        con.execute(
                            "INSERT INTO services(world_id, seq, name, kind, state, pid,"
                            " start_time, pgid, restarts, last_exit, updated_at)"
                            " VALUES (?,?,?,?,?,NULL,NULL,NULL,?,?,?)",
                            (wid, seq, sname, "process", "stopped", j % 3,
                             "exit 0" if j % 3 else None, now - 60),
                        )
                        counts["services"] += 1
                        for pn in ports:
                            con.execute(
                                "INSERT INTO port_reservations(port, world_id, service, name)"
                                " VALUES (?,?,?,?)",
                                (port, wid, sname, pn),
                            )
                            port += 1
                            counts["ports"] += 1
        bad = con.execute("PRAGMA foreign_key_check").fetchall()
        if bad:
            raise BenchError(f"foreign key violations after seeding: {bad}")
        return counts
    finally:
        con.close()


# --------------------------------------------------------------------------
# /proc readers
# --------------------------------------------------------------------------


def proc_status(pid: int) -> dict[str, str]:
    out = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            k, _, v = line.partition(":")
            out[k] = v.strip()
    return out


def kib(v: str) -> int:
    return int(v.split()[0])


def memory(pid: int) -> dict:
    s = proc_status(pid)
    return {
        "rss_kib": kib(s["VmRSS"]),
        "rss_mib": round(kib(s["VmRSS"]) / 1024, 2),
        "rss_anon_kib": kib(s.get("RssAnon", "0 kB")),
        "rss_file_kib": kib(s.get("RssFile", "0 kB")),
        "hwm_kib": kib(s["VmHWM"]),
        "threads": int(s["Threads"]),
    }


def cpu_ticks(pid: int) -> tuple[int, int]:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    # fields[0] is field 3 (state); utime is field 14, stime field 15.
    return int(fields[11]), int(fields[12])


def thread_counters(pid: int) -> dict[int, dict]:
    """Per-thread on-CPU ns (schedstat) and context switches."""
    out = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                run_ns = int(f.read().split()[0])
            st = proc_status_task(pid, tid)
            with open(f"/proc/{pid}/task/{tid}/comm") as f:
                comm = f.read().strip()
        except (FileNotFoundError, ProcessLookupError):
            continue
        out[int(tid)] = {
            "comm": comm,
            "run_ns": run_ns,
            "vcsw": int(st.get("voluntary_ctxt_switches", 0)),
            "nvcsw": int(st.get("nonvoluntary_ctxt_switches", 0)),
        }
    return out


def proc_status_task(pid: int, tid: str) -> dict[str, str]:
    out = {}
    with open(f"/proc/{pid}/task/{tid}/status") as f:
        for line in f:
            k, _, v = line.partition(":")
            out[k] = v.strip()
    return out


# --------------------------------------------------------------------------
# Timing
# --------------------------------------------------------------------------


def percentile(sorted_ms: list[float], p: float) -> float:
    """Nearest-rank percentile (p99 of 200 samples is the 198th smallest)."""
    k = max(1, math.ceil(p / 100 * len(sorted_ms)))
    return sorted_ms[k - 1]


def summarise(samples_ns: list[int]) -> dict:
    ms = sorted(x / 1e6 for x in samples_ns)
    return {
        "n": len(ms),
        "min_ms": round(ms[0], 3),
        "median_ms": round(statistics.median(ms), 3),
        "mean_ms": round(statistics.fmean(ms), 3),
        "p99_ms": round(percentile(ms, 99), 3),
        "max_ms": round(ms[-1], 3),
    }


def time_once(argv: list[str], env: dict[str, str]) -> int:
    t0 = time.perf_counter_ns()
    r = subprocess.run(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    t1 = time.perf_counter_ns()
    if r.returncode != 0:
        raise BenchError(f"{' '.join(argv)} exited {r.returncode}: {r.stderr.decode()}")
    return t1 - t0


def time_commands(cmds: dict[str, list[str]], env: dict[str, str], runs: int,
                  warmup: int) -> dict[str, list[int]]:
    """Runs the commands interleaved (rotating order) so load drift on a
    shared machine hits all of them alike."""
    names = list(cmds)
    for _ in range(warmup):
        for n in names:
            time_once(cmds[n], env)
    samples: dict[str, list[int]] = {n: [] for n in names}
    for i in range(runs):
        rot = names[i % len(names):] + names[: i % len(names)]
        for n in rot:
            samples[n].append(time_once(cmds[n], env))
    return samples


# --------------------------------------------------------------------------
# Daemon lifecycle
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


def daemon_log_findings(home: Path) -> list[str]:
    """WARN/ERROR lines of daemon.log (suspicious if any)."""
    p = home / "daemon.log"
    if not p.exists():
        return []
    return [l.rstrip() for l in p.read_text(errors="replace").splitlines()
            if " WARN " in l or " ERROR " in l or "panick" in l]


def git_describe() -> str | None:
    try:
        rev = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO,
                             capture_output=True, text=True, timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"],
                               cwd=REPO, capture_output=True, text=True,
                               timeout=10).stdout.strip()
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


def benchmark(args: argparse.Namespace, binary: Path, home: Path, env: dict[str, str],
              state: dict) -> dict:
    res: dict = {
        "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "machine": {
            "cpus": os.cpu_count(),
            "cpu_model": cpu_model(),
            "kernel": platform.release(),
            "clk_tck": CLK_TCK,
            "loadavg_start": loadavg(),
        },
        "binary": str(binary),
        "git": git_describe(),
        "config": {
            "runs": args.runs, "warmup": args.warmup, "worlds": args.worlds,
            "idle_seconds": args.idle_seconds, "settle_seconds": args.settle_seconds,
        },
    }
    res["binky_version"] = run(binary, env, "--version").stdout.strip()

    # 1. Fresh home: start once (creates + migrates registry.db), stop.
    log(f"fresh BINKY_HOME={home}; starting the daemon to create the registry")
    run(binary, env, "daemon", "start")
    state["pid"] = daemon_pid(binary, env)
    run(binary, env, "daemon", "stop")
    if state["pid"] and pid_alive(state["pid"]):
        time.sleep(0.5)
    if daemon_pid(binary, env) is not None:
        raise BenchError("the daemon is still running after `binky daemon stop`")

    # 2. Seed.
    counts = seed_registry(home / "registry.db", home, args.worlds)
    res["seeded"] = counts
    log(f"seeded {counts}")

    # 3. Start again and check what status reports.
    run(binary, env, "daemon", "start")
    pid = daemon_pid(binary, env)
    if pid is None:
        raise BenchError("the daemon did not come up after seeding")
    state["pid"] = pid
    if not os.path.samefile(f"/proc/{pid}/exe", binary):
        raise BenchError(f"daemon pid {pid} runs {os.readlink(f'/proc/{pid}/exe')}, "
                         f"not {binary}")
    report = json.loads(run(binary, env, "status", "--json").stdout)
    n_worlds = sum(len(p["worlds"]) for p in report["projects"])
    n_services = sum(len(w["services"]) for p in report["projects"] for w in p["worlds"])
    n_ports = sum(
        (1 if s.get("port") else 0) + len(s.get("ports") or {})
        for p in report["projects"] for w in p["worlds"] for s in w["services"]
    )
    if (n_worlds, n_services, n_ports) != (counts["worlds"], counts["services"],
                                           counts["ports"]):
        raise BenchError(
            f"status shows {n_worlds} worlds / {n_services} services / {n_ports} ports, "
            f"seeded {counts}"
        )
    human = run(binary, env, "status").stdout
    res["status_output_bytes"] = {"json": len(json.dumps(report)), "human": len(human)}
    log(f"daemon pid {pid}: status shows {n_worlds} worlds, {n_services} services, "
        f"{n_ports} ports")
    res["daemon_pid"] = pid
    res["rss_before_calls"] = memory(pid)

    # 4. Round trips, interleaved with the process-spawn floor.
    cmds = {
        "status": [str(binary), "status"],
        "status --json": [str(binary), "status", "--json"],
        "--version": [str(binary), "--version"],
    }
    true_bin = shutil.which("true")
    if true_bin:
        cmds["true (harness floor)"] = [true_bin]
    log(f"timing {args.runs} runs each of: {', '.join(cmds)} (interleaved, "
        f"{args.warmup} warm-up)")
    samples = time_commands(cmds, env, args.runs, args.warmup)
    res["timings"] = {n: summarise(s) for n, s in samples.items()}
    if args.raw:
        res["raw_ns"] = samples
    if daemon_pid(binary, env) != pid:
        raise BenchError("the daemon changed pid during the status calls")

    # 5. Memory right after the calls and after settling.
    res["rss_after_calls"] = memory(pid)
    log(f"settling {args.settle_seconds} s")
    time.sleep(args.settle_seconds)
    res["rss_after_settle"] = memory(pid)

    # 6. Idle CPU: nothing talks to the daemon during the window; /proc reads
    # do not wake it.
    log(f"idle window {args.idle_seconds} s (nothing talks to the daemon)")
    u0, s0 = cpu_ticks(pid)
    th0 = thread_counters(pid)
    w0 = time.monotonic()
    time.sleep(args.idle_seconds)
    w1 = time.monotonic()
    u1, s1 = cpu_ticks(pid)
    th1 = thread_counters(pid)
    wall_ms = (w1 - w0) * 1000
    cpu_ms = ((u1 - u0) + (s1 - s0)) * 1000 / CLK_TCK
    # Threads alive at both ends (an idle daemon neither starts nor ends any).
    run_ns = sum(t["run_ns"] - th0[tid]["run_ns"] for tid, t in th1.items() if tid in th0)
    per_thread = []
    for tid, t in sorted(th1.items()):
        b = th0.get(tid, {"run_ns": 0, "vcsw": 0, "nvcsw": 0})
        per_thread.append({
            "tid": tid, "comm": t["comm"],
            "run_us": round((t["run_ns"] - b["run_ns"]) / 1000, 1),
            "wakeups": (t["vcsw"] - b["vcsw"]) + (t["nvcsw"] - b["nvcsw"]),
        })
    res["idle"] = {
        "wall_ms": round(wall_ms, 1),
        "utime_ticks": u1 - u0,
        "stime_ticks": s1 - s0,
        "cpu_ms": round(cpu_ms, 1),
        "cpu_pct_one_core": round(cpu_ms / wall_ms * 100, 4),
        "schedstat_cpu_us": round(run_ns / 1000, 1),
        "schedstat_cpu_pct_one_core": round(run_ns / 1e6 / wall_ms * 100, 5),
        "context_switches": sum(t["wakeups"] for t in per_thread),
        "threads_before": len(th0),
        "threads_after": len(th1),
        "per_thread": per_thread,
    }
    res["rss_after_idle"] = memory(pid)
    res["machine"]["loadavg_end"] = loadavg()

    res["targets"] = {
        "status_median_ms": {
            "target": f"< {TARGET_STATUS_MEDIAN_MS} ms",
            "value": res["timings"]["status"]["median_ms"],
            "pass": res["timings"]["status"]["median_ms"] < TARGET_STATUS_MEDIAN_MS,
        },
        "idle_rss_mib": {
            "target": f"< {TARGET_IDLE_RSS_MIB} MiB",
            "value": res["rss_after_settle"]["rss_mib"],
            "pass": res["rss_after_settle"]["rss_mib"] < TARGET_IDLE_RSS_MIB
            and res["rss_after_calls"]["rss_mib"] < TARGET_IDLE_RSS_MIB,
        },
        "idle_cpu_pct": {
            "target": f"≈ 0 (< {TARGET_IDLE_CPU_PCT} % of one core)",
            "value": res["idle"]["cpu_pct_one_core"],
            "pass": res["idle"]["cpu_pct_one_core"] < TARGET_IDLE_CPU_PCT,
        },
    }
    return res


def print_table(res: dict) -> None:
    m = res["machine"]
    print(f"binky daemon benchmark — {res['date']}")
    print(f"  {res['binky_version']} ({res.get('git') or 'no git'}), {res['binary']}")
    print(f"  {m['cpus']} CPUs ({m['cpu_model']}), Linux {m['kernel']}, "
          f"load {m['loadavg_start'][0]:.2f} → {m['loadavg_end'][0]:.2f}")
    s = res["seeded"]
    print(f"  registry: {s['projects']} projects, {s['worlds']} worlds, "
          f"{s['services']} services, {s['ports']} ports")
    print()
    t = res["timings"]
    n = next(iter(t.values()))["n"]
    print(f"Round trip, whole process (spawn → exit), {n} runs each, interleaved")
    print(f"  {'command':<24}{'min':>8}{'median':>9}{'mean':>9}{'p99':>9}{'max':>9}  (ms)")
    for name, v in t.items():
        print(f"  {name:<24}{v['min_ms']:>8.2f}{v['median_ms']:>9.2f}{v['mean_ms']:>9.2f}"
              f"{v['p99_ms']:>9.2f}{v['max_ms']:>9.2f}")
    d = t["status"]["median_ms"] - t["--version"]["median_ms"]
    print(f"  status − --version (median): {d:.2f} ms = the daemon exchange; "
          f"the rest is process start-up")
    print()
    print("Daemon memory (VmRSS)")
    for label, key in [("before status calls", "rss_before_calls"),
                       ("after status calls", "rss_after_calls"),
                       (f"after {res['config']['settle_seconds']:g} s settle", "rss_after_settle"),
                       ("after idle window", "rss_after_idle")]:
        r = res[key]
        print(f"  {label:<24}{r['rss_mib']:>7.2f} MiB  (anon {r['rss_anon_kib']} KiB, "
              f"file {r['rss_file_kib']} KiB, {r['threads']} threads)")
    print(f"  peak (VmHWM)            {res['rss_after_idle']['hwm_kib'] / 1024:>7.2f} MiB")
    print()
    i = res["idle"]
    print(f"Daemon CPU over {i['wall_ms'] / 1000:.1f} s idle")
    print(f"  utime+stime  {i['cpu_ms']:.0f} ms ({i['utime_ticks']}+{i['stime_ticks']} ticks "
          f"of {1000 / CLK_TCK:.0f} ms) = {i['cpu_pct_one_core']:.3f} % of one core")
    print(f"  schedstat    {i['schedstat_cpu_us']:.0f} µs on CPU, "
          f"{i['context_switches']} context switches across {i['threads_after']} threads")
    print()
    print("Targets")
    tg = res["targets"]
    rows = [
        ("status median", tg["status_median_ms"], f"{tg['status_median_ms']['value']:.2f} ms"),
        ("idle RSS", tg["idle_rss_mib"], f"{tg['idle_rss_mib']['value']:.2f} MiB"),
        ("idle CPU", tg["idle_cpu_pct"], f"{tg['idle_cpu_pct']['value']:.3f} %"),
    ]
    for name, v, shown in rows:
        print(f"  {name:<16}{shown:>12}   target {v['target']:<30}{verdict(v['pass'])}")
    if res.get("daemon_log_findings"):
        print()
        print("daemon.log warnings/errors:")
        for line in res["daemon_log_findings"][:20]:
            print(f"  {line}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--binary", help="binky binary to test (default: "
                    "$CARGO_TARGET_DIR/release/binky, built when missing)")
    ap.add_argument("--build", action="store_true",
                    help="run `cargo build --release` first even if the binary exists")
    ap.add_argument("--runs", type=int, default=200, help="timed runs per command (200)")
    ap.add_argument("--warmup", type=int, default=10, help="untimed runs per command (10)")
    ap.add_argument("--worlds", type=int, default=15, help="worlds to register (15)")
    ap.add_argument("--idle-seconds", type=float, default=60.0,
                    help="idle window for the CPU measurement (60)")
    ap.add_argument("--settle-seconds", type=float, default=5.0,
                    help="pause before the settled RSS reading (5)")
    ap.add_argument("--json", action="store_true",
                    help="print the JSON results on stdout instead of the table")
    ap.add_argument("--out", help="results file (default /tmp/binky-bench-<time>.json)")
    ap.add_argument("--raw", action="store_true", help="include every sample in the JSON")
    ap.add_argument("--keep-home", action="store_true",
                    help="keep the temporary BINKY_HOME (daemon is still stopped)")
    args = ap.parse_args()
    if args.runs < 1 or args.worlds < 1 or args.idle_seconds <= 0:
        ap.error("--runs, --worlds and --idle-seconds must be positive")

    interrupt_on_signals()

    try:
        binary = ensure_binary(args.binary, args.build)
    except BenchError as e:
        log(f"error: {e}")
        return 2

    home = Path(tempfile.mkdtemp(prefix="bkb", dir="/tmp"))
    env = bench_env(home)
    state: dict = {"pid": None}
    res: dict | None = None
    rc = 0
    try:
        res = benchmark(args, binary, home, env, state)
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
        stop_daemon(binary, env, state["pid"])
        findings = daemon_log_findings(home)
        if args.keep_home:
            log(f"kept {home}")
        else:
            shutil.rmtree(home, ignore_errors=True)
    if res is None:
        return rc
    res["daemon_log_findings"] = findings
    out = Path(args.out or time.strftime("/tmp/binky-bench-%Y%m%d-%H%M%S.json"))
    out.write_text(json.dumps(res, indent=2) + "\n")
    if args.json:
        print(json.dumps(res, indent=2))
    else:
        print_table(res)
    log(f"results written to {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
