#!/usr/bin/env python3
"""What one proxied request costs, in figures that do not move with load:
CPU instructions, heap allocations and system calls per request, for
Binky's proxy and for nginx, measured under Valgrind's callgrind.

    python3 benchmarks/proxy_cost.py                     # about 2 min
    python3 benchmarks/proxy_cost.py --base OLD_BINARY   # A/B: another build beside this one
    python3 benchmarks/proxy_cost.py --json              # JSON on stdout instead of the table

Python 3 standard library only, plus valgrind (callgrind_control), nginx,
node and git on PATH. The binary is found and rebuilt as for proxy.py.

wrk's figures (proxy.py) are the truth about speed but move by 10-20 %
between runs on a shared machine. These do not: the same build gives the
same instructions per request within about 1 %, so a change worth a few
per cent shows here before it shows in wrk. They count user-space work
(instructions) and how often the kernel is asked (system calls), not what
the kernel spends per call; read them beside proxy.py's CPU figures.

For each upstream (nginx `return 200`, a Node http server, both run by
Binky as in proxy.py) and each proxy (Binky's daemon, an nginx reverse
proxy set up as in proxy.py), a fixed number of keep-alive requests is sent
after a warm-up; callgrind's instrumentation is on only while they run.
Both proxies use one worker (BINKY_PROXY_THREADS=1, worker_processes 1;
Valgrind runs one thread at a time anyway). The daemon's other threads
(sampler, supervisor) are counted too: at idle they cost under 1 % of the
figure (the report shows an idle window of the same length).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import BenchError, ensure_binary, interrupt_on_signals, log  # noqa: E402
from proxy import (NGINX_PROXY_CONF, NGINX_PROXY_SERVER, NGINX_UPSTREAM_CONF,  # noqa: E402
                   PROJECT, UPSTREAMS, bench_env, binky_toml, find_service, free_port,
                   git, node_cmd, run, stop_proc, tool, wait_http)

ALLOC_FNS = re.compile(
    r"^(?:__libc_|__GI___libc_|__GI_)?(malloc|calloc|realloc|memalign|posix_memalign|aligned_alloc)$")


# --------------------------------------------------------------------------
# Load: exactly N requests over C keep-alive connections
# --------------------------------------------------------------------------


async def one_connection(port: int, host: str, count: int) -> int:
    """Sends `count` GETs one after another on one connection; returns how
    many got a 200. A response is read whole (Content-Length or chunked)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    req = f"GET / HTTP/1.1\r\nHost: {host}\r\nUser-Agent: proxy_cost\r\n\r\n".encode()
    ok = 0
    try:
        for _ in range(count):
            writer.write(req)
            head = await reader.readuntil(b"\r\n\r\n")
            lines = head.decode("latin-1").split("\r\n")
            if " 200 " in lines[0] + " ":
                ok += 1
            headers = {k.strip().lower(): v.strip()
                       for k, _, v in (ln.partition(":") for ln in lines[1:] if ln)}
            if "content-length" in headers:
                await reader.readexactly(int(headers["content-length"]))
            elif headers.get("transfer-encoding", "").lower() == "chunked":
                while True:
                    size = int((await reader.readuntil(b"\r\n")).split(b";")[0], 16)
                    await reader.readexactly(size + 2)
                    if size == 0:
                        break
            else:
                raise BenchError(f"a response with no length from :{port}: {lines[0]}")
    finally:
        writer.close()
    return ok


def load(port: int, host: str, requests: int, connections: int) -> None:
    per = [requests // connections + (1 if i < requests % connections else 0)
           for i in range(connections)]

    async def all_of() -> int:
        got = await asyncio.gather(*(one_connection(port, host, n) for n in per if n))
        return sum(got)

    ok = asyncio.run(all_of())
    if ok != requests:
        raise BenchError(f"{requests - ok} of {requests} requests to :{port} ({host}) "
                         "were not answered 200")


# --------------------------------------------------------------------------
# callgrind
# --------------------------------------------------------------------------


def valgrind_cmd(out_dir: Path, name: str) -> list[str]:
    return [tool("valgrind"), "--tool=callgrind", "--instr-atstart=no",
            "--collect-systime=yes", f"--callgrind-out-file={out_dir}/{name}.%p",
            "--trace-children=no"]


def control(pid: int, *args: str) -> None:
    r = subprocess.run([tool("callgrind_control"), *args, str(pid)], capture_output=True,
                       text=True, timeout=120)
    if r.returncode != 0:
        raise BenchError(f"callgrind_control {' '.join(args)} {pid}: {r.stderr or r.stdout}")


