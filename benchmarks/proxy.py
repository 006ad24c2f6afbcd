#!/usr/bin/env python3
"""Benchmark Binky's reverse proxy against nginx and Caddy, with wrk.

Run from anywhere:

    python3 benchmarks/proxy.py                 # full run, about 5 min
    python3 benchmarks/proxy.py --duration 3 --reps 1   # quick run, about 40 s
    python3 benchmarks/proxy.py --json          # JSON on stdout instead of the table

Python 3 standard library only, plus wrk, nginx, caddy, node and git on PATH.
It uses the release binary at $CARGO_TARGET_DIR/release/binky (default
<repo>/target/release/binky) and runs `cargo build --release` first when that
binary is missing or older than src/; `--binary PATH` uses another one.

Two upstreams (nginx `return 200`, a Node `http.createServer`) are started by
a real daemon (`binky up bench` in throwaway git repos), and each is loaded
with wrk four ways: direct, through Binky's proxy, through nginx
(`proxy_pass` with upstream keep-alive) and through Caddy (`reverse_proxy`).
Every cell runs --reps times, interleaved; the report gives medians. All of
it happens in a fresh temporary folder under /tmp, removed at the end (the
daemon, worlds, nginx and Caddy are stopped first), also on error.

See benchmarks/README.md for what is measured and how to read it.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import resource
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from common import BenchError, ensure_binary, interrupt_on_signals, loadavg, log, pid_alive

REPO = Path(__file__).resolve().parent.parent
CLK_TCK = os.sysconf("SC_CLK_TCK")

UPSTREAMS = ["nginx", "node"]
PATHS = ["direct", "binky", "nginx", "caddy"]
# Projects (one throwaway repo each); the URL is up.bench.<project>.localhost.
PROJECT = {"nginx": "bkpng", "node": "bkpnode"}
NODE_BODY = "hello from a dev server\n"


# --------------------------------------------------------------------------
# Binary, tools and environment
# --------------------------------------------------------------------------


def tool(name: str) -> str:
    p = shutil.which(name) or shutil.which(name, path="/usr/sbin:/usr/bin:/sbin:/bin")
    if not p:
        raise BenchError(f"`{name}` is not installed (apt-get install {name})")
    return p


def free_port(taken: set[int]) -> int:
    while True:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port not in taken:
            taken.add(port)
            return port


def bench_env(home: Path, taken: set[int]) -> dict[str, str]:
    """The environment every binky process gets: no inherited BINKY_* but
    BINKY_PROXY_THREADS (to compare thread counts)."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("BINKY_") or k == "BINKY_PROXY_THREADS"}
    env.update(
        BINKY_HOME=str(home),
        BINKY_PROXY_PORT=str(free_port(taken)),
        BINKY_HTTPS_PORT=str(free_port(taken)),
        NO_COLOR="1",
    )
    return env


def run(binary: Path, env: dict[str, str], *args: str, check: bool = True,
        timeout: float = 60) -> subprocess.CompletedProcess:
    r = subprocess.run([str(binary), *args], env=env, capture_output=True, text=True,
                       timeout=timeout)
    if check and r.returncode != 0:
        raise BenchError(f"`binky {' '.join(args)}` exited {r.returncode}:\n{r.stdout}{r.stderr}")
    return r


def git(*args: str, cwd: Path) -> str:
    r = subprocess.run(["git", "-c", "user.name=bench", "-c", "user.email=bench@localhost",
                        *args], cwd=cwd, capture_output=True, text=True, timeout=60)
    if r.returncode != 0:
        raise BenchError(f"git {' '.join(args)} failed: {r.stderr}")
    return r.stdout


# --------------------------------------------------------------------------
# /proc readers
# --------------------------------------------------------------------------


def stat_fields(pid: int) -> list[str] | None:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()
    except (FileNotFoundError, ProcessLookupError):
        return None


def descendants(root: int) -> list[int]:
    """root and every process below it (by ppid), from one /proc scan."""
    children: dict[int, list[int]] = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            f = stat_fields(int(d))
            if f:
                children.setdefault(int(f[1]), []).append(int(d))
    out, todo = [], [root]
    while todo:
        p = todo.pop()
        out.append(p)
        todo.extend(children.get(p, []))
    return out


