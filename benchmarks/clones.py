#!/usr/bin/env python3
"""A world's data at 1 GB: a plain copy, a spare, and a copy-on-write clone.

    python3 benchmarks/clones.py                 # 1000 MB template, 5 worlds a mode
    python3 benchmarks/clones.py --size-mb 200   # quicker
    python3 benchmarks/clones.py --json

Issue 51's measurement, side by side in one run, for one template of
--size-mb (rows of an int and an md5 text, ~76 bytes a row):

  copy     PostgreSQL on 127.0.0.1:5432 (this machine's, on its own
           filesystem), options.spares = 0: each world is
           CREATE DATABASE ... TEMPLATE, a full copy.
  spare    the same server, options.spares = 1: each world takes a spare by
           ALTER DATABASE ... RENAME TO; the pool is refilled behind it.
  spare-noacl  the same with acl = false: no world role to make and hand
           the database to, so the slice step is the rename alone.
  reflink  PostgreSQL 18 with its data directory on XFS with reflink
           (BINKY_TEST_PG18_URL, as `.ci/pg18-reflink` sets up; skipped
           without it), options.spares = 0: FILE_COPY with
           file_copy_method = clone.

For each mode, after the first `up` (which builds the template, not timed
here), --worlds more `up`s, one at a time. Per world: the slice step as
Binky times it (the `cloned` or `spare_taken` event's `ms`), the whole
`binky up`, and the disk the copy took (the event's `bytes`: the fall in
free space of the server's data directory, so shared blocks count as
nothing). For spares also: how long until the pool has a ready spare again
after each `up` (polling `status` every 50 ms), and the disk each spare took.
Medians with min and max; the spread of each is the machine's noise.

Uses the release binary as the other benchmarks do.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import BenchError, ensure_binary, free_port, log  # noqa: E402

PG15 = "postgresql://postgres@127.0.0.1:5432/postgres"
ROW_BYTES = 76


def env_for(home: Path, admin: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("BINKY_")}
    env.update(
        BINKY_HOME=str(home),
        BINKY_PROXY_PORT=str(free_port()),
        BINKY_HTTPS_PORT=str(free_port()),
        NO_COLOR="1",
        BENCH_PG_ADMIN=admin,
    )
    return env


def binky(binary: Path, env: dict, cwd: Path, *args: str, timeout: float = 1800) -> subprocess.CompletedProcess:
    r = subprocess.run([str(binary), *args], cwd=cwd, env=env, capture_output=True,
                       text=True, timeout=timeout, stdin=subprocess.DEVNULL)
    if r.returncode != 0:
        raise BenchError(f"`binky {' '.join(args)}` exited {r.returncode}:\n{r.stdout}{r.stderr}")
    return r


def events(home: Path) -> list[dict]:
    try:
        return [json.loads(line) for line in (home / "events.log").read_text().splitlines() if line]
    except FileNotFoundError:
        return []


def ready_spares(binary: Path, env: dict, cwd: Path, project: str) -> int:
    r = subprocess.run([str(binary), "status", "--json"], cwd=cwd, env=env,
                       capture_output=True, text=True, timeout=60)
    for p in json.loads(r.stdout or "{}").get("projects", []):
        if p["name"] == project:
            return (p.get("spares") or {}).get("ready", 0)
    return 0


def project(root: Path, name: str, rows: int, spares: int, acl: bool) -> Path:
    repo = root / name
    repo.mkdir()
    sql = lambda q: f"psql \\\"$DB_URL\\\" -v ON_ERROR_STOP=1 -qc '{q}'"  # noqa: E731
    (repo / "binky.toml").write_text(
        f'[project]\nname = "{name}"\n'
        "[services.db]\nadapter = \"postgres\"\nadmin_url = \"${env.BENCH_PG_ADMIN}\"\n"
        f"migrate = \"{sql('create table if not exists big(n int, m text)')}\"\n"
        f"seed = \"{sql(f'insert into big select g, md5(g::text) from generate_series(1, {rows}) g')}\"\n"
        f'clone_from = "golden"\noptions = {{ spares = {spares}, acl = {str(acl).lower()} }}\n'
    )
    for args in (["init", "-q", "-b", "main"], ["add", "-A"],
                 ["-c", "user.name=b", "-c", "user.email=b@b", "commit", "-qm", "i"]):
        subprocess.run(["git", *args], cwd=repo, check=True)
    return repo


def spread(xs: list[float]) -> dict | None:
    if not xs:
        return None
    return {"median": round(statistics.median(xs), 1), "min": round(min(xs), 1),
            "max": round(max(xs), 1), "n": len(xs)}


def run_mode(binary: Path, mode: str, admin: str, rows: int, worlds: int) -> dict:
    spares = 1 if mode.startswith("spare") else 0
    name = f"bench{mode.replace('-', '')}{os.getpid() % 10000}"
    with tempfile.TemporaryDirectory(prefix="bkc", dir="/tmp") as tmp:
        root = Path(tmp)
        home = root / "home"
        repo = project(root, name, rows, spares, acl=not mode.endswith("-noacl"))
        env = env_for(home, admin)
        started = time.monotonic()
        binky(binary, env, repo, "up", "w0")
        build_s = time.monotonic() - started
        log(f"{mode}: template built and w0 up in {build_s:.1f} s")
        refill_s: list[float] = []
        if spares:
            t0 = time.monotonic()
            while ready_spares(binary, env, repo, name) < 1:
                time.sleep(0.05)
            refill_s.append(time.monotonic() - t0)
        slice_ms, up_ms, disk = [], [], []
        for i in range(1, worlds + 1):
            t0 = time.monotonic()
            binky(binary, env, repo, "up", f"w{i}")
            up_ms.append((time.monotonic() - t0) * 1000)
            ev = [e for e in events(home) if e.get("worktree") == f"w{i}"
                  and e["event"] in ("cloned", "spare_taken")]
            if not ev:
                raise BenchError(f"{mode}: no cloned or spare_taken event for w{i}")
            slice_ms.append(float(ev[-1]["ms"]))
            disk.append(ev[-1].get("bytes", 0 if ev[-1]["event"] == "spare_taken" else None))
            if spares:
                t0 = time.monotonic()
                while ready_spares(binary, env, repo, name) < 1:
                    time.sleep(0.05)
                refill_s.append(time.monotonic() - t0)
        made = [e.get("bytes") for e in events(home) if e["event"] == "spare_made"]
        for i in range(worlds + 1):
            binky(binary, env, repo, "remove", f"w{i}", "--force")
        binky(binary, env, repo, "gc")
        subprocess.run([str(binary), "daemon", "stop"], env=env, capture_output=True)
    mb = lambda xs: [x / 1e6 for x in xs if x is not None]  # noqa: E731
    return {
        "mode": mode,
        "template_build_s": round(build_s, 1),
        "slice_step_ms": spread(slice_ms),
        "up_ms": spread(up_ms),
        "disk_per_world_mb": spread(mb(disk)),
        "spare_back_s": spread(refill_s),
        "disk_per_spare_mb": spread(mb(made)),
    }


def psql_ok(url: str) -> bool:
    r = subprocess.run(["psql", url, "-tAc", "select 1"], capture_output=True)
    return r.returncode == 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size-mb", type=int, default=1000)
    ap.add_argument("--worlds", type=int, default=5)
    ap.add_argument("--binary")
    ap.add_argument("--build", action="store_true")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    binary = ensure_binary(a.binary, a.build)
    rows = a.size_mb * 1_000_000 // ROW_BYTES
    modes = [("copy", PG15), ("spare", PG15), ("spare-noacl", PG15)]
    pg18 = os.environ.get("BINKY_TEST_PG18_URL")
    if pg18 and psql_ok(pg18):
        modes.append(("reflink", pg18))
    else:
        log("no PostgreSQL 18 on reflink (BINKY_TEST_PG18_URL): the reflink row is skipped")
    results = [run_mode(binary, m, url, rows, a.worlds) for m, url in modes]
    if a.json:
        print(json.dumps({"size_mb": a.size_mb, "worlds": a.worlds, "results": results}, indent=2))
        return 0
    fmt = lambda s, unit="": "—" if not s else f"{s['median']}{unit} [{s['min']}–{s['max']}]"  # noqa: E731
    print(f"template {a.size_mb} MB, {a.worlds} worlds a mode (median [min–max])")
    print(f"{'mode':8} {'slice step':>22} {'whole up':>22} {'disk/world':>20} {'spare back':>18} {'disk/spare':>18}")
    for r in results:
        print(f"{r['mode']:8} {fmt(r['slice_step_ms'], ' ms'):>22} {fmt(r['up_ms'], ' ms'):>22} "
              f"{fmt(r['disk_per_world_mb'], ' MB'):>20} {fmt(r['spare_back_s'], ' s'):>18} "
              f"{fmt(r['disk_per_spare_mb'], ' MB'):>18}")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except BenchError as e:
        log(f"error: {e}")
        sys.exit(1)