def measured(pid: int, out_dir: Path, name: str, work) -> dict:
    """Runs `work()` with callgrind's instrumentation on in `pid`, dumps,
    and returns the dump's totals: instructions, allocation calls and
    system calls."""
    before = set(out_dir.glob(f"{name}.{pid}*"))
    control(pid, "--zero")
    control(pid, "--instr=on")
    t0 = time.monotonic()
    work()
    wall = time.monotonic() - t0
    control(pid, "--instr=off")
    control(pid, "--dump")
    deadline = time.monotonic() + 60
    while True:
        new = sorted(set(out_dir.glob(f"{name}.{pid}*")) - before, key=os.path.getmtime)
        if new and new[-1].stat().st_size > 0 and "totals:" in new[-1].read_text(errors="replace")[-4096:]:
            break
        if time.monotonic() > deadline:
            raise BenchError(f"no callgrind dump from pid {pid} in {out_dir}")
        time.sleep(0.2)
    return dict(parse_dump(new[-1]), wall_s=wall)


# Time reads are system calls only under Valgrind, which does not use the
# vDSO; natively `clock_gettime` never enters the kernel, so they are
# counted apart.
CLOCK_FNS = re.compile(r"(?:^|:)(?:__)?(clock_gettime|gettimeofday|time)(?:@|$| )")


def function_name(ref: str, names: dict[str, str]) -> str:
    """The function a `fn=`/`cfn=` value names: `(id) name` defines a
    compressed id (remembered in `names`), `(id)` refers to one."""
    m = re.match(r"\((\d+)\)(?: (.*))?", ref.rstrip("\n"))
    if not m:
        return ref.strip()
    if m.group(2):
        names[m.group(1)] = m.group(2)
    return names.get(m.group(1), "")


def parse_dump(path: Path) -> dict:
    """Totals of a callgrind dump: instructions, calls into the allocator,
    and system calls, with those made by clock functions apart."""
    events: list[str] = []
    totals: list[int] = []
    names: dict[str, str] = {}
    callee = None
    allocs = 0
    fn = ""
    after_calls = False
    clock_sys = 0
    sys_at = None
    with open(path, errors="replace") as f:
        for line in f:
            c = line[:1]
            if c.isdigit() or c in "+-*":
                # A cost line: the callee's inclusive cost right after
                # `calls=`, else the current function's own.
                if not after_calls and sys_at is not None and CLOCK_FNS.search(fn):
                    parts = line.split()
                    if len(parts) > sys_at:
                        clock_sys += int(parts[sys_at])
                after_calls = False
                continue
            after_calls = False
            if line.startswith("events:"):
                events = line.split()[1:]
                if "sysCount" in events:
                    sys_at = 1 + events.index("sysCount")
            elif line.startswith("totals:") or line.startswith("summary:"):
                totals = [int(x) for x in line.split()[1:]]
            elif line.startswith("cfn="):
                callee = function_name(line[4:], names)
            elif line.startswith("fn="):
                fn = function_name(line[3:], names)
            elif line.startswith("calls="):
                if callee is not None and ALLOC_FNS.match(callee):
                    allocs += int(line[6:].split()[0])
                callee = None
                after_calls = True
    got = dict(zip(events, totals))
    return {"instructions": got.get("Ir", 0),
            "syscalls": got.get("sysCount", 0) - clock_sys,
            "clock_reads": clock_sys, "allocations": allocs}


# --------------------------------------------------------------------------
# The run
# --------------------------------------------------------------------------


def start_daemon(binary: Path, env: dict[str, str], cg: Path, state: dict) -> int:
    log_file = open(Path(env["BINKY_HOME"]) / "daemon-valgrind.log", "w")
    p = subprocess.Popen([*valgrind_cmd(cg, "binky"), str(binary), "daemon", "run"],
                         env=env, stdin=subprocess.DEVNULL, stdout=log_file, stderr=log_file,
                         start_new_session=True)
    state["live"].append(p)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        r = run(binary, env, "daemon", "status", "--json", check=False, timeout=30)
        if r.returncode == 0:
            pid = int(json.loads(r.stdout)["pid"])
            if pid != p.pid:
                raise BenchError(f"another daemon (pid {pid}) answers on {env['BINKY_HOME']}")
            return pid
        if p.poll() is not None:
            raise BenchError(f"the daemon under valgrind exited {p.returncode}")
        time.sleep(0.5)
    raise BenchError("the daemon under valgrind did not answer within 120 s")


