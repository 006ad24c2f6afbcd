"""`admission.py --queue`: what a long admission queue costs the daemon.

For each queue length (default 0, 100, 1,000 and 5,000) the daemon is
stopped, the queue seeded straight into `registry.db` (each ticket a world of
one project, in a group of its own, as a flood of fresh groups would leave
it), and the daemon started again: it carries the queue on, one waiting `up`
per ticket, exactly as after a restart. Nothing can be admitted (the disk
reserve is set above any disk), so the queue stays as it is. Then:

- `status` round trip, median of --runs: over the socket (connect, hello,
  `status`, the whole reply read; the daemon's cost) and as a process
  (`binky status --json`, what a script sees), interleaved;
- the daemon's CPU over --idle seconds with nothing changing
  (`/proc/<pid>/stat` ticks).

Goals (issue "An agent reaches only its own world"): `status` under 5 ms
and the daemon idle at 5,000 queued.
"""

from __future__ import annotations

import json
import os
import socket
import sqlite3
import statistics
import subprocess
import time
from pathlib import Path

from common import BenchError, cpu_ticks, free_port, log


def _env(home: Path) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("BINKY_")}
    env.update(BINKY_HOME=str(home), NO_COLOR="1",
               BINKY_PROXY_PORT=str(free_port()), BINKY_HTTPS_PORT=str(free_port()))
    return env


def _protocol(sock_path: Path, version: str) -> int:
    """The daemon's protocol number, from its welcome (an older binary
    speaks an older one)."""
    with socket.socket(socket.AF_UNIX) as s:
        s.connect(str(sock_path))
        f = s.makefile("rwb")
        f.write(json.dumps({"protocol": 0, "version": version}).encode() + b"\n")
        f.flush()
        return json.loads(f.readline())["protocol"]


def _status_over_socket(sock_path: Path, version: str, protocol: int) -> float:
    """Seconds for one `status` round trip over the daemon's socket."""
    t = time.perf_counter()
    with socket.socket(socket.AF_UNIX) as s:
        s.connect(str(sock_path))
        f = s.makefile("rwb")
        f.write(json.dumps({"protocol": protocol, "version": version}).encode() + b"\n")
        f.flush()
        f.readline()
        f.write(b'{"verb":"status","project":null}\n')
        f.flush()
        while True:
            line = f.readline()
            if not line:
                raise BenchError("the daemon closed the connection")
            # The reply read whole; not parsed (Python's JSON decoder on a
            # megabyte would be most of what is timed).
            if line.startswith((b'{"type":"ok"', b'{"type":"err"')):
                break
    return time.perf_counter() - t


def _seed(db: Path, project_root: Path, n: int) -> None:
    con = sqlite3.connect(db)
    # A registry from before callers were recorded (schema v11) has no
    # `caller` column: the same queue without it, so an older binary can be
    # measured side by side.
    cols = {r[1] for r in con.execute("PRAGMA table_info(admission_queue)")}
    caller = ("caller",) if "caller" in cols else ()
    names = ("project", "world", *caller, "grp", "request", "disk_path", "enqueued_at", "since")
    with con:
        con.execute("DELETE FROM admission_queue")
        now = int(time.time() * 1000)
        con.executemany(
            f"INSERT INTO admission_queue({', '.join(names)}) VALUES ({', '.join('?' * len(names))})",
            [("qbench", f"w-{i}", *(("bench 1",) if caller else ()), f"fresh-{i}",
              json.dumps({"project": "qbench", "name": f"w-{i}"}), str(project_root), now + i, now + i)
             for i in range(n)],
        )
    con.close()


def run(args, binary: Path, root: Path) -> dict:
    home = root / "h"
    project = root / "p"
    project.mkdir(parents=True)
    (project / "binky.toml").write_text('[project]\nname = "qbench"\n[services.app]\ncmd = "exec sleep 600"\n')
    subprocess.run(["git", "init", "-q", "-b", "main"], cwd=project, check=True)
    subprocess.run(["git", "-c", "user.email=b@b", "-c", "user.name=b", "commit", "-q", "--allow-empty", "-m", "i"],
                   cwd=project, check=True)
    env = _env(home)

    def binky(*a: str, check: bool = True) -> subprocess.CompletedProcess:
        return subprocess.run([str(binary), *a], env=env, cwd=project, capture_output=True, text=True, check=check)

    version = binky("--version").stdout.split()[-1]
    binky("daemon", "start")
    # Nothing is ever admitted: every ticket waits on the disk reserve.
    capped = "--queue-max" in binky("reserve", "--help").stdout
    binky("reserve", "--disk", "1000000", *(("--queue-max", "10000") if capped else ()))
    binky("daemon", "stop")
    rows = []
    try:
        for n in args.queue_sizes:
            _seed(home / "registry.db", project, n)
            binky("daemon", "start")
            pid = json.loads(binky("daemon", "status", "--json").stdout)["pid"]
            # Carried on: every ticket listed, none admitted.
            queued = json.loads(binky("metrics").stdout)["queue_length"]
            if queued != n:
                raise BenchError(f"{queued} queued after the restart, expected {n}")
            time.sleep(2)  # the restart's own work done
            protocol = _protocol(home / "binky.sock", version)
            sock, proc = [], []
            for _ in range(args.runs):
                sock.append(_status_over_socket(home / "binky.sock", version, protocol))
                t = time.perf_counter()
                binky("status", "--json")
                proc.append(time.perf_counter() - t)
            def passes() -> int:
                m = json.loads(binky("metrics").stdout)
                # An older daemon counts its passes as looks.
                return m.get("admission_passes", m["admission_looks"])
            looks0 = passes()
            t0, c0 = time.monotonic(), cpu_ticks(pid)
            time.sleep(args.idle)
            ticks, secs = cpu_ticks(pid) - c0, time.monotonic() - t0
            looks = passes() - looks0
            hz = os.sysconf("SC_CLK_TCK")
            row = {
                "queued": n,
                "status_socket_ms": statistics.median(sock) * 1000,
                "status_process_ms": statistics.median(proc) * 1000,
                "idle_cpu_pct": 100.0 * ticks / hz / secs,
                "passes_per_s": looks / secs,
            }
            log(f"{n} queued: status {row['status_socket_ms']:.2f} ms (socket), "
                f"{row['status_process_ms']:.2f} ms (process); idle CPU {row['idle_cpu_pct']:.2f} %")
            rows.append(row)
            binky("daemon", "stop")
    finally:
        binky("daemon", "stop", check=False)
    at = next((r for r in rows if r["queued"] == max(args.queue_sizes)), rows[-1])
    return {
        "mode": "queue",
        "rows": rows,
        "goal_status_ms": 5.0,
        "status_ok": at["status_socket_ms"] < 5.0,
        "idle_ok": at["idle_cpu_pct"] < 1.0,
    }


def print_report(r: dict) -> None:
    print(f"{'queued':>8}  {'status (socket)':>16}  {'status (process)':>17}  {'idle CPU':>9}  {'passes/s':>9}")
    for row in r["rows"]:
        print(f"{row['queued']:>8}  {row['status_socket_ms']:>13.2f} ms  {row['status_process_ms']:>14.2f} ms"
              f"  {row['idle_cpu_pct']:>7.2f} %  {row['passes_per_s']:>9.2f}")
    print(f"goal: status < 5 ms at the largest queue: {'PASS' if r['status_ok'] else 'MISS'}; "
          f"daemon idle (< 1 % of a core): {'PASS' if r['idle_ok'] else 'MISS'}")
