#!/usr/bin/env python3
"""Admission under a real memory limit: twenty agents, room for six.

20 concurrent `binky up`s (two groups, 16 + 4) of a project whose world
holds --hold-mib (300) MiB, with the RAM reserve set so that --fit (6)
worlds fit. Each world runs --job seconds, as an agent's task would, then
goes `down`. Reported, against the issue's goals:

- the most worlds ever running at once (goal: --fit);
- the lowest MemAvailable seen against the reserve (goal: never below it by
  more than one world's footprint);
- the time until all 20 were served against the ideal schedule for that
  room, ceil(20 / fit) rounds of (up + job) (goal: within 10 %);
- the order of admission against FIFO within each group (goal: FIFO);
- Jain's fairness index across the groups over time, while both have
  demand: each group's active worlds (the daemon's `admitted` to `down`
  events) against its max-min fair share of the worlds active then
  (goal >= 0.95);
- the admission decision latency, from the `admitted` events (goal: < 5 ms
  median);
- the daemon's CPU while `fit` worlds run and nothing changes (goal: ~0).

The reserve is calibrated first: one world is brought up to learn its
footprint and how far MemAvailable moves per world on this machine (some
kernels, sandboxes among them, move it by less than the RSS). Standard
library only; a release build unless --binary is given.

    python3 benchmarks/admission.py [--binary target/release/binky] [--json]

`--noise` measures flapping instead: three --hold-mib worlds while a
filler moves memory by --swing-mib (400) every --period (1) s, for two
phases of --phase (120) s: the mean above the reserve (goal: no
transition), then half a world below it (goal: one suspension, at most one
transition per world in any minute).

    python3 benchmarks/admission.py --noise [--phase 120] [--json]

`--queue` measures what a long queue costs instead (`queue_load.py`):
`status` median and the daemon's idle CPU with 0, 100, 1,000 and 5,000
worlds queued (goal: `status` under 5 ms and the daemon idle at 5,000).

    python3 benchmarks/admission.py --queue [--queue-sizes 0 100 1000 5000] [--json]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import BenchError, cpu_ticks, ensure_binary, free_port, loadavg, log, verdict  # noqa: E402
import queue_load  # noqa: E402

MIB = 1 << 20


def meminfo(field: str) -> int:
    """A /proc/meminfo field, bytes."""
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    raise BenchError(f"no {field} in /proc/meminfo")


def mem_available() -> int:
    return meminfo("MemAvailable")


def steady_available() -> int:
    """MemAvailable, the median of seven readings over 1.4 s."""
    xs = []
    for _ in range(7):
        xs.append(mem_available())
        time.sleep(0.2)
    return int(statistics.median(xs))


def mem_total() -> int:
    return meminfo("MemTotal")


class Bench:
    def __init__(self, binary: Path, root: Path, hold_mib: int, worlds: int) -> None:
        self.binary = binary
        self.root = root
        self.home = root / "home"
        self.repo = root / "admbench"
        self.repo.mkdir()
        lo = 30000 + (os.getpid() % 200) * 10
        toml = (
            f'[project]\nname = "admbench"\nport_range = [{lo}, {lo + worlds + 8}]\n'
            "[services.app]\n"
            f"cmd = \"exec python3 -c 'import time; b = b\\\"x\\\" * ({hold_mib} << 20); "
            "open(\\\"ready\\\", \\\"w\\\").close(); time.sleep(3600)'\"\n"
            'health = { cmd = "test -f ready", timeout = "60s" }\n'
        )
        (self.repo / "binky.toml").write_text(toml)
        for args in (["init", "-q"], ["add", "."], ["-c", "user.email=b@x", "-c", "user.name=b",
                                                     "commit", "-qm", "init"]):
            subprocess.run(["git", *args], cwd=self.repo, check=True)
        self.env = dict(os.environ, BINKY_HOME=str(self.home), NO_COLOR="1",
                        BINKY_PROXY_PORT=str(free_port()), BINKY_HTTPS_PORT=str(free_port()))

    def run(self, *args: str, check: bool = True,
            timeout: float | None = None) -> subprocess.CompletedProcess:
        try:
            r = subprocess.run([str(self.binary), *args], cwd=self.repo, env=self.env,
                               capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            # A queue that never moves: say what the daemon saw, not hang.
            st = subprocess.run([str(self.binary), "status", "--json"], cwd=self.repo,
                                env=self.env, capture_output=True, text=True)
            raise BenchError(
                f"binky {' '.join(args)} waited over {timeout:.0f} s; MemAvailable "
                f"{mem_available() / MIB:.0f} MiB; status: {st.stdout.strip()[:2000]}")
        if check and r.returncode != 0:
            raise BenchError(f"binky {' '.join(args)}: {r.stderr.strip()}")
        return r

    def events(self) -> list[dict]:
        path = self.home / "events.log"
        return [json.loads(l) for l in path.read_text().splitlines() if l.strip()]

    def stop(self) -> None:
        st = self.run("status", "--json", check=False)
        try:
            for p in json.loads(st.stdout)["projects"]:
                for w in p["worlds"]:
                    self.run("remove", w["name"], "--force", check=False)
        except (ValueError, KeyError):
            pass
        self.run("daemon", "stop", check=False)


def jain(xs: list[float]) -> float:
    """Jain's index of normalised allocations: 1 when every x is equal,
    1/n when one party has everything."""
    s, sq = sum(xs), sum(x * x for x in xs)
    return 1.0 if sq == 0 else s * s / (len(xs) * sq)


def max_min_fair(capacity: float, demand: dict[str, float]) -> dict[str, float]:
    """The max-min fair shares of `capacity` (water-filling): no group gets
    more than it asks for, and what a small group leaves goes to the rest
    equally. Jain's index is taken over each group's allocation divided by
    this share, so a group that asked for little is not counted as starved
    for getting little (Jain, Chiu and Hawe, 1984, normalise by the fair
    allocation)."""
    share = {g: 0.0 for g in demand}
    left = {g: d for g, d in demand.items() if d > 0}
    cap = capacity
    while left and cap > 1e-9:
        each = cap / len(left)
        small = {g: d for g, d in left.items() if d <= each}
        if not small:
            for g in left:
                share[g] += each
            break
        for g, d in small.items():
            share[g] += d
            cap -= d
            del left[g]
    return share


def benchmark(args: argparse.Namespace, binary: Path, root: Path) -> dict:
    b = Bench(binary, root, args.hold_mib, args.worlds)
    try:
        b.run("daemon", "start")
        b.run("reserve", "--ram", "0", "--disk", "0", "--max-parallel", "0")
        # Calibrate: a world's up time, the footprint the daemon learns, and
        # how far MemAvailable moves per world — over two worlds, each
        # reading the median of several, so a passing allocation elsewhere
        # does not skew the room.
        before = steady_available()
        t0 = time.perf_counter()
        b.run("up", "calib0")
        up_s = time.perf_counter() - t0
        b.run("up", "calib1")
        deadline = time.monotonic() + 20
        while "admbench" not in json.loads(b.run("metrics").stdout).get("footprints", {}):
            if time.monotonic() > deadline:
                raise BenchError("the daemon never learned the footprint (no memory sample in 20 s)")
            time.sleep(0.5)
        during = steady_available()
        for w in ("calib0", "calib1"):
            b.run("down", w)
            b.run("remove", w, "--force")
        drop = max((before - during) // 2, 16 * MIB)
        time.sleep(1)
        avail = steady_available()
        # Admit k+1 while avail - k*drop >= reserve + F, for k < fit: with F
        # the footprint the daemon learned (about hold_mib, plus python).
        learned = json.loads(b.run("metrics").stdout).get("footprints", {}).get(
            "admbench", args.hold_mib * MIB)
        reserve = avail - learned - int((args.fit - 0.5) * drop)
        total = mem_total()
        pct = reserve / total * 100
        if not 0 <= pct <= 90:
            raise BenchError(f"cannot place the reserve: {pct:.1f} % of RAM")
        b.run("reserve", "--ram", f"{pct:.3f}")
        log(f"calibrated: up {up_s:.2f} s, footprint {learned / MIB:.0f} MiB, "
            f"MemAvailable moves {drop / MIB:.0f} MiB a world, reserve {reserve / MIB:.0f} MiB ({pct:.2f} %)")

        groups = ["a"] * args.group_a + ["b"] * args.group_b
        lock = threading.Lock()
        running = {"a": 0, "b": 0}
        demand = {"a": args.group_a, "b": args.group_b}
        most = [0]
        lowest = [mem_available()]
        stop = threading.Event()

        def sampler() -> None:
            while not stop.is_set():
                m = mem_available()
                with lock:
                    lowest[0] = min(lowest[0], m)
                time.sleep(0.1)

        spans: dict[str, tuple[str, float, float]] = {}
        asked_wall: dict[str, float] = {}

        failures: list[BaseException] = []

        def agent(i: int, g: str) -> None:
            try:
                serve(i, g)
            except BaseException as e:  # noqa: BLE001 - reported after join
                with lock:
                    failures.append(e)

        def serve(i: int, g: str) -> None:
            name = f"w{i:02d}"
            asked = time.perf_counter()
            with lock:
                asked_wall[name] = time.time()
            b.run("up", name, "--group", g, timeout=args.stall)
            served = time.perf_counter()
            with lock:
                spans[name] = (g, asked, served)
            log(f"{name} ({g}) up at {served - start:.1f} s")
            with lock:
                running[g] += 1
                most[0] = max(most[0], sum(running.values()))
            time.sleep(args.job)
            with lock:
                running[g] -= 1
                demand[g] -= 1
            b.run("down", name)

        threading.Thread(target=sampler, daemon=True).start()
        start = time.perf_counter()
        threads = []
        for i, g in enumerate(groups):
            t = threading.Thread(target=agent, args=(i, g))
            t.start()
            threads.append(t)
            time.sleep(0.02)  # a definite arrival order
        for t in threads:
            t.join()
        if failures:
            raise failures[0]
        makespan = time.perf_counter() - start
        stop.set()
        log(f"all served in {makespan:.1f} s; idle phase")
        ideal = math.ceil(len(groups) / args.fit) * (up_s + args.job)

        evs = [e for e in b.events() if e.get("event") == "admitted" and
               str(e.get("worktree", "")).startswith("w")]
        order = [e["worktree"] for e in evs]
        # FIFO is by arrival at the daemon: the ticket each request took.
        tickets = {e["worktree"]: int(m.group(1)) for e in evs
                   if (m := re.search(r"ticket (\d+)", e.get("detail", "")))}
        fifo = all(
            [tickets[w] for w in order if groups[int(w[1:])] == g] ==
            sorted(tickets[w] for w in order if groups[int(w[1:])] == g)
            for g in ("a", "b"))
        # Fairness over time, from the daemon's own events: a world is
        # active from its `admitted` event to its `down` event, and its
        # group asks for it from the moment its `up` was sent. Every 20 ms
        # while both groups ask, each group's active worlds are divided by
        # its max-min fair share of the worlds active then (Jain, Chiu and
        # Hawe normalise by the fair allocation: a group asking for two is
        # not short for having two), and Jain's index is taken of those.
        from datetime import datetime

        def ts(e: dict) -> float:
            return datetime.fromisoformat(e["ts"].replace("Z", "+00:00")).timestamp()
        all_evs = b.events()
        admitted_at = {e["worktree"]: ts(e) for e in evs}
        done_at = {e["worktree"]: ts(e) for e in all_evs if e.get("event") == "down"}
        life = {name: (g, asked_wall[name], admitted_at[name], done_at[name])
                for name, (g, _, _) in spans.items()
                if name in admitted_at and name in done_at}
        shares: list[float] = []
        # From the first world going down once both groups asked: before
        # it the room is full of whoever came first, and admission never
        # stops a running world to make room (the index then says only how
        # long the first comers' jobs run); from it on, admission gives
        # every freed slot.
        both = max(min(v[1] for v in life.values() if v[0] == g) for g in ("a", "b"))
        choice = min(v[3] for v in life.values() if v[3] >= both)
        after_choice: list[float] = []
        t, t_end = min(v[1] for v in life.values()), max(v[3] for v in life.values())
        while t < t_end:
            demand = {g: float(sum(1 for og, a, _, d in life.values() if og == g and a <= t < d))
                      for g in ("a", "b")}
            active = {g: float(sum(1 for og, _, ad, d in life.values() if og == g and ad <= t < d))
                      for g in ("a", "b")}
            if all(demand.values()) and sum(active.values()):
                fair = max_min_fair(sum(active.values()), demand)
                shares.append(jain([active[g] / fair[g] for g in ("a", "b")]))
                if t >= choice:
                    after_choice.append(shares[-1])
            t += 0.02
        latencies = [float(m.group(1)) for e in evs
                     if (m := re.search(r"decided in ([0-9.]+) ms", e.get("detail", "")))]

        # Idle: `fit` worlds up, nothing changing.
        for i in range(args.fit):
            b.run("up", f"idle{i}")
        time.sleep(3)
        pid = json.loads(b.run("daemon", "status", "--json").stdout)["pid"]
        c0, t0 = cpu_ticks(pid), time.perf_counter()
        time.sleep(args.idle)
        ticks = cpu_ticks(pid) - c0
        hz = os.sysconf("SC_CLK_TCK")
        idle_cpu = ticks / hz / (time.perf_counter() - t0) * 100

        return {
            "worlds": len(groups), "fit": args.fit, "hold_mib": args.hold_mib, "job_s": args.job,
            "calibration": {"up_s": up_s, "memavailable_drop_mib": drop / MIB,
                            "reserve_mib": reserve / MIB, "reserve_pct": pct},
            "most_running": most[0],
            "lowest_below_reserve_mib": (reserve - lowest[0]) / MIB,
            "footprint_mib": learned / MIB,
            "makespan_s": makespan, "ideal_s": ideal, "makespan_ratio": makespan / ideal,
            "admission_order": order, "fifo_within_groups": fifo,
            "jain_mean": statistics.mean(shares) if shares else None,
            "jain_min": min(shares) if shares else None,
            "jain_share_at_least_095": (sum(1 for x in shares if x >= 0.95) / len(shares))
            if shares else None,
            "contended_s": len(shares) * 0.02,
            "jain_after_choice_mean": statistics.mean(after_choice) if after_choice else None,
            "jain_after_choice_min": min(after_choice) if after_choice else None,
            "first_choice_after_s": choice - both,
            "decision_ms_median": statistics.median(latencies) if latencies else None,
            "decision_ms_max": max(latencies) if latencies else None,
            "idle_cpu_percent": idle_cpu, "idle_s": args.idle,
            "loadavg": loadavg(),
        }
    finally:
        b.stop()
        if args.events:
            import shutil
            shutil.copy(b.home / "events.log", args.events)


def print_report(r: dict) -> None:
    below = r["lowest_below_reserve_mib"]
    rows = [
        ("most worlds running at once", f"{r['most_running']}", f"{r['fit']}",
         verdict(r["most_running"] <= r["fit"])),
        ("lowest MemAvailable vs reserve", f"{-below:+.0f} MiB", f"> -{r['footprint_mib']:.0f} MiB",
         verdict(below <= r["footprint_mib"])),
        ("time to serve all", f"{r['makespan_s']:.1f} s (ideal {r['ideal_s']:.1f} s, x{r['makespan_ratio']:.2f})",
         "<= x1.10", verdict(r["makespan_ratio"] <= 1.10)),
        ("FIFO within each group", str(r["fifo_within_groups"]), "True",
         verdict(r["fifo_within_groups"])),
        ("Jain's index across the groups over time (active worlds against max-min fair "
         "shares, every 20 ms while both groups wait or run)",
         f"mean {r['jain_mean']:.3f}, min {r['jain_min']:.3f}; >= 0.95 for "
         f"{r['jain_share_at_least_095'] * 100:.0f} % of {r['contended_s']:.1f} s"
         if r["jain_mean"] is not None else "n/a",
         ">= 0.95", verdict(r["jain_mean"] is not None and r["jain_mean"] >= 0.95)),
        ("the same, from the first slot freed once both groups asked",
         f"mean {r['jain_after_choice_mean']:.3f}, min {r['jain_after_choice_min']:.3f} "
         f"(freed {r['first_choice_after_s']:.1f} s after both asked)"
         if r["jain_after_choice_mean"] is not None else "n/a",
         ">= 0.95", verdict(r["jain_after_choice_mean"] is not None
                            and r["jain_after_choice_mean"] >= 0.95)),
        ("decision latency", f"median {r['decision_ms_median']:.2f} ms, max {r['decision_ms_max']:.2f} ms"
         if r["decision_ms_median"] is not None else "n/a", "< 5 ms",
         verdict(r["decision_ms_median"] is not None and r["decision_ms_median"] < 5)),
        (f"daemon CPU, {r['fit']} worlds idle", f"{r['idle_cpu_percent']:.2f} %", "~0",
         verdict(r["idle_cpu_percent"] < 1)),
    ]
    print(f"\n{r['worlds']} concurrent ups (16 + 4 in two groups), {r['hold_mib']} MiB a world, "
          f"room for {r['fit']}, {r['job_s']} s a job; reserve {r['calibration']['reserve_mib']:.0f} MiB "
          f"({r['calibration']['reserve_pct']:.2f} %), MemAvailable moves "
          f"{r['calibration']['memavailable_drop_mib']:.0f} MiB a world\n")
    print("| measure | result | goal | |\n|---|---|---|---|")
    for name, res, goal, v in rows:
        print(f"| {name} | {res} | {goal} | {v} |")
    print(f"\nadmission order: {' '.join(r['admission_order'])}")


FILLER = """
import sys, time
swing, period = int(sys.argv[1]) << 20, float(sys.argv[2])
while True:
    b = bytearray(swing)
    for i in range(0, swing, 4096):
        b[i] = 1
    time.sleep(period)
    del b
    time.sleep(period)