def measure_binary(args, binary: Path, label: str, state: dict, with_nginx: bool) -> dict:
    """Brings up both upstreams with a daemon of `binary` under callgrind
    and measures its proxy (and, when `with_nginx`, nginx's) on each."""
    tmp: Path = state["tmp"] / label
    tmp.mkdir()
    home = tmp / "h"
    home.mkdir()
    cg = tmp / "cg"
    cg.mkdir()
    env = bench_env(home, state["taken"])
    env.setdefault("BINKY_PROXY_THREADS", "1")
    state["daemons"].append((binary, env))
    pid = start_daemon(binary, env, cg, state)
    nginx = tool("nginx")
    ngu = tmp / "ngu"
    ngu.mkdir()
    (ngu / "nginx.conf.in").write_text(NGINX_UPSTREAM_CONF.format(dir=ngu))
    cmds = {
        "nginx": (f"sed s/@PORT@/$PORT/ {ngu}/nginx.conf.in > {ngu}/nginx.conf && "
                  f"exec {nginx} -p {ngu} -c {ngu}/nginx.conf -e stderr -g 'daemon off;'"),
        "node": node_cmd(tool("node")),
    }
    ports: dict[str, int] = {}
    for u in UPSTREAMS:
        repo = tmp / f"r-{u}"
        repo.mkdir()
        git("init", "-q", "-b", "main", cwd=repo)
        (repo / "binky.toml").write_text(binky_toml(PROJECT[u], cmds[u]))
        git("add", "binky.toml", cwd=repo)
        git("commit", "-qm", "bench", cwd=repo)
        state["projects"].append((binary, env, repo))
        run(binary, env, "-p", str(repo), "up", "bench", timeout=180)
        st = json.loads(run(binary, env, "status", "--json", timeout=60).stdout)
        svc = find_service(st, PROJECT[u], "bench", "up")
        if not svc or not svc.get("port"):
            raise BenchError(f"no running `up` service with a port for {u}: {svc}")
        ports[u] = int(svc["port"])
        wait_http(ports[u])
    out: dict = {"binary": str(binary), "cells": {}}
    proxy_port = int(env["BINKY_PROXY_PORT"])
    n, c = args.requests, args.connections
    # The daemon's own background work over a window as long as a load.
    idle_for = None
    for u in UPSTREAMS:
        host = f"up.bench.{PROJECT[u]}.localhost"
        log(f"{label}: binky proxy, {u} upstream: warm-up, then {n} requests")
        load(proxy_port, host, args.warmup, c)
        cell = measured(pid, cg, "binky", lambda: load(proxy_port, host, n, c))
        out["cells"][f"{u}/binky"] = cell
        idle_for = idle_for or cell["wall_s"]
    idle = measured(pid, cg, "binky", lambda: time.sleep(idle_for or 1))
    out["idle"] = idle
    if with_nginx:
        ngp = tmp / "ngp"
        ngp.mkdir()
        front = {u: free_port(state["taken"]) for u in UPSTREAMS}
        servers = "".join(NGINX_PROXY_SERVER.format(name=f"u_{u}", up=ports[u], port=front[u])
                          for u in UPSTREAMS)
        conf = NGINX_PROXY_CONF.format(dir=ngp, servers=servers).replace(
            "worker_processes auto;", "worker_processes 1;\nmaster_process off;")
        (ngp / "nginx.conf").write_text(conf)
        err = open(ngp / "stderr.log", "w")
        p = subprocess.Popen([*valgrind_cmd(cg, "nginx"), nginx, "-p", str(ngp), "-c",
                              str(ngp / "nginx.conf"), "-e", "stderr", "-g", "daemon off;"],
                             stdin=subprocess.DEVNULL, stdout=err, stderr=err,
                             start_new_session=True)
        state["live"].append(p)
        for u in UPSTREAMS:
            wait_http(front[u], timeout=120)
            log(f"{label}: nginx proxy, {u} upstream: warm-up, then {n} requests")
            load(front[u], f"up.bench.{PROJECT[u]}.localhost", args.warmup, c)
            out["cells"][f"{u}/nginx"] = measured(
                p.pid, cg, "nginx",
                lambda: load(front[u], f"up.bench.{PROJECT[u]}.localhost", n, c))
        stop_proc(p)
    for cell in out["cells"].values():
        for k in ("instructions", "allocations", "syscalls", "clock_reads"):
            cell[f"{k}_per_request"] = round(cell[k] / n, 1)
    return out