def cpu_ticks(pids: list[int]) -> int:
    total = 0
    for p in pids:
        f = stat_fields(p)
        if f:
            total += int(f[11]) + int(f[12])  # utime + stime
    return total


def thread_ticks(pid: int) -> dict[str, int]:
    """utime+stime per thread name (summed over threads of the same name)."""
    out: dict[str, int] = {}
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except FileNotFoundError:
        return out
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/stat") as f:
                raw = f.read()
        except FileNotFoundError:
            continue
        name = raw[raw.index("(") + 1: raw.rindex(")")]
        f = raw.rsplit(")", 1)[1].split()
        out[name] = out.get(name, 0) + int(f[11]) + int(f[12])
    return out


def sched_counts(pids: list[int]) -> tuple[int, int, int]:
    """(utime ticks, stime ticks, context switches) summed over pids and their threads."""
    ut = st = cs = 0
    for p in pids:
        f = stat_fields(p)
        if not f:
            continue
        ut += int(f[11])
        st += int(f[12])
        try:
            tids = os.listdir(f"/proc/{p}/task")
        except FileNotFoundError:
            continue
        for tid in tids:
            try:
                with open(f"/proc/{p}/task/{tid}/status") as fh:
                    for line in fh:
                        if line.split(":")[0].endswith("ctxt_switches"):
                            cs += int(line.split()[1])
            except FileNotFoundError:
                continue
    return ut, st, cs


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


# --------------------------------------------------------------------------
# Processes we start
# --------------------------------------------------------------------------


def wait_http(port: int, host: str | None = None, timeout: float = 20.0,
              proc: subprocess.Popen | None = None) -> str:
    deadline = time.monotonic() + timeout
    last = ""
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise BenchError(f"{proc.args[0]} exited {proc.returncode} while starting")
        req = urllib.request.Request(f"http://127.0.0.1:{port}/")
        if host:
            req.add_header("Host", host)
        try:
            with urllib.request.urlopen(req, timeout=2) as r:
                if r.status == 200:
                    return r.read().decode(errors="replace")
        except OSError as e:
            last = str(e)
        time.sleep(0.05)
    raise BenchError(f"127.0.0.1:{port} (Host {host}) did not answer 200 in {timeout} s: {last}")


def stop_proc(p: subprocess.Popen) -> None:
    if p.poll() is not None:
        return
    try:
        p.terminate()
        p.wait(timeout=5)
    except subprocess.TimeoutExpired:
        p.kill()
        p.wait(timeout=5)
    except ProcessLookupError:
        pass


NGINX_UPSTREAM_CONF = """\
# The trivial upstream, run by binky: one worker, `return 200`.
worker_processes 1;
pid {dir}/nginx.pid;
error_log stderr warn;
events {{ worker_connections 4096; }}
http {{
    access_log off;
    client_body_temp_path {dir}/cb; proxy_temp_path {dir}/px;
    fastcgi_temp_path {dir}/fc; uwsgi_temp_path {dir}/uw; scgi_temp_path {dir}/sc;
    keepalive_requests 1000000;
    server {{
        listen 127.0.0.1:@PORT@;
        location / {{ default_type text/plain; return 200 "ok"; }}
    }}
}}
"""

NGINX_PROXY_CONF = """\
# nginx as the reverse proxy under test, the way it is tuned for this job:
# HTTP/1.1 upstream keep-alive. worker_processes auto = one per core.
worker_processes auto;
pid {dir}/nginx.pid;
error_log stderr warn;
events {{ worker_connections 4096; }}
http {{
    access_log off;
    client_body_temp_path {dir}/cb; proxy_temp_path {dir}/px;
    fastcgi_temp_path {dir}/fc; uwsgi_temp_path {dir}/uw; scgi_temp_path {dir}/sc;
    keepalive_requests 1000000;
{servers}
}}
"""

