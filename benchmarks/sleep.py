#!/usr/bin/env python3
"""Idle sleep: what waking costs the first request, and what sleeping saves.

Run from anywhere:

    python3 benchmarks/sleep.py              # 10 wake-ups, 15 worlds
    python3 benchmarks/sleep.py --runs 3 --worlds 5   # quick
    python3 benchmarks/sleep.py --json       # JSON on stdout instead of the table

Python 3 standard library only, Linux (/proc). Uses the release binary as the
other benchmarks do (`cargo build --release` when missing or stale;
`--binary PATH` for another). Everything runs in a fresh BINKY_HOME and a
throwaway clone of this repository under /tmp, whose examples/hello gets
`idle_after = "2s"` (committed in the clone only); both are removed at the end.

What is measured, in one run:
  (a) first-request latency: a GET of examples/hello's `web` URL through the
      proxy when the world is asleep (the proxy holds it while the daemon
      wakes db, api and web in order) against the same GET to the same
      world running, interleaved: each round times running GETs, waits for
      the world to fall asleep, then times the GET that wakes it. Every
      answer must be the service's own 200.
  (b) memory of N idle worlds: N hello worlds up with `--idle-after off`
      (none sleeps), then the same worlds with the project's 2 s: the PSS
      of every process in the worlds' process groups, the daemon's RSS,
      and MemAvailable, each read after the worlds settle.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import (BenchError, ensure_binary, free_port, interrupt_on_signals,  # noqa: E402
                    loadavg, log)

REPO = Path(__file__).resolve().parent.parent
IDLE = "2s"


def bench_env(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("BINKY_")}
    env.update(BINKY_HOME=str(home), BINKY_PROXY_PORT=str(free_port()),
               BINKY_HTTPS_PORT=str(free_port()), NO_COLOR="1")
    return env


def binky(binary: Path, env: dict, cwd: Path, *args: str, timeout: float = 180) -> str:
    r = subprocess.run([str(binary), *args], env=env, cwd=cwd, capture_output=True, text=True,
                       timeout=timeout, stdin=subprocess.DEVNULL)
    if r.returncode != 0:
        raise BenchError(f"`binky {' '.join(args)}` exited {r.returncode}:\n{r.stdout}{r.stderr}")
    return r.stdout


def worlds(binary: Path, env: dict, cwd: Path) -> dict[str, dict]:
    rep = json.loads(binky(binary, env, cwd, "status", "--json"))
    return {w["name"]: w for p in rep["projects"] for w in p["worlds"]}


def wait_state(binary: Path, env: dict, cwd: Path, names: list[str], state: str,
               timeout: float = 120) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        ws = worlds(binary, env, cwd)
        if all(ws.get(n, {}).get("state") == state for n in names):
            return
        time.sleep(0.1)
    raise BenchError(f"{names} did not all become {state}")


def get_ms(port: int, host: str) -> float:
    t0 = time.perf_counter()
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    c.request("GET", "/", headers={"Host": host})
    r = c.getresponse()
    body = r.read()
    ms = (time.perf_counter() - t0) * 1000
    c.close()
    if r.status != 200:
        raise BenchError(f"GET {host} answered {r.status}: {body[:300]!r}")
    return ms


def group_pss_kib(pgids: set[int]) -> int:
    """PSS of every process whose process group is one of `pgids`, KiB."""
    total = 0
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            stat = (d / "stat").read_text()
            pgrp = int(stat.rsplit(")", 1)[1].split()[2])
            if pgrp not in pgids:
                continue
            for line in (d / "smaps_rollup").read_text().splitlines():
                if line.startswith("Pss:"):
                    total += int(line.split()[1])
        except (OSError, ValueError, IndexError):
            continue
    return total


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def mem_available_kib() -> int:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1])
    return 0


def memory(binary: Path, env: dict, cwd: Path, names: list[str], daemon: int) -> dict:
    time.sleep(3)  # let the worlds settle after their last request
    ws = worlds(binary, env, cwd)
    pgids = {s["pid"] for n in names for s in ws[n]["services"] if s.get("pid")}
    return {
        "states": sorted({ws[n]["state"] for n in names}),
        "processes_pss_mib": round(group_pss_kib(pgids) / 1024, 1),
        "daemon_rss_mib": round(rss_kib(daemon) / 1024, 1),
        "mem_available_mib": round(mem_available_kib() / 1024),
    }


def benchmark(args: argparse.Namespace, binary: Path, state: dict) -> dict:
    tmp = Path(tempfile.mkdtemp(prefix="bks", dir="/tmp"))
    state["tmp"] = tmp
    home = tmp / "home"
    clone = tmp / "repo"
    subprocess.run(["git", "clone", "-q", str(REPO), str(clone)], check=True, timeout=120)
    hello = clone / "examples/hello"
    toml = hello / "binky.toml"
    toml.write_text(toml.read_text().replace('name = "hello"\n',
                                             f'name = "hello"\nidle_after = "{IDLE}"\n', 1))
    subprocess.run(["git", "-c", "user.name=bench", "-c", "user.email=bench@localhost",
                    "commit", "-qam", "bench: idle_after"], cwd=clone, check=True)
    env = bench_env(home)
    state["env"], state["cwd"] = env, hello
    binky(binary, env, hello, "daemon", "start")
    daemon = json.loads(binky(binary, env, hello, "daemon", "status", "--json"))["pid"]
    port = int(env["BINKY_PROXY_PORT"])

    log(f"first request: {args.runs} wake-ups of world `wake`")
    binky(binary, env, hello, "up", "wake")
    host = "web.wake.hello.localhost"
    running, asleep = [], []
    for i in range(args.runs):
        get_ms(port, host)  # awake, and warm
        running.append(statistics.median(get_ms(port, host) for _ in range(5)))
        wait_state(binary, env, hello, ["wake"], "sleeping")
        asleep.append(get_ms(port, host))
        log(f"  round {i + 1}: running {running[-1]:.1f} ms, asleep {asleep[-1]:.0f} ms")
    binky(binary, env, hello, "remove", "wake")

    names = [f"w{i:02d}" for i in range(args.worlds)]
    log(f"memory: {args.worlds} worlds up, none sleeping")
    for n in names:
        binky(binary, env, hello, "up", n, "--idle-after", "off")
    for n in names:
        get_ms(port, f"web.{n}.hello.localhost")
    awake = memory(binary, env, hello, names, daemon)
    log(f"memory: the same worlds with idle_after = {IDLE}")
    for n in names:
        binky(binary, env, hello, "up", n, "--idle-after", "default")
    wait_state(binary, env, hello, names, "sleeping")
    slept = memory(binary, env, hello, names, daemon)
    return {
        "binary": str(binary),
        "loadavg": loadavg(),
        "first_request": {
            "runs": args.runs,
            "running_median_ms": round(statistics.median(running), 2),
            "asleep_median_ms": round(statistics.median(asleep), 1),
            "asleep_min_ms": round(min(asleep), 1),
            "asleep_max_ms": round(max(asleep), 1),
            "ratio": round(statistics.median(asleep) / statistics.median(running), 1),
        },
        "idle_worlds": {"worlds": args.worlds, "awake": awake, "sleeping": slept},
    }


def cleanup(binary: Path, state: dict) -> None:
    env, cwd = state.get("env"), state.get("cwd")
    if env and cwd:
        for n in list(worlds(binary, env, cwd)) if Path(env["BINKY_HOME"]).exists() else []:
            subprocess.run([str(binary), "remove", n, "--force"], env=env, cwd=cwd,
                           capture_output=True, timeout=120)
        subprocess.run([str(binary), "daemon", "stop"], env=env, cwd=cwd,
                       capture_output=True, timeout=60)
    if state.get("tmp"):
        shutil.rmtree(state["tmp"], ignore_errors=True)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--runs", type=int, default=10)
    p.add_argument("--worlds", type=int, default=15)
    p.add_argument("--binary")
    p.add_argument("--build", action="store_true")
    p.add_argument("--json", action="store_true")
    args = p.parse_args()
    interrupt_on_signals()
    binary = ensure_binary(args.binary, args.build)
    state: dict = {}
    try:
        res = benchmark(args, binary, state)
    except BenchError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    finally:
        try:
            cleanup(binary, state)
        except Exception as e:  # noqa: BLE001 - best effort; report and go on
            print(f"cleanup: {e}", file=sys.stderr)
    if args.json:
        print(json.dumps(res, indent=2))
        return 0
    f, m = res["first_request"], res["idle_worlds"]
    print(f"first request, examples/hello `web` ({f['runs']} rounds):")
    print(f"  running  median {f['running_median_ms']} ms")
    print(f"  asleep   median {f['asleep_median_ms']} ms "
          f"[{f['asleep_min_ms']}–{f['asleep_max_ms']}]  ({f['ratio']}× running)")
    print(f"{m['worlds']} idle worlds:          awake        sleeping")
    for k in ("processes_pss_mib", "daemon_rss_mib", "mem_available_mib"):
        print(f"  {k:<20} {m['awake'][k]:>10}   {m['sleeping'][k]:>10}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