def print_table(res: dict) -> None:
    n = res["config"]["requests"]
    print(f"\n  {n} requests per cell over {res['config']['connections']} keep-alive "
          "connections, under callgrind (user-space instructions; allocation calls; system "
          "calls other than clock reads, which natively are not system calls)")
    print(f"\n  {'upstream':8} {'proxy':14} {'instr/req':>10} {'allocs/req':>10} "
          f"{'syscalls/req':>12} {'clock reads/req':>15}")
    for run_ in res["runs"]:
        for key, cell in run_["cells"].items():
            u, proxy = key.split("/")
            name = f"{proxy} ({run_['label']})" if proxy == "binky" else proxy
            print(f"  {u:8} {name:14} {cell['instructions_per_request']:>10.0f} "
                  f"{cell['allocations_per_request']:>10.1f} {cell['syscalls_per_request']:>12.2f} "
                  f"{cell['clock_reads_per_request']:>15.2f}")
        idle = run_["idle"]
        print(f"  (binky {run_['label']} idle over {idle['wall_s']:.1f} s: "
              f"{idle['instructions']} instructions, {idle['syscalls']} system calls)")


def cleanup(state: dict) -> None:
    for binary, env, repo in state["projects"]:
        try:
            run(binary, env, "-p", str(repo), "remove", "--force", "bench", check=False,
                timeout=120)
        except subprocess.TimeoutExpired:
            log(f"warning: remove bench in {repo} timed out")
    for binary, env in state["daemons"]:
        try:
            run(binary, env, "daemon", "stop", check=False, timeout=60)
        except subprocess.TimeoutExpired:
            log("warning: `binky daemon stop` timed out")
    for p in state["live"]:
        deadline = time.monotonic() + 30
        while p.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
        stop_proc(p)
    if state["keep"]:
        log(f"kept {state['tmp']}")
    else:
        shutil.rmtree(state["tmp"], ignore_errors=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--binary", help="binky binary to measure (default: "
                    "$CARGO_TARGET_DIR/release/binky, built when missing or stale)")
    ap.add_argument("--base", help="a second binky binary, measured the same way after it")
    ap.add_argument("--requests", type=int, default=20000, help="requests per cell (20000)")
    ap.add_argument("--warmup", type=int, default=2000, help="untimed requests first (2000)")
    ap.add_argument("--connections", type=int, default=16, help="keep-alive connections (16)")
    ap.add_argument("--json", action="store_true", help="JSON on stdout instead of the table")
    ap.add_argument("--keep", action="store_true", help="keep the temporary folder")
    args = ap.parse_args()
    if args.requests < args.connections or args.connections < 1:
        ap.error("--requests must be at least --connections, and that at least 1")

    interrupt_on_signals()
    try:
        binary = ensure_binary(args.binary, False)
        base = Path(args.base).resolve() if args.base else None
        if base and not os.access(base, os.X_OK):
            raise BenchError(f"--base {base} is not an executable file")
        for t in ("valgrind", "callgrind_control", "nginx", "node", "git"):
            tool(t)
    except BenchError as e:
        log(f"error: {e}")
        return 2
    tmp = Path(tempfile.mkdtemp(prefix="bkc", dir="/tmp"))
    state: dict = {"tmp": tmp, "taken": set(), "projects": [], "daemons": [], "live": [],
                   "keep": args.keep}
    res = {"date": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
           "config": {"requests": args.requests, "warmup": args.warmup,
                      "connections": args.connections}, "runs": []}
    rc = 0
    try:
        for label, b in [("this", binary)] + ([("base", base)] if base else []):
            r = measure_binary(args, b, label, state, with_nginx=label == "this")
            r["label"] = label
            res["runs"].append(r)
    except (BenchError, subprocess.TimeoutExpired, OSError, json.JSONDecodeError,
            asyncio.IncompleteReadError) as e:
        log(f"error: {e}")
        for f in tmp.rglob("*.log"):
            log(f"{f} (last 5 lines):\n" +
                "\n".join(f.read_text(errors="replace").splitlines()[-5:]))
        rc = 1
    except KeyboardInterrupt:
        log("interrupted")
        rc = 130
    finally:
        cleanup(state)
    if rc == 0:
        if args.json:
            print(json.dumps(res, indent=2))
        else:
            print_table(res)
    return rc


if __name__ == "__main__":
    sys.exit(main())
