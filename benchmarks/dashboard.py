#!/usr/bin/env python3
"""What watching costs: `binky dashboard` idle with 15 worlds running, and the
daemon's CPU with 3 subscribers attached while nothing changes.

    python3 benchmarks/dashboard.py                  # 60 s windows
    python3 benchmarks/dashboard.py --seconds 10     # quick run
    python3 benchmarks/dashboard.py --json

Python 3 standard library, tmux (the dashboard needs a terminal) and the
release binary (built when missing or older than src/). Everything runs in a
fresh BINKY_HOME and a throwaway git repository under /tmp, removed at the
end (worlds removed, daemon stopped), also on error.

Windows, one after another, each `--seconds` long:
1. daemon alone, 15 worlds running, nobody attached (its idle figure);
2. the same with 3 followers attached (`binky events -f` twice and
   `binky logs -f` of a quiet world): the daemon's CPU should not move;
3. `binky dashboard` in a 120x40 tmux window: its CPU and RSS (it reads
   the status every 5 s while worlds run: the one timer it has).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import BenchError, cpu_ticks, ensure_binary, free_port, loadavg, log

CLK_TCK = os.sysconf("SC_CLK_TCK")
WORLDS = 15
# The goals.
TARGET_DASHBOARD_CPU_PCT = 0.5
TARGET_DASHBOARD_RSS_MIB = 30.0


def rss_mib(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def window(pids: dict[str, int], seconds: float) -> dict[str, float]:
    """CPU use of each pid over `seconds`, percent of one core."""
    before = {k: cpu_ticks(p) for k, p in pids.items()}
    t0 = time.monotonic()
    time.sleep(seconds)
    wall = time.monotonic() - t0
    return {
        k: round((cpu_ticks(p) - before[k]) / CLK_TCK / wall * 100, 3)
        for k, p in pids.items()
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=60)
    ap.add_argument("--binary")
    ap.add_argument("--build", action="store_true")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    if not shutil.which("tmux"):
        raise BenchError("tmux is not installed")
    binary = ensure_binary(args.binary, args.build)
    tmp = Path(tempfile.mkdtemp(prefix="bkdash", dir="/tmp"))
    home, repo = tmp / "h", tmp / "repo"
    env = {k: v for k, v in os.environ.items() if not k.startswith("BINKY_")}
    env.update(BINKY_HOME=str(home), BINKY_PROXY_PORT=str(free_port()),
               BINKY_HTTPS_PORT=str(free_port()), NO_COLOR="1")
    tmux = ["tmux", "-S", str(tmp / "tmux.sock"), "-f", "/dev/null"]
    followers: list[subprocess.Popen] = []

    def binky(*a: str, check: bool = True) -> subprocess.CompletedProcess:
        r = subprocess.run([str(binary), *a], cwd=repo, env=env,
                           capture_output=True, text=True, timeout=120)
        if check and r.returncode != 0:
            raise BenchError(f"binky {' '.join(a)}: {r.stdout}{r.stderr}")
        return r

    try:
        repo.mkdir()
        subprocess.run(["git", "init", "-q", "-b", "main"], cwd=repo, check=True)
        (repo / "binky.toml").write_text(
            '[project]\nname = "dash"\n\n[services.app]\ncmd = "exec sleep 100000"\n'
        )
        subprocess.run(["git", "add", "-A"], cwd=repo, check=True)
        subprocess.run(["git", "-c", "user.name=b", "-c", "user.email=b@b",
                        "commit", "-qm", "init"], cwd=repo, check=True)
        binky("reserve", "--ram", "0", "--disk", "0", "--max-parallel", "0")
        log(f"bringing up {WORLDS} worlds")
        for i in range(WORLDS):
            binky("up", f"w{i}")
        daemon = int(json.loads(binky("daemon", "status", "--json").stdout)["pid"])
        time.sleep(2)
        res: dict = {"worlds": WORLDS, "seconds": args.seconds,
                     "loadavg_before": loadavg()}
        log("window 1: the daemon alone")
        res["daemon_alone_cpu_pct"] = window({"d": daemon}, args.seconds)["d"]
        for a in (["events", "-f"], ["events", "-f", "--json"], ["logs", "w0", "-f"]):
            followers.append(subprocess.Popen([str(binary), *a], cwd=repo, env=env,
                                              stdout=subprocess.DEVNULL,
                                              stderr=subprocess.DEVNULL))
        time.sleep(2)
        log("window 2: the daemon with 3 followers")
        w = window({"d": daemon, **{f"f{i}": p.pid for i, p in enumerate(followers)}},
                   args.seconds)
        res["daemon_with_3_followers_cpu_pct"] = w.pop("d")
        res["followers_cpu_pct"] = list(w.values())
        for p in followers:
            p.kill()
            p.wait()
        followers.clear()
        subprocess.run([*tmux, "new-session", "-d", "-x", "120", "-y", "40",
                        "-c", str(repo), str(binary), "dashboard"],
                       env=env, check=True)
        pane = int(subprocess.run([*tmux, "display", "-p", "#{pane_pid}"],
                                  capture_output=True, text=True).stdout)
        time.sleep(3)
        screen = subprocess.run([*tmux, "capture-pane", "-p"],
                                capture_output=True, text=True).stdout
        if "w14" not in screen:
            raise BenchError(f"the dashboard does not show the worlds:\n{screen}")
        log("window 3: the dashboard")
        w = window({"dash": pane, "d": daemon}, args.seconds)
        res["dashboard_cpu_pct"] = w["dash"]
        res["daemon_with_dashboard_cpu_pct"] = w["d"]
        res["dashboard_rss_mib"] = round(rss_mib(pane), 1)
        res["daemon_rss_mib"] = round(rss_mib(daemon), 1)
        res["loadavg_after"] = loadavg()
        res["dashboard_ok"] = (res["dashboard_cpu_pct"] <= TARGET_DASHBOARD_CPU_PCT
                               and res["dashboard_rss_mib"] <= TARGET_DASHBOARD_RSS_MIB)
    finally:
        for p in followers:
            p.kill()
        subprocess.run([*tmux, "kill-server"], capture_output=True)
        if home.exists():
            for i in range(WORLDS):
                binky("remove", f"w{i}", "--force", check=False)
            binky("daemon", "stop", check=False)
        shutil.rmtree(tmp, ignore_errors=True)
    if args.json:
        print(json.dumps(res, indent=2))
    else:
        for k, v in res.items():
            print(f"{k:34} {v}")
    return 0 if res["dashboard_ok"] else 1


if __name__ == "__main__":
    try:
        sys.exit(main())
    except BenchError as e:
        log(f"error: {e}")
        sys.exit(2)