# nginx doing the job Binky does: the client's Host passed through unchanged
# and the forwarding headers set (X-Forwarded-For/-Proto/-Host and RFC 7239
# Forwarded), the usual dev-proxy snippet. Without them nginx would send the
# upstream less to parse than Binky (and Caddy, which sets X-Forwarded-*).
NGINX_PROXY_SERVER = """\
    upstream {name} {{ server 127.0.0.1:{up}; keepalive 64; keepalive_requests 1000000; }}
    server {{
        listen 127.0.0.1:{port};
        location / {{
            proxy_pass http://{name};
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_set_header Host $http_host;
            proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for;
            proxy_set_header X-Forwarded-Proto $scheme;
            proxy_set_header X-Forwarded-Host $http_host;
            proxy_set_header Forwarded "for=$remote_addr;host=\\"$http_host\\";proto=$scheme";
        }}
    }}
"""

CADDYFILE = """\
{{
    admin off
    auto_https off
    storage file_system {dir}/data
}}
{sites}
"""

CADDY_SITE = """\
http://:{port} {{
    bind 127.0.0.1
    reverse_proxy 127.0.0.1:{up} {{
        # Like nginx's `keepalive 64`: Caddy keeps 32 idle upstream connections
        # per host by default, fewer than wrk's 64, and then churns connections.
        transport http {{
            keepalive_idle_conns_per_host 64
        }}
    }}
}}
"""


def node_cmd(node: str) -> str:
    js = ("require('http').createServer((q,s)=>{s.writeHead(200,"
          "{'content-type':'text/plain'});s.end(" + json.dumps(NODE_BODY) + ")})"
          ".listen(+process.env.PORT,'127.0.0.1')")
    return f"exec {node} -e \"{js.replace(chr(34), chr(92) + chr(34))}\""


def binky_toml(project: str, cmd: str) -> str:
    # A TOML basic string: escape backslashes and quotes.
    esc = cmd.replace("\\", "\\\\").replace('"', '\\"')
    return (f'[project]\nname = "{project}"\n\n'
            f'[services.up]\ncmd = "{esc}"\nurl = "up"\n')


# --------------------------------------------------------------------------
# wrk
# --------------------------------------------------------------------------

UNIT = {"us": 1e-3, "ms": 1.0, "s": 1000.0, "m": 60000.0}


def to_ms(v: str) -> float:
    m = re.fullmatch(r"([\d.]+)(us|ms|s|m)", v)
    if not m:
        raise BenchError(f"cannot read wrk latency {v!r}")
    return float(m.group(1)) * UNIT[m.group(2)]


def parse_wrk(out: str) -> dict:
    res: dict = {}
    m = re.search(r"Requests/sec:\s+([\d.]+)", out)
    if not m:
        raise BenchError(f"no Requests/sec in wrk output:\n{out}")
    res["rps"] = float(m.group(1))
    m = re.search(r"(\d+) requests in", out)
    res["requests"] = int(m.group(1)) if m else None
    for pct in ("50", "75", "90", "99"):
        m = re.search(rf"^\s+{pct}(?:\.000)?%\s+(\S+)", out, re.M)
        res[f"p{pct}_ms"] = round(to_ms(m.group(1)), 3) if m else None
    m = re.search(r"Non-2xx or 3xx responses:\s+(\d+)", out)
    res["non_2xx"] = int(m.group(1)) if m else 0
    m = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", out)
    res["socket_errors"] = sum(int(x) for x in m.groups()) if m else 0
    return res