"""


def noise(args: argparse.Namespace, binary: Path, root: Path) -> dict:
    """Three worlds under memory that other programs move: a filler swings
    MemAvailable by --swing-mib every --period seconds. Phase 1 puts the
    reserve a quarter of the seen swing above its trough (the mean stays
    above it: no world should be suspended); phase 2 puts it half a world
    above the mean with all three running (one suspension is right, and
    none more: after it the mean is above the line, within the noise).
    Counted: suspend/resume transitions per phase and the most any world
    made in one minute. The daemon runs with its default sample interval and
    hold, as a user's does."""
    b = Bench(binary, root, args.hold_mib, 3)
    filler = None
    fillers: list[subprocess.Popen] = []
    try:
        b.run("daemon", "start")
        b.run("reserve", "--ram", "0", "--disk", "0", "--max-parallel", "0")
        for w in ("n1", "n2", "n3"):
            b.run("up", w)
        deadline = time.monotonic() + 30
        while "admbench" not in json.loads(b.run("metrics").stdout).get("footprints", {}):
            if time.monotonic() > deadline:
                raise BenchError("the daemon never learned the footprint")
            time.sleep(0.5)
        footprint = json.loads(b.run("metrics").stdout)["footprints"]["admbench"]
        # A reserve may be at most 90 % of RAM: on a machine with more free,
        # a steady filler holds what is above 80 % first.
        m = json.loads(b.run("metrics").stdout)
        extra = m["memory_available"] - m["memory_total"] * 8 // 10
        if extra > 0:
            cap = subprocess.Popen([sys.executable, "-c", FILLER, str(extra >> 20), "86400"])
            fillers.append(cap)
            # Until it is written and MemAvailable is still again: a swing
            # measured while it settles puts the lines in the wrong place.
            time.sleep(3 + extra / (1 << 30))
            last = json.loads(b.run("metrics").stdout)["memory_available"]
            for _ in range(30):
                time.sleep(1)
                now = json.loads(b.run("metrics").stdout)["memory_available"]
                if abs(now - last) < 64 * MIB:
                    break
                last = now
        filler = subprocess.Popen([sys.executable, "-c", FILLER, str(args.swing_mib),
                                   str(args.period)])
        # The swing as the daemon reads it (bounded by its cgroup).
        readings = []
        for _ in range(int(8 * args.period / 0.2)):
            readings.append(json.loads(b.run("metrics").stdout)["memory_available"])
            time.sleep(0.2)
        hi, lo = max(readings), min(readings)
        mean = statistics.mean(readings)
        seen = hi - lo
        total = json.loads(b.run("metrics").stdout)["memory_total"]
        phases = []
        for name, line in (("mean above the line", lo + seen / 4),
                           ("mean half a world below the line", mean + footprint / 2)):
            pct = line / total * 100
            if not 0 <= pct <= 90:
                raise BenchError(f"cannot place the reserve: {pct:.1f} % of RAM")
            start = time.time()
            b.run("reserve", "--ram", f"{pct:.3f}")
            log(f"{name}: reserve {line / MIB:.0f} MiB for {args.phase:.0f} s")
            time.sleep(args.phase)
            phases.append((name, start, time.time(), line))
        events = [e for e in b.events() if e["event"] in ("suspended", "resumed")]

        def at(e: dict) -> float:
            from datetime import datetime
            return datetime.fromisoformat(e["ts"].replace("Z", "+00:00")).timestamp()

        out = []
        for name, start, end, line in phases:
            ev = [e for e in events if start <= at(e) < end]
            per_minute = 0
            for e in ev:
                same = [f for f in ev if f["worktree"] == e["worktree"]
                        and at(e) <= at(f) < at(e) + 60]
                per_minute = max(per_minute, len(same))
            out.append({"phase": name, "reserve_mib": line / MIB, "seconds": end - start,
                        "transitions": len(ev), "most_per_world_minute": per_minute,
                        "events": [f"{e['event']} {e['worktree']}" for e in ev]})
        return {"swing_mib": args.swing_mib, "seen_swing_mib": seen / MIB,
                "footprint_mib": footprint / MIB, "period_s": args.period, "phases": out}
    finally:
        for f in fillers + ([filler] if filler else []):
            f.kill()
            f.wait()
        b.stop()
        if args.events:
            import shutil
            shutil.copy(b.home / "events.log", args.events)


