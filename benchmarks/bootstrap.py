#!/usr/bin/env python3
"""Benchmark `[project] copy`: the first healthy `up` of a Node project's new
world, with `node_modules` copied from the main checkout against installed by
a `setup` command.

    python3 benchmarks/bootstrap.py              # 3 worlds of each kind
    python3 benchmarks/bootstrap.py --runs 5
    python3 benchmarks/bootstrap.py --json

Python 3 standard library, plus node and npm on PATH. It makes a throwaway
Node project under /tmp whose dependencies install a `node_modules` of about
200 MB (next, react, react-dom, typescript), installs them once in the main
checkout (from the npm registry, or npm's cache after the first run), then
brings up new worlds in turn, interleaved:

  (a) copy:  `copy = ["node_modules"]` — cloned copy-on-write where the
      filesystem can (the progress line says `reflink` or `copy`);
  (b) setup: `setup = ["npm ci --prefer-offline --no-audit --no-fund"]` —
      what a project without `copy` runs in each new worktree (npm's cache is
      warm, so this is the cheapest install there is).

Each `up` ends when the world's Node server answers its health probe. Reported:
the median wall time of each kind, their ratio, the size of node_modules and
how the copy was made. Uses the release binary (see common.ensure_binary), a
fresh BINKY_HOME, and removes every world, the daemon and the folders at the
end, also on error.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import BenchError, ensure_binary, loadavg, log

DEPENDENCIES = {"next": "15", "react": "19", "react-dom": "19", "typescript": "5"}

SERVER = "require('http').createServer((q, r) => r.end('ok')).listen(process.env.PORT, '127.0.0.1')"


def run(cmd: list[str], cwd: Path, env: dict[str, str], check: bool = True) -> subprocess.CompletedProcess:
    r = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True)
    if check and r.returncode != 0:
        raise BenchError(f"{' '.join(cmd)} failed ({r.returncode}):\n{r.stdout}\n{r.stderr}")
    return r


def tree_bytes(p: Path) -> int:
    total = 0
    for root, _dirs, files in os.walk(p):
        for f in files:
            fp = os.path.join(root, f)
            if not os.path.islink(fp):
                total += os.path.getsize(fp)
    return total


def make_project(base: Path, kind: str, port_lo: int) -> Path:
    """A git repository with the Node project, its node_modules installed in
    the main checkout, and a binky.toml of `kind` (copy or setup)."""
    main = base / kind
    main.mkdir(parents=True)
    env = dict(os.environ)
    run(["git", "init", "-q", "-b", "main"], main, env)
    (main / "package.json").write_text(json.dumps(
        {"name": f"bench-{kind}", "private": True, "dependencies": DEPENDENCIES}, indent=2))
    (main / "server.js").write_text(SERVER + "\n")
    (main / ".gitignore").write_text("node_modules/\n")
    bootstrap = (
        'copy = ["node_modules"]' if kind == "copy"
        else 'setup = ["npm ci --prefer-offline --no-audit --no-fund"]'
    )
    (main / "binky.toml").write_text(
        f'[project]\nname = "boot{kind}"\nport_range = [{port_lo}, {port_lo + 50}]\n{bootstrap}\n\n'
        '[services.web]\ncmd = "exec node server.js"\nurl = "web"\n'
        'health = { http = "/", timeout = "120s", interval = "20ms" }\n'
    )
    log(f"{kind}: npm install in the main checkout")
    run(["npm", "install", "--no-audit", "--no-fund", "--prefer-offline"], main, env)
    run(["git", "add", "-A"], main, env)
    run(["git", "-c", "user.name=b", "-c", "user.email=b@example.com", "commit", "-qm", "init"], main, env)
    return main


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=3, help="new worlds of each kind (default 3)")
    ap.add_argument("--binary", help="the binky binary (default: the release build)")
    ap.add_argument("--json", action="store_true", help="print the results as JSON")
    args = ap.parse_args()
    for tool in ("node", "npm", "git"):
        if not shutil.which(tool):
            raise BenchError(f"{tool} is not on PATH")
    binky = ensure_binary(args.binary, False)
    base = Path(tempfile.mkdtemp(prefix="binky-bootstrap-", dir="/tmp"))
    home = base / "home"
    env = dict(os.environ, BINKY_HOME=str(home), NO_COLOR="1")
    projects = {}
    try:
        projects = {k: make_project(base, k, 41000 + i * 100) for i, k in enumerate(("copy", "setup"))}
        size = tree_bytes(projects["copy"] / "node_modules")
        log(f"node_modules: {size / 1e6:.0f} MB")
        times: dict[str, list[float]] = {"copy": [], "setup": []}
        how = set()
        for i in range(args.runs):
            for kind in ("copy", "setup"):
                world = f"w{i}"
                t0 = time.perf_counter()
                r = run([str(binky), "up", world], projects[kind], env, check=False)
                took = time.perf_counter() - t0
                if r.returncode != 0:
                    raise BenchError(f"up {kind}/{world} failed:\n{r.stdout}\n{r.stderr}")
                times[kind].append(took)
                m = re.search(r"copy node_modules: .*\((reflink|copy)\)", r.stderr)
                if m:
                    how.add(m.group(1))
                log(f"{kind} {world}: {took:.2f} s")
                run([str(binky), "remove", world, "--force"], projects[kind], env, check=False)
        med = {k: statistics.median(v) for k, v in times.items()}
        result = {
            "node_modules_mb": round(size / 1e6, 1),
            "copied_by": sorted(how),
            "runs": args.runs,
            "median_s": {k: round(v, 3) for k, v in med.items()},
            "samples_s": {k: [round(x, 3) for x in v] for k, v in times.items()},
            "setup_over_copy": round(med["setup"] / med["copy"], 2),
            "loadavg": loadavg(),
        }
        if args.json:
            print(json.dumps(result, indent=2))
        else:
            print(f"node_modules: {result['node_modules_mb']} MB, copied by {', '.join(how) or '?'}")
            print(f"{'first healthy up of a new world':<36} {'median':>8}  samples")
            for k in ("copy", "setup"):
                label = "copy = [\"node_modules\"]" if k == "copy" else "setup = [\"npm ci …\"]"
                print(f"{label:<36} {med[k]:>7.2f}s  {', '.join(f'{x:.2f}' for x in times[k])}")
            print(f"setup ÷ copy: {result['setup_over_copy']}×")
        return 0
    finally:
        # The daemon stops the worlds' processes with it; the folders go.
        subprocess.run([str(binky), "daemon", "stop"], env=env, capture_output=True)
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    try:
        sys.exit(main())
    except BenchError as e:
        log(f"error: {e}")
        sys.exit(1)