def wrk(wrk_bin: str, args: argparse.Namespace, port: int, host: str | None,
        duration: float, groups: dict[str, list[int]]) -> dict:
    argv = [wrk_bin, "-t", str(args.threads), "-c", str(args.connections),
            "-d", f"{duration:g}s", "--latency"]
    if host:
        argv += ["-H", f"Host: {host}"]
    argv.append(f"http://127.0.0.1:{port}/")
    proxy_groups = ("binky", "nginx-proxy", "caddy")
    sched0 = {g: sched_counts(groups[g]) for g in proxy_groups}
    before = {g: cpu_ticks(p) for g, p in groups.items()}
    threads0 = thread_ticks(groups["binky"][0])
    ru0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.monotonic()
    r = subprocess.run(argv, capture_output=True, text=True, timeout=duration + 60)
    wall = time.monotonic() - t0
    ru1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    after = {g: cpu_ticks(p) for g, p in groups.items()}
    threads1 = thread_ticks(groups["binky"][0])
    sched1 = {g: sched_counts(groups[g]) for g in proxy_groups}
    if r.returncode != 0:
        raise BenchError(f"wrk exited {r.returncode}: {r.stderr}{r.stdout}")
    res = parse_wrk(r.stdout)
    cpu = {g: (after[g] - before[g]) / CLK_TCK for g in groups}
    cpu["wrk"] = (ru1.ru_utime - ru0.ru_utime) + (ru1.ru_stime - ru0.ru_stime)
    res["wall_s"] = round(wall, 3)
    # CPU seconds per group over the cell, as % of one core.
    res["cpu_pct"] = {g: round(100 * s / wall, 1) for g, s in cpu.items()}
    res["binky_threads_pct"] = {n: round(100 * (threads1.get(n, 0) - v) / CLK_TCK / wall, 1)
                                for n, v in threads0.items()
                                if threads1.get(n, 0) - v > 0}
    # Per proxy: user and system CPU % and context switches per request.
    nreq = max(1, res["requests"] or 1)
    res["proxy_sched"] = {g: {"user_pct": round(100 * (sched1[g][0] - sched0[g][0]) / CLK_TCK
                                                / wall, 1),
                              "sys_pct": round(100 * (sched1[g][1] - sched0[g][1]) / CLK_TCK
                                               / wall, 1),
                              "ctxsw_per_req": round((sched1[g][2] - sched0[g][2]) / nreq, 3)}
                          for g in proxy_groups}
    res["raw"] = r.stdout
    return res


# --------------------------------------------------------------------------
# The benchmark
# --------------------------------------------------------------------------