def print_noise(r: dict) -> None:
    print(f"\nthree worlds of {r['footprint_mib']:.0f} MiB; a filler swings {r['swing_mib']} MiB every "
          f"{r['period_s']} s (the daemon sees {r['seen_swing_mib']:.0f} MiB peak to trough)\n")
    print("| phase | reserve | transitions | most by one world in a minute | goal | |")
    print("|---|---|---|---|---|---|")
    for p, goal in zip(r["phases"], (0, 1)):
        ok = p["transitions"] <= goal and p["most_per_world_minute"] <= 1
        print(f"| {p['phase']} ({p['seconds']:.0f} s) | {p['reserve_mib']:.0f} MiB | {p['transitions']} "
              f"({', '.join(p['events']) or 'none'}) | {p['most_per_world_minute']} | <= {goal}, <= 1 a minute "
              f"| {verdict(ok)} |")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--binary", help="binky to measure (default: a release build)")
    ap.add_argument("--build", action="store_true", help="rebuild the release binary first")
    ap.add_argument("--hold-mib", type=int, default=300, help="RAM each world holds")
    ap.add_argument("--fit", type=int, default=6, help="worlds the reserve leaves room for")
    ap.add_argument("--group-a", type=int, default=16)
    ap.add_argument("--group-b", type=int, default=4)
    ap.add_argument("--job", type=float, default=4.0, help="seconds each world runs")
    ap.add_argument("--idle", type=float, default=10.0, help="seconds of the idle CPU sample")
    ap.add_argument("--stall", type=float, default=300.0,
                    help="seconds an up may wait before the run is called stalled")
    ap.add_argument("--json", action="store_true", help="print the result as JSON")
    ap.add_argument("--events", help="copy the daemon's events.log here, to study a run")
    ap.add_argument("--noise", action="store_true",
                    help="instead: three worlds under memory a filler swings (flapping figures)")
    ap.add_argument("--swing-mib", type=int, default=400, help="--noise: the filler's swing")
    ap.add_argument("--period", type=float, default=1.0, help="--noise: seconds held, then freed")
    ap.add_argument("--phase", type=float, default=120.0, help="--noise: seconds of each phase")
    ap.add_argument("--queue", action="store_true",
                    help="instead: status and idle CPU with thousands of worlds queued")
    ap.add_argument("--queue-sizes", type=int, nargs="+", default=[0, 100, 1000, 5000],
                    help="--queue: the queue lengths measured")
    ap.add_argument("--runs", type=int, default=50, help="--queue: status round trips per length")
    args = ap.parse_args()
    args.worlds = args.group_a + args.group_b
    try:
        binary = ensure_binary(args.binary, args.build)
        with tempfile.TemporaryDirectory(prefix="binky-admission-") as d:
            if args.queue:
                r = queue_load.run(args, binary, Path(d))
            elif args.noise:
                r = noise(args, binary, Path(d))
            else:
                r = benchmark(args, binary, Path(d))
    except BenchError as e:
        log(f"error: {e}")
        return 1
    if args.json:
        print(json.dumps(r, indent=2))
    elif args.queue:
        queue_load.print_report(r)
    elif args.noise:
        print_noise(r)
    else:
        print_report(r)
    return 0


if __name__ == "__main__":
    sys.exit(main())