def benchmark(args: argparse.Namespace, binary: Path, state: dict) -> dict:
    tmp: Path = state["tmp"]
    taken: set[int] = state["taken"]
    env: dict[str, str] = state["env"]
    wrk_bin, nginx, caddy, node = tool("wrk"), tool("nginx"), tool("caddy"), tool("node")
    res: dict = {
        "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "machine": {"cpus": os.cpu_count(), "cpu_model": cpu_model(),
                    "kernel": platform.release(), "loadavg_start": loadavg()},
        "binary": str(binary),
        "config": {"duration_s": args.duration, "warmup_s": args.warmup, "reps": args.reps,
                   "connections": args.connections, "threads": args.threads},
        "versions": {
            "binky": run(binary, env, "--version").stdout.strip(),
            "nginx": subprocess.run([nginx, "-v"], capture_output=True,
                                    text=True).stderr.strip(),
            "caddy": subprocess.run([caddy, "version"], capture_output=True,
                                    text=True).stdout.strip().split()[0],
            "node": subprocess.run([node, "--version"], capture_output=True,
                                   text=True).stdout.strip(),
            "wrk": (subprocess.run([wrk_bin, "-v"], capture_output=True, text=True).stdout
                    .strip().splitlines() or ["?"])[0],
        },
    }
    proxy_port = int(env["BINKY_PROXY_PORT"])

    # 1. The daemon, and one throwaway repo per upstream with a one-service binky.toml.
    run(binary, env, "daemon", "start")
    r = run(binary, env, "daemon", "status", "--json")
    pid = int(json.loads(r.stdout)["pid"])
    state["pid"] = pid
    if not os.path.samefile(f"/proc/{pid}/exe", binary):
        raise BenchError(f"daemon pid {pid} runs {os.readlink(f'/proc/{pid}/exe')}, not {binary}")
    ngu = tmp / "ngu"
    ngu.mkdir()
    (ngu / "nginx.conf.in").write_text(NGINX_UPSTREAM_CONF.format(dir=ngu))
    cmds = {
        "nginx": (f"sed s/@PORT@/$PORT/ {ngu}/nginx.conf.in > {ngu}/nginx.conf && "
                  f"exec {nginx} -p {ngu} -c {ngu}/nginx.conf -e stderr -g 'daemon off;'"),
        "node": node_cmd(node),
    }
    upstream_port: dict[str, int] = {}
    upstream_pids: dict[str, list[int]] = {}
    for u in UPSTREAMS:
        repo = tmp / f"r-{u}"
        repo.mkdir()
        git("init", "-q", "-b", "main", cwd=repo)
        (repo / "binky.toml").write_text(binky_toml(PROJECT[u], cmds[u]))
        git("add", "binky.toml", cwd=repo)
        git("commit", "-qm", "bench", cwd=repo)
        state["projects"].append(repo)
        run(binary, env, "-p", str(repo), "check", str(repo / "binky.toml"))
        run(binary, env, "-p", str(repo), "up", "bench", timeout=60)
        st = json.loads(run(binary, env, "status", "--json").stdout)
        svc = find_service(st, PROJECT[u], "bench", "up")
        if not svc or not svc.get("port") or not svc.get("pid"):
            raise BenchError(f"no running `up` service with a port for {u} in status: {svc}")
        upstream_port[u] = int(svc["port"])
        body = wait_http(upstream_port[u])
        upstream_pids[u] = descendants(int(svc["pid"]))
        log(f"upstream {u}: pid {svc['pid']} on :{upstream_port[u]}, "
            f"{len(upstream_pids[u])} process(es), body {body!r}")
    res["upstreams"] = {u: {"port": upstream_port[u], "cmd": cmds[u]} for u in UPSTREAMS}

    # 2. nginx and Caddy as reverse proxies, one instance each, one port per upstream.
    ngp = tmp / "ngp"
    ngp.mkdir()
    front = {u: {"nginx": free_port(taken), "caddy": free_port(taken)} for u in UPSTREAMS}
    servers = "".join(NGINX_PROXY_SERVER.format(name=f"u_{u}", up=upstream_port[u],
                                                port=front[u]["nginx"]) for u in UPSTREAMS)
    (ngp / "nginx.conf").write_text(NGINX_PROXY_CONF.format(dir=ngp, servers=servers))
    p = subprocess.Popen([nginx, "-p", str(ngp), "-c", str(ngp / "nginx.conf"), "-e", "stderr",
                          "-g", "daemon off;"], stdout=subprocess.DEVNULL,
                         stderr=open(ngp / "stderr.log", "w"))
    state["live"].append(p)
    cad = tmp / "cad"
    cad.mkdir()
    sites = "".join(CADDY_SITE.format(port=front[u]["caddy"], up=upstream_port[u])
                    for u in UPSTREAMS)
    (cad / "Caddyfile").write_text(CADDYFILE.format(dir=cad, sites=sites))
    cenv = dict(os.environ, HOME=str(cad), XDG_DATA_HOME=str(cad / "xdg-data"),
                XDG_CONFIG_HOME=str(cad / "xdg-config"))
    c = subprocess.Popen([caddy, "run", "--config", str(cad / "Caddyfile"),
                          "--adapter", "caddyfile"], env=cenv, stdout=subprocess.DEVNULL,
                         stderr=open(cad / "stderr.log", "w"))
    state["live"].append(c)
    for u in UPSTREAMS:
        wait_http(front[u]["nginx"], proc=p)
        wait_http(front[u]["caddy"], proc=c)
        wait_http(proxy_port, host=f"up.bench.{PROJECT[u]}.localhost")
    groups = {"binky": [pid], "nginx-proxy": descendants(p.pid), "caddy": [c.pid],
              **{f"up-{u}": upstream_pids[u] for u in UPSTREAMS}}
    res["pids"] = groups

    def target(u: str, path: str) -> tuple[int, str | None]:
        if path == "direct":
            return upstream_port[u], None
        if path == "binky":
            return proxy_port, f"up.bench.{PROJECT[u]}.localhost"
        return front[u][path], None

    cells = [(u, path) for u in args.upstreams for path in args.paths]
    # 3. Warm-up: every cell once, short, not recorded (fills the proxies' pools).
    log(f"warm-up: {len(cells)} cells x {args.warmup:g} s")
    for u, path in cells:
        port, host = target(u, path)
        wrk(wrk_bin, args, port, host, args.warmup, groups)

    # 4. Timed: reps rounds, each visiting every cell in a rotated order.
    samples: dict[str, list[dict]] = {f"{u}/{path}": [] for u, path in cells}
    total = args.reps * len(cells)
    n = 0
    for rep in range(args.reps):
        k = rep * 3 % len(cells)
        for u, path in cells[k:] + cells[:k]:
            n += 1
            port, host = target(u, path)
            s = wrk(wrk_bin, args, port, host, args.duration, groups)
            if not args.raw:
                s.pop("raw")
            samples[f"{u}/{path}"].append(s)
            log(f"[{n}/{total}] {u:5} via {path:6} {s['rps']:9.0f} req/s  p50 {s['p50_ms']} "
                f"p99 {s['p99_ms']} ms  cpu% {s['cpu_pct']}")
    res["loadavg_end"] = loadavg()
    res["samples"] = samples

    # 5. Medians per cell; ratios to direct; verdicts.
    table: dict[str, dict] = {}
    for key, ss in samples.items():
        u = key.split("/")[0]
        med = {m: statistics.median(s[m] for s in ss) for m in ("rps", "p50_ms", "p99_ms")}
        med["errors"] = sum(s["non_2xx"] + s["socket_errors"] for s in ss)
        med["cpu_pct"] = {g: statistics.median(s["cpu_pct"][g] for s in ss)
                          for g in ss[0]["cpu_pct"]}
        names = set().union(*(s["binky_threads_pct"] for s in ss))
        med["binky_threads_pct"] = {t: statistics.median(s["binky_threads_pct"].get(t, 0.0)
                                                         for s in ss) for t in sorted(names)}
        grp = {"binky": "binky", "nginx": "nginx-proxy", "caddy": "caddy"}.get(key.split("/")[1])
        if grp:
            med["proxy_sched"] = {k: statistics.median(s["proxy_sched"][grp][k] for s in ss)
                                  for k in ("user_pct", "sys_pct", "ctxsw_per_req")}
        table[key] = med
    for key, med in table.items():
        direct = table.get(key.split("/")[0] + "/direct", {}).get("rps")
        med["ratio_to_direct"] = round(med["rps"] / direct, 3) if direct else None
        # CPU per request, µs, of the proxy in the path (and of everything measured).
        path = key.split("/")[1]
        grp = {"binky": "binky", "nginx": "nginx-proxy", "caddy": "caddy"}.get(path)
        if grp and med["rps"]:
            med["proxy_cpu_us_per_req"] = round(med["cpu_pct"][grp] / 100 / med["rps"] * 1e6, 1)
    res["medians"] = table
    verdicts = {}
    for u in args.upstreams:
        if f"{u}/binky" not in table or f"{u}/nginx" not in table:
            continue
        b, ng = table[f"{u}/binky"], table[f"{u}/nginx"]
        verdicts[u] = {
            "binky_rps": b["rps"], "nginx_rps": ng["rps"],
            "rps_ratio": round(b["rps"] / ng["rps"], 3),
            "binky_p99_ms": b["p99_ms"], "nginx_p99_ms": ng["p99_ms"],
            "pass": b["rps"] >= ng["rps"] and b["p99_ms"] <= ng["p99_ms"],
        }
    res["verdicts"] = verdicts
    return res


def find_service(status: dict, project: str, world: str, service: str) -> dict | None:
    """Looks through `binky status --json` for one service, whatever the nesting."""
    def walk(node, ctx):
        if isinstance(node, dict):
            c = dict(ctx)
            if "worlds" in node and "name" in node:
                c["project"] = node["name"]
            if "services" in node and "name" in node:
                c["world"] = node["name"]
            if (node.get("name") == service and "port" in node and
                    c.get("project") == project and c.get("world") == world):
                return node
            for v in node.values():
                hit = walk(v, c)
                if hit:
                    return hit
        elif isinstance(node, list):
            for v in node:
                hit = walk(v, ctx)
                if hit:
                    return hit
        return None
    return walk(status, {})


# --------------------------------------------------------------------------
# Report
# --------------------------------------------------------------------------


def print_table(res: dict) -> None:
    m = res["machine"]
    cfg = res["config"]
    print(f"Proxy benchmark, {res['date']}, {m['cpus']} CPUs ({m['cpu_model']}), "
          f"load {m['loadavg_start'][0]:.2f} -> {res['loadavg_end'][0]:.2f}")
    print(f"  {res['versions']['binky']}; {res['versions']['nginx']}; caddy "
          f"{res['versions']['caddy']}; node {res['versions']['node']}; "
          f"{res['versions']['wrk']}")
    print(f"  wrk -t{cfg['threads']} -c{cfg['connections']} -d{cfg['duration_s']:g}s "
          f"--latency, keep-alive; medians of {cfg['reps']} interleaved runs per cell")
    print()
    print(f"  {'upstream':9}{'path':8}{'req/s':>10}{'x direct':>10}{'p50 ms':>9}"
          f"{'p99 ms':>9}{'errors':>8}   CPU % of one core (proxy / upstream / wrk)")
    for key, med in res["medians"].items():
        u, path = key.split("/")
        cpu = med["cpu_pct"]
        grp = {"binky": "binky", "nginx": "nginx-proxy", "caddy": "caddy"}.get(path)
        proxy = f"{cpu[grp]:5.0f}" if grp else "    -"
        per = (f"  ({med['proxy_cpu_us_per_req']:.1f} µs/req)"
               if "proxy_cpu_us_per_req" in med else "")
        ratio = med["ratio_to_direct"]
        print(f"  {u:9}{path:8}{med['rps']:10.0f}"
              f"{f'{ratio:10.2f}' if ratio is not None else '         -'}"
              f"{med['p50_ms']:9.2f}{med['p99_ms']:9.2f}{med['errors']:8d}   "
              f"{proxy} / {cpu['up-' + u]:4.0f} / {cpu['wrk']:4.0f}{per}")
    print()
    print("  Proxy CPU split and context switches (medians):")
    for key, med in res["medians"].items():
        if "proxy_sched" in med:
            ps = med["proxy_sched"]
            print(f"    {key:13} user {ps['user_pct']:5.1f} %  sys {ps['sys_pct']:5.1f} %  "
                  f"{ps['ctxsw_per_req']:.3f} context switches per request")
    print()
    print("  Binky's proxy threads, CPU % of one core (medians):")
    for key, med in res["medians"].items():
        if key.endswith("/binky"):
            t = ", ".join(f"{n} {v:.0f}" for n, v in med["binky_threads_pct"].items())
            print(f"    {key.split('/')[0]:6} {t}")
    print()
    print("Target: Binky's proxy at or above nginx's throughput, p99 no worse")
    for u, v in res["verdicts"].items():
        print(f"  {u:6} binky {v['binky_rps']:8.0f} req/s vs nginx {v['nginx_rps']:8.0f} "
              f"({v['rps_ratio']:.2f}x); p99 {v['binky_p99_ms']:.2f} vs "
              f"{v['nginx_p99_ms']:.2f} ms   {'PASS' if v['pass'] else 'MISS'}")


# --------------------------------------------------------------------------
# Main
# --------------------------------------------------------------------------


def cleanup(binary: Path, state: dict) -> None:
    for p in state["live"]:
        try:
            stop_proc(p)
        except Exception as e:  # noqa: BLE001 - keep cleaning up
            log(f"warning: stopping {p.args[0]}: {e}")
    env = state["env"]
    for repo in state["projects"]:
        try:
            r = run(binary, env, "-p", str(repo), "remove", "--force", "bench", check=False)
            if r.returncode != 0:
                log(f"warning: remove bench in {repo}: {r.stderr.strip()}")
        except subprocess.TimeoutExpired:
            log(f"warning: remove bench in {repo} timed out")
    pid = state["pid"]
    try:
        run(binary, env, "daemon", "stop", check=False, timeout=20)
    except subprocess.TimeoutExpired:
        log("warning: `binky daemon stop` timed out")
    if pid is not None:
        deadline = time.monotonic() + 5
        while pid_alive(pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        if pid_alive(pid):
            log(f"warning: daemon pid {pid} still alive after stop; sending SIGKILL")
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    if state["keep"]:
        log(f"kept {state['tmp']}")
        return
    shutil.rmtree(state["tmp"], ignore_errors=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--binary", help="binky binary to test (default: "
                    "$CARGO_TARGET_DIR/release/binky, built when missing or stale)")
    ap.add_argument("--build", action="store_true",
                    help="run `cargo build --release` first even if the binary is current")
    ap.add_argument("--duration", type=float, default=10, help="seconds per wrk run (10)")
    ap.add_argument("--warmup", type=float, default=2,
                    help="seconds of untimed wrk per cell first (2)")
    ap.add_argument("--reps", type=int, default=3, help="runs per cell, interleaved (3)")
    ap.add_argument("--connections", type=int, default=64, help="wrk -c (64)")
    ap.add_argument("--threads", type=int, default=2, help="wrk -t (2)")
    ap.add_argument("--json", action="store_true",
                    help="print the JSON results on stdout instead of the table")
    ap.add_argument("--out", help="results file (default /tmp/binky-bench-proxy-<time>.json)")
    ap.add_argument("--raw", action="store_true", help="include wrk's output in the JSON")
    ap.add_argument("--keep", action="store_true",
                    help="keep the temporary folder (processes are still stopped)")
    ap.add_argument("--upstreams", default=",".join(UPSTREAMS),
                    help="comma-separated upstreams to load (default: all)")
    ap.add_argument("--paths", default=",".join(PATHS),
                    help="comma-separated paths to load (default: all); the verdict needs "
                    "binky and nginx, the ratios direct")
    args = ap.parse_args()
    args.upstreams = [u for u in args.upstreams.split(",") if u]
    args.paths = [p for p in args.paths.split(",") if p]
    for name, got, known in (("--upstreams", args.upstreams, UPSTREAMS),
                             ("--paths", args.paths, PATHS)):
        bad = [x for x in got if x not in known]
        if bad or not got:
            ap.error(f"{name}: unknown {', '.join(bad) or 'empty list'} "
                     f"(choose from {', '.join(known)})")
    if args.reps < 1 or args.duration < 1:
        ap.error("--reps and --duration must be at least 1")

    interrupt_on_signals()

    try:
        binary = ensure_binary(args.binary, args.build)
    except BenchError as e:
        log(f"error: {e}")
        return 2

    # Short name: BINKY_HOME holds the daemon's socket (path length limit).
    tmp = Path(tempfile.mkdtemp(prefix="bkp", dir="/tmp"))
    home = tmp / "h"
    home.mkdir()
    taken: set[int] = set()
    state: dict = {"tmp": tmp, "taken": taken, "env": bench_env(home, taken), "pid": None,
                   "projects": [], "live": [], "keep": args.keep}
    res: dict | None = None
    rc = 0
    try:
        res = benchmark(args, binary, state)
    except (BenchError, subprocess.TimeoutExpired, OSError, KeyError,
            json.JSONDecodeError) as e:
        log(f"error: {e}")
        for f in (home / "daemon.log", tmp / "ngp" / "stderr.log", tmp / "cad" / "stderr.log"):
            if f.exists():
                log(f"{f} (last 10 lines):\n" +
                    "\n".join(f.read_text(errors="replace").splitlines()[-10:]))
        rc = 1
    except KeyboardInterrupt:
        log("interrupted")
        rc = 130
    finally:
        cleanup(binary, state)
    if res is None:
        return rc
    out = Path(args.out or time.strftime("/tmp/binky-bench-proxy-%Y%m%d-%H%M%S.json"))
    out.write_text(json.dumps(res, indent=2) + "\n")
    if args.json:
        print(json.dumps(res, indent=2))
    else:
        print_table(res)
    log(f"results written to {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
