#!/usr/bin/env python3
"""Binky's standing chaos test: seeded operations, kills at random moments, invariants.

    python3 tests/chaos/driver.py --binky target/debug/binky --seed 7 --ops 400 --time-limit 600

One run per seed. Each run makes its own state folder (`BINKY_HOME` in a temporary folder,
never `~/.binky`) and two projects (temporary git repositories) named `ck<run id>a` and
`ck<run id>b`, so everything the run makes on a server starts with its own prefix:

- `a`: postgres with a golden template (`clone_from`), redis with `acl = true`, a service
  that serves HTTP and forks a child that calls `setsid()`, and a worker busy in a long
  query (psql) on the world's database;
- `b`: mysql/mariadb, rabbitmq, sqlite with a golden template, and a service like `a`'s.

Every process a world starts carries `-X chaos-<run>-<a|b>-<world>-<service>` in its argv
(`svc.py`), so the driver finds them in /proc.

Worker threads (`--workers`, each with its own generator seeded from `--seed`) run
`--ops` operations between them: `up` (waiting, `--no-wait`, `--group`), `down`, `reload`,
`reset` (one slice or `--all`, sometimes `--force`), `remove --force`, `gc` (and
`--dry-run`), `reserve --max-parallel`, `kill -9` of the daemon (alone, or in the middle
of a verb), `kill -9` of a service's process or its `setsid()` child, bursts of commands
at once, and psql sessions opened on a world's database by someone who is not Binky. A
waiting verb is cancelled with SIGINT (Ctrl-C) after a random wait. `--time-limit` stops
starting operations; what runs is let finish. The sequence of operations of each worker is
fixed by the seed; how they interleave with each other and with the daemon is not, so a
failure replays as the same operations, usually with the same outcome.

Invariants, checked while it runs (a monitor thread) and at the end:

- no process of a world alive once its `down` or `remove` returned 0, unless a verb that
  starts it began since (one that was in flight while the `down` ran counts as began);
- no service of a world running twice: no process of an earlier instance left beside a
  newer one, e.g. a `setsid()` child that survived its service's restart;
- no world listed twice, no port held by two worlds, every port inside its project's
  `port_range` (`binky status --json`);
- admission never pushes the number of running or starting worlds above `max_parallel`:
  a world that newly holds a slot while more than the highest limit in effect do is a
  violation (lowering the limit stops nothing, so worlds above it are fine until then);
  a world's `reload`/`reset` keeps the slot it holds and is not an admission;
- a verb on a world that holds a slot never waits in the queue behind it;
- every process of a world runs while `binky status` lists the world;
- every failed verb's message names its world and its verb; Ctrl-C (SIGINT) is always
  answered by a cancellation, never by the signal's own death; no command hangs;
- a psql session Binky did not open on a world's database survives everything but
  `remove --force` and `reset --force` of that world; one on the admin database survives all;
- no verb fails over a session of a world's own service (the worker's psql names itself):
  Binky started that service, so its sessions are Binky's to end;
- after the run: every world can be brought up again (nothing a crash left makes Binky
  refuse its own objects), each has its slices on the servers; after `down` nothing of it
  runs; after `remove --force` of every world and `binky gc`, nothing of the run is left
  on any server (postgres databases and roles, mysql databases and users, redis keys and
  ACL users, rabbitmq vhosts and users), in the state folder's slices, as a worktree or
  as a process; the objects, session and files planted with the run's prefix (Binky
  did not make them) are untouched; `pragma integrity_check` of `registry.db` is ok; no
  panic in `daemon.log`.

Exit 0 when every invariant held; 1 with the violations, the seed and the operation log;
3 (`--check-servers`) when a server is missing. Needs psql, mysql, redis-cli, git and
Python 3.11 (standard library only); servers on 127.0.0.1: PostgreSQL :5432 (user
postgres, trust), MySQL/MariaDB :3306 (root, no password), Redis :6379, RabbitMQ :5672
with management on :15672 (guest/guest).
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import random
import re
import secrets
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
import traceback
import urllib.parse
import urllib.request
from collections import defaultdict
from dataclasses import dataclass, field

HERE = os.path.dirname(os.path.abspath(__file__))
PG = "postgresql://postgres@127.0.0.1:5432"
MYSQL = ["mysql", "-h127.0.0.1", "-P3306", "-uroot", "-N", "-B"]
REDIS = ["redis-cli", "-h", "127.0.0.1", "-p", "6379"]
RMQ = "http://127.0.0.1:15672/api"
WORLDS = ["amber", "brook", "cedar"]
SERVICES = {"a": ["app", "worker"], "b": ["web"]}
RESOURCES = {"a": ["db", "cache"], "b": ["db", "mq", "lite"]}
INF = float("inf")
# How long a process may take to vanish after the verb that stopped it returned 0.
STOP_GRACE = 1.5
# How long a process of an earlier instance may outlive the start of a newer one.
DUP_GRACE = 6.0
VERB_WORDS = {
    "up": r"\bup\b",
    "reload": r"\breload",
    "reset": r"\breset",
    "down": r"\bdown\b",
    "remove": r"\bremov",
}
STARTERS = ("up", "reload", "reset")
STOPPERS = ("down", "remove")


# ---------------------------------------------------------------- servers


def run(cmd, timeout=30, input=None, env=None):
    return subprocess.run(
        cmd, capture_output=True, text=True, timeout=timeout, input=input, env=env
    )


def psql(sql, db="postgres"):
    p = run(["psql", f"{PG}/{db}", "-tAXq", "-v", "ON_ERROR_STOP=1", "-c", sql])
    if p.returncode != 0:
        raise RuntimeError(f"psql {sql!r}: {p.stderr.strip()}")
    return [line for line in p.stdout.splitlines() if line]


def mysql(sql):
    p = run(MYSQL + ["-e", sql])
    if p.returncode != 0:
        raise RuntimeError(f"mysql {sql!r}: {p.stderr.strip()}")
    return [line for line in p.stdout.splitlines() if line]


def redis(*args):
    p = run(REDIS + list(args))
    if p.returncode != 0:
        raise RuntimeError(f"redis-cli {args}: {p.stderr.strip()}")
    return [line for line in p.stdout.splitlines() if line]


def rmq(method, path, body=None):
    req = urllib.request.Request(
        RMQ + path,
        method=method,
        data=None if body is None else json.dumps(body).encode(),
        headers={
            "Authorization": "Basic " + base64.b64encode(b"guest:guest").decode(),
            "Content-Type": "application/json",
        },
    )
    with urllib.request.urlopen(req, timeout=30) as r:
        text = r.read()
    return json.loads(text) if text else None


def q(name):
    return urllib.parse.quote(name, safe="")


def missing_servers():
    """What this machine lacks for a run, one line each."""
    out = []
    for tool in ("psql", "mysql", "redis-cli", "git"):
        if shutil.which(tool) is None:
            out.append(f"`{tool}` is not on PATH")
    if out:
        return out
    checks = [
        ("PostgreSQL on 127.0.0.1:5432 (user postgres)", lambda: psql("select 1")),
        ("MySQL/MariaDB on 127.0.0.1:3306 (root)", lambda: mysql("select 1")),
        ("Redis on 127.0.0.1:6379", lambda: redis("ping")),
        (
            "RabbitMQ's management API on 127.0.0.1:15672 (guest/guest; "
            "`rabbitmq-plugins enable rabbitmq_management`)",
            lambda: rmq("GET", "/overview"),
        ),
    ]
    for what, check in checks:
        try:
            check()
        except Exception as e:  # noqa: BLE001 - any failure means "missing"
            out.append(f"no {what}: {e}")
    return out


# ---------------------------------------------------------------- helpers


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def free_range(n, avoid=()):
    """`n` consecutive free ports below the ephemeral range."""
    rng = random.Random()
    for _ in range(500):
        lo = rng.randrange(25000, 32768 - n)
        ports = range(lo, lo + n)
        if any(p in avoid for p in ports):
            continue
        ok = True
        for p in ports:
            with socket.socket() as s:
                try:
                    s.bind(("127.0.0.1", p))
                except OSError:
                    ok = False
                    break
        if ok:
            return lo, lo + n - 1
    raise RuntimeError(f"no run of {n} free ports")


def parse_range(text):
    lo, hi = text.split(":")
    return int(lo), int(hi)


def start_time(pid):
    """A process's start time (clock ticks since boot), or None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            stat = f.read()
    except OSError:
        return None
    rest = stat.rsplit(")", 1)[1].split()
    if rest[0] in ("Z", "X"):
        return None
    return int(rest[19])


@dataclass
class Proc:
    pid: int
    key: tuple
    svc: str
    instance: int
    start: int
    cmd: str


@dataclass
class Result:
    rc: int
    out: str
    err: str
    dur: float
    cancelled: bool = False
    hung: bool = False

    def text(self):
        return (self.err + "\n" + self.out).strip()

    def first_error(self):
        lines = [
            line
            for line in self.text().splitlines()
            if line.strip() and not line.startswith("·")
        ]
        return lines[0][:200] if lines else ""


@dataclass
class WorldView:
    """What the driver knows of one world, for the invariants."""

    gen: int = 0
    starters: int = 0
    stoppers: int = 0
    quiet_since: float | None = None
    last_stopper_start: float = -INF
    ops: list = field(default_factory=list)  # (verb, flags, start, end)
    inflight: dict = field(default_factory=dict)  # token -> (verb, flags, start, None)


@dataclass
class Session:
    key: tuple
    app: str
    proc: subprocess.Popen
    backend: int
    opened: float
    close_at: float


class Violation(Exception):
    pass


# ---------------------------------------------------------------- the run


class Chaos:
    def __init__(self, args, seed):
        self.args = args
        self.seed = seed
        self.binky_path = os.path.abspath(args.binky)
        self.run_id = secrets.token_hex(3)
        self.prefix = f"ck{self.run_id}"
        self.names = {"a": self.prefix + "a", "b": self.prefix + "b"}
        self.marker = f"chaos-{self.run_id}-"
        self.marker_re = re.compile(
            rf"chaos-{self.run_id}-(a|b)-([a-z]+)-([a-z]+)"
        )
        self.tmp = tempfile.mkdtemp(prefix="bkc", dir="/tmp")
        self.home = os.path.join(self.tmp, "h")
        self.t0 = time.monotonic()
        self.deadline = self.t0 + args.time_limit
        self.lock = threading.RLock()
        self.log_lines = []
        self.violations = []
        self.reported = set()
        self.worlds = {(t, w): WorldView() for t in "ab" for w in WORLDS}
        self.limit_hist = []  # dicts: start, end, value, ok
        self.slot_ops = []  # (key, start, end-or-None, held)
        self.samples = []  # (start, end, S)
        self.daemon_kills = []
        self.service_kills = 0
        self.counts_samples = 0
        self.states = {}
        self.counts = defaultdict(int)
        self.failures = defaultdict(int)
        self.sessions = []
        self.session_n = 0
        self.first_seen = {}
        self.dup_since = {}
        self.stop_monitor = threading.Event()
        self.abort = False
        self.admin_session = None
        self.planted = {}
        ranges = {"a": args.port_range_a, "b": args.port_range_b}
        taken = set()
        self.ranges = {}
        for t in "ab":
            r = parse_range(ranges[t]) if ranges[t] else free_range(8, taken)
            taken.update(range(r[0], r[1] + 1))
            self.ranges[t] = r
        env = {k: v for k, v in os.environ.items() if not k.startswith("BINKY_")}
        env.update(
            BINKY_HOME=self.home,
            NO_COLOR="1",
            BINKY_PROXY_PORT=str(free_port()),
            BINKY_HTTPS_PORT=str(free_port()),
            PYTHONDONTWRITEBYTECODE="1",
        )
        self.env = env

    # ------------------------------------------------------------ log

    def now(self):
        return time.monotonic() - self.t0

    def log(self, who, text):
        line = f"{self.now():8.3f} {who:<8} {text}"
        with self.lock:
            self.log_lines.append(line)
        if self.args.verbose:
            print(line, flush=True)

    def violate(self, what, once=None):
        with self.lock:
            if once is not None:
                if once in self.reported:
                    return
                self.reported.add(once)
            self.violations.append(f"[{self.now():.3f}] {what}")
        self.log("VIOLATE", what.splitlines()[0][:300])

    # ------------------------------------------------------------ binky

    def binky(self, args, cwd=None, timeout=120.0, cancel_after=None):
        """Runs the CLI. A waiting verb gets SIGINT after `cancel_after` s (Ctrl-C);
        anything still running 30 s after that, or after `timeout`, is a hang."""
        start = time.monotonic()
        p = subprocess.Popen(
            [self.binky_path] + args,
            cwd=cwd or self.tmp,
            env=self.env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        cancelled = hung = False
        try:
            out, err = p.communicate(timeout=cancel_after or timeout)
        except subprocess.TimeoutExpired:
            if cancel_after is not None:
                cancelled = True
                where = self.blocked_in(p.pid)
                p.send_signal(signal.SIGINT)
                try:
                    out, err = p.communicate(timeout=30)
                except subprocess.TimeoutExpired:
                    hung = True
            else:
                hung = True
            if hung:
                p.kill()
                out, err = p.communicate()
                self.violate(
                    f"hang: `binky {' '.join(args)}` did not end "
                    + (
                        f"30 s after SIGINT (sent after {cancel_after:.1f} s)"
                        if cancel_after
                        else f"within {timeout:.0f} s"
                    )
                    + f"; its output:\n{(err + out)[-2000:]}"
                )
        if cancelled and p.returncode == -signal.SIGINT:
            self.violate(
                f"Ctrl-C ended `binky {' '.join(args)}` by the signal itself (no message, no "
                f"cancellation) after {time.monotonic() - start:.1f} s, having printed "
                + (f"only:\n{(err + out)[-800:]}" if (err + out).strip() else "nothing")
                + f"\nbefore the SIGINT it was blocked in: {where}",
                once=("sigint", args[0], bool((err + out).strip())),
            )
        return Result(p.returncode, out, err, time.monotonic() - start, cancelled, hung)

    def blocked_in(self, pid):
        """Where a CLI waits (each thread's kernel wait channel, its open files), for a
        report."""
        parts = []
        try:
            for tid in sorted(os.listdir(f"/proc/{pid}/task")):
                with open(f"/proc/{pid}/task/{tid}/wchan") as f:
                    wchan = f.read().strip()
                with open(f"/proc/{pid}/task/{tid}/comm") as f:
                    comm = f.read().strip()
                parts.append(f"thread {tid} ({comm}) in {wchan or '?'}")
            fds = []
            for fd in sorted(os.listdir(f"/proc/{pid}/fd"), key=int):
                try:
                    fds.append(f"{fd}→{os.readlink(f'/proc/{pid}/fd/{fd}')}")
                except OSError:
                    pass
            parts.append("fds " + ", ".join(fds))
        except OSError as e:
            parts.append(f"(cannot read /proc/{pid}: {e})")
        return "; ".join(parts)

    # ------------------------------------------------------------ setup

    def project_toml(self, tag):
        lo, hi = self.ranges[tag]
        restart = (
            'restart = { policy = "on-failure", backoff = "300ms", max_backoff = "2s", '
            'max_failures = 100, failure_window = "60s" }\nstop_timeout = "3s"\n'
        )
        health = 'health = { http = "/", timeout = "30s", interval = "100ms" }\n'
        mark = f"chaos-{self.run_id}-{tag}-${{worktree.name}}"
        head = f'[project]\nname = "{self.names[tag]}"\nport_range = [{lo}, {hi}]\n\n'
        if tag == "a":
            return head + (
                '[services.db]\nadapter = "postgres"\n'
                f'admin_url = "{PG}/postgres"\n'
                'migrate = "python3 migrate.py pg migrate"\n'
                'seed = "python3 migrate.py pg seed"\n'
                'clone_from = "golden"\nclone_inputs = ["migrations/*.sql"]\n\n'
                '[services.cache]\nadapter = "redis"\noptions = { acl = true }\n\n'
                "[services.app]\n"
                f'cmd = "exec python3 -X {mark}-app=1 svc.py app ${{self.port}}"\n'
                'url = "app"\n' + health + 'depends_on = ["db", "cache"]\n'
                'env = { DB_URL = "${db.url}", CACHE_URL = "${cache.url}" }\n'
                + restart
                + "\n[services.worker]\n"
                f'cmd = "exec python3 -X {mark}-worker=1 svc.py worker"\n'
                'depends_on = ["db"]\nenv = { DB_URL = "${db.url}" }\n' + restart
            )
        return head + (
            '[services.db]\nadapter = "mysql"\n'
            'admin_url = "mysql://root@127.0.0.1:3306/"\n'
            'migrate = "python3 migrate.py mysql migrate"\n'
            'seed = "python3 migrate.py mysql seed"\n\n'
            '[services.mq]\nadapter = "rabbitmq"\n\n'
            '[services.lite]\nadapter = "sqlite"\n'
            'migrate = "python3 migrate.py sqlite migrate"\n'
            'seed = "python3 migrate.py sqlite seed"\n'
            'clone_from = "golden"\nclone_inputs = ["migrations/*.sql"]\n\n'
            "[services.web]\n"
            f'cmd = "exec python3 -X {mark}-web=1 svc.py app ${{self.port}}"\n'
            'url = "web"\n' + health + 'depends_on = ["db", "mq", "lite"]\n'
            'env = { DB_URL = "${db.url}", MQ_URL = "${mq.url}", LITE_URL = "${lite.url}" }\n'
            + restart
        )

    def main_dir(self, tag):
        return os.path.join(self.tmp, tag, "app")

    def worktree_root(self, tag):
        return os.path.join(self.tmp, tag, "app.worktrees")

    def setup(self):
        os.makedirs(self.home, mode=0o700)
        for tag in "ab":
            main = self.main_dir(tag)
            os.makedirs(os.path.join(main, "migrations"))
            for f in ("svc.py", "migrate.py"):
                shutil.copy(os.path.join(HERE, f), main)
            with open(os.path.join(main, "migrations", "001.sql"), "w") as f:
                f.write("create table if not exists items(n int);\n")
            with open(os.path.join(main, "binky.toml"), "w") as f:
                f.write(self.project_toml(tag))
            git = ["git", "-c", "user.name=chaos", "-c", "user.email=chaos@example.com"]
            for cmd in (["init", "-q", "-b", "main"], ["add", "-A"], ["commit", "-qm", "init"]):
                p = subprocess.run(git + cmd, cwd=main, capture_output=True, text=True)
                if p.returncode != 0:
                    raise RuntimeError(f"git {cmd}: {p.stderr}")
            res = self.binky(["check"], cwd=main)
            if res.rc != 0:
                raise RuntimeError(f"binky check of project {tag}:\n{res.text()}")
        res = self.binky(["reserve", "--max-parallel", "3", "--ram", "0", "--disk", "0"])
        if res.rc != 0:
            raise RuntimeError(f"binky reserve: {res.text()}")
        self.limit_hist.append(dict(start=-INF, end=-INF, value=3, ok=True))
        self.plant()

    def plant(self):
        """Things with the run's prefix that Binky did not make: all must survive."""
        a, b = self.names["a"], self.names["b"]
        fa, fb = f"{a}_zzforeign", f"{b}_zzforeign"
        psql(f'create database "{fa}"')
        psql(f"create role \"{fa}\" login password 'foreign'")
        mysql(f"create database `{fb}`")
        mysql(f"create user '{fb}'@'%' identified by 'foreign'")
        redis("set", f"{a}:zzforeign:k", "foreign")
        redis("acl", "setuser", fa, "on", ">foreign", f"~{a}:zzforeign:*", "+get")
        rmq("PUT", f"/vhosts/{q(fb)}", {})
        rmq("PUT", f"/users/{q(fb)}", {"password": "foreign", "tags": ""})
        self.planted = {
            "pg_db": fa,
            "pg_role": fa,
            "mysql_db": fb,
            "mysql_user": fb,
            "redis_key": f"{a}:zzforeign:k",
            "redis_user": fa,
            "rmq_vhost": fb,
            "rmq_user": fb,
        }
        self.planted_files = {}
        for tag in "ab":
            root = self.worktree_root(tag)
            os.makedirs(os.path.join(root, "zzforeign-dir"))
            for path in (
                os.path.join(root, "zzforeign.txt"),
                os.path.join(root, "zzforeign-dir", "note.txt"),
                os.path.join(self.main_dir(tag), "zzforeign-untracked.txt"),
            ):
                text = f"not Binky's {secrets.token_hex(4)}\n"
                with open(path, "w") as f:
                    f.write(text)
                self.planted_files[path] = text
        # A session on the admin database, inside a transaction.
        app = f"chaos-{self.run_id}-admin"
        proc = subprocess.Popen(
            ["psql", f"{PG}/postgres?application_name={app}", "-qX"],
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        proc.stdin.write("begin;\nselect 1;\n")
        proc.stdin.flush()
        backend = self.wait_backend(app)
        if backend is None:
            raise RuntimeError("the admin session did not open")
        self.admin_session = (app, proc, backend)

    def wait_backend(self, app, timeout=5.0):
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            rows = psql(f"select pid from pg_stat_activity where application_name = '{app}'")
            if rows:
                return int(rows[0])
            time.sleep(0.1)
        return None

    # ------------------------------------------------------------ processes

    def scan(self):
        """Every live process of the run, by its marker."""
        out = []
        me = os.getpid()
        for d in os.listdir("/proc"):
            if not d.isdigit() or int(d) == me:
                continue
            try:
                with open(f"/proc/{d}/cmdline", "rb") as f:
                    raw = f.read()
            except OSError:
                continue
            if self.marker.encode() not in raw:
                continue
            cmd = raw.replace(b"\0", b" ").decode(errors="replace").strip()
            m = self.marker_re.search(cmd)
            if not m:
                continue
            st = start_time(int(d))
            if st is None:
                continue
            parent = re.search(r"chaosparent=(\d+)", cmd)
            pid = int(d)
            out.append(
                Proc(
                    pid,
                    (m.group(1), m.group(2)),
                    m.group(3),
                    int(parent.group(1)) if parent else pid,
                    st,
                    cmd,
                )
            )
        return out

    def describe(self, procs):
        return "; ".join(f"pid {p.pid} (instance {p.instance}): {p.cmd[:160]}" for p in procs)

    def check_quiet_now(self, key, verb, gen):
        """Right after `verb` returned 0: nothing of the world may run."""
        end = time.monotonic() + STOP_GRACE
        while True:
            procs = [p for p in self.scan() if p.key == key]
            with self.lock:
                w = self.worlds[key]
                if w.gen != gen or w.quiet_since is None:
                    return
            if not procs:
                return
            if time.monotonic() >= end:
                self.violate(
                    f"`{verb} {key[1]}` (project {self.names[key[0]]}) returned 0 but "
                    f"{len(procs)} process(es) of the world still run {STOP_GRACE} s later, "
                    f"and no verb that starts it began since: {self.describe(procs)}",
                    once=("quiet", key, gen),
                )
                return
            time.sleep(0.1)

    def check_processes(self):
        """Monitor: no process of a quiet world; no service running twice."""
        with self.lock:
            snap = {
                k: (w.gen, w.quiet_since)
                for k, w in self.worlds.items()
                if w.quiet_since is not None
            }
        procs = self.scan()
        now = time.monotonic()
        with self.lock:
            for key, (gen, since) in snap.items():
                w = self.worlds[key]
                if w.gen != gen or w.quiet_since != since or now - since < STOP_GRACE + 0.5:
                    continue
                found = [p for p in procs if p.key == key]
                if found:
                    self.violate(
                        f"world {key[1]} of project {self.names[key[0]]} was stopped "
                        f"({now - since:.1f} s ago its `down`/`remove` returned 0, and no verb "
                        f"that starts it began since) yet {len(found)} process(es) of it run: "
                        f"{self.describe(found)}",
                        once=("quiet", key, gen),
                    )
        by_service = defaultdict(lambda: defaultdict(list))
        for p in procs:
            by_service[(p.key, p.svc)][p.instance].append(p)
        for (key, svc), instances in by_service.items():
            if len(instances) < 2:
                for inst in instances:
                    self.dup_since.pop((key, svc, inst), None)
                continue
            started = {i: min(p.start for p in ps) for i, ps in instances.items()}
            newest = max(started, key=lambda i: started[i])
            for inst, ps in instances.items():
                if inst == newest:
                    continue
                since = self.dup_since.setdefault((key, svc, inst), now)
                if now - since > DUP_GRACE:
                    self.violate(
                        f"service {svc} of world {key[1]} (project {self.names[key[0]]}) runs "
                        f"twice: process(es) of an earlier instance (its first process was pid "
                        f"{inst}) still run {now - since:.0f} s after a newer instance "
                        f"(pid {newest}) appeared: {self.describe(ps)}; newer: "
                        f"{self.describe(instances[newest])}",
                        once=("dup", key, svc, inst),
                    )

    # ------------------------------------------------------------ status

    def limit_max(self, t0, t1):
        """The highest `max_parallel` that may have been in effect in [t0, t1]."""
        values = []
        with self.lock:
            hist = list(self.limit_hist)
        for c in hist:
            if c["start"] > t1:
                continue
            c_end = INF if c["end"] is None else c["end"]
            superseded = any(
                d["ok"] and d["end"] is not None and d["start"] > c_end and d["end"] < t0
                for d in hist
            )
            if not superseded:
                values.append(INF if c["value"] == 0 else c["value"])
        return max(values) if values else INF

    def held_slot(self, key):
        with self.lock:
            return any(key in s for (_, _, s) in self.samples[-2:])

    def status(self):
        """`binky status --json` as {(tag, world): world JSON}, with when it was read; None
        when it failed (a daemon just killed)."""
        t_start = time.monotonic()
        res = self.binky(["status", "--json"], timeout=60)
        t_end = time.monotonic()
        if res.rc != 0:
            self.log("monitor", f"status rc={res.rc}: {res.first_error()}")
            return None
        try:
            doc = json.loads(res.out)
        except ValueError:
            self.violate(f"`binky status --json` printed no JSON:\n{res.out[:500]}")
            return None
        return doc, t_start, t_end

    def worlds_of(self, doc):
        by_name = {v: k for k, v in self.names.items()}
        out = {}
        for proj in doc.get("projects", []):
            tag = by_name.get(proj.get("name"))
            if tag is not None:
                for w in proj.get("worlds", []):
                    out[(tag, w.get("name"))] = w
        return out

    def sample(self):
        before = {(p.pid, p.start): p for p in self.scan()}
        got = self.status()
        if got is None:
            return
        doc, t_start, t_end = got
        self.judge_status(doc, t_start, t_end)
        # A process alive before and after the status read was alive while it was read:
        # its world must be listed.
        listed = self.worlds_of(doc)
        unlisted = [
            p for p in self.scan() if (p.pid, p.start) in before and p.key not in listed
        ]
        for key in sorted({p.key for p in unlisted}):
            procs = [p for p in unlisted if p.key == key]
            self.violate(
                f"processes of world {key[1]} (project {self.names[key[0]]}) run, but "
                f"`binky status` does not list the world: {self.describe(procs)}",
                once=("unlisted", key, procs[0].pid),
            )

    def judge_status(self, doc, t_start, t_end):
        """The invariants one `binky status --json` shows, read over [t_start, t_end]."""
        with self.lock:
            self.counts_samples += 1
        running = set()
        ports = {}
        by_name = {v: k for k, v in self.names.items()}
        for proj in doc.get("projects", []):
            tag = by_name.get(proj.get("name"))
            if tag is None:
                continue
            seen = set()
            lo, hi = self.ranges[tag]
            for w in proj.get("worlds", []):
                name = w.get("name")
                if name in seen:
                    self.violate(
                        f"world {name} is listed twice in project {proj['name']}",
                        once=("twice", tag, name),
                    )
                seen.add(name)
                key = (tag, name)
                if w.get("state") in ("running", "starting"):
                    running.add(key)
                for s in w.get("services", []):
                    held = [s.get("port")] + list((s.get("ports") or {}).values())
                    for port in held:
                        if port is None:
                            continue
                        other = ports.get(port)
                        if other is not None and other != key:
                            self.violate(
                                f"port {port} is held by two worlds: {other[1]} "
                                f"({self.names[other[0]]}) and {name} ({proj['name']})",
                                once=("port", port, other, key),
                            )
                        ports[port] = key
                        if not lo <= port <= hi:
                            self.violate(
                                f"world {name} ({proj['name']}) holds port {port}, outside "
                                f"its project's port_range [{lo}, {hi}]",
                                once=("range", port, key),
                            )
        states = {k: w.get("state") for k, w in self.worlds_of(doc).items()}
        with self.lock:
            changed = [
                f"{k[1]}@{k[0]} {self.states.get(k, '-')}→{states.get(k, '-')}"
                for k in sorted(set(states) | set(self.states))
                if states.get(k) != self.states.get(k)
            ]
            self.states = states
        if changed:
            self.log("monitor", "status: " + ", ".join(changed))
        with self.lock:
            prev = self.samples[-1] if self.samples else None
            self.samples.append((t_start, t_end, running))
            if len(self.samples) > 50:
                del self.samples[:-50]
        if prev is not None:
            newcomers = running - prev[2]
            limit = self.limit_max(prev[0], t_end)
            if newcomers and len(running) > limit:
                with self.lock:
                    kept = {
                        k
                        for (k, start, end, held) in self.slot_ops
                        if held
                        and start <= t_end
                        and (end is None or end >= prev[0])
                    }
                admitted = newcomers - kept
                if admitted:
                    self.violate(
                        f"{len(running)} worlds run or start "
                        f"({', '.join(sorted(f'{k[1]}@{k[0]}' for k in running))}) where "
                        f"max_parallel was at most {limit}: the count rose above the limit as "
                        f"{', '.join(sorted(f'{k[1]}@{k[0]}' for k in admitted))} took a slot "
                        f"(not by the reload/reset of a world that held one; which world took "
                        f"its slot without room, the daemon's events say). Its last events:\n"
                        + self.recent_events(),
                        once=("parallel", frozenset(running)),
                    )

    def recent_events(self, n=14):
        """The last `n` events of `events.log` that say how worlds took and left slots."""
        kinds = {
            "admitted", "admission_queued", "admission_withdrawn", "up_started", "up",
            "up_failed", "up_cancelled", "down", "removed", "interrupted", "reset",
            "settings_changed", "daemon_started",
        }
        try:
            with open(os.path.join(self.home, "events.log"), errors="replace") as f:
                lines = f.read().splitlines()
        except OSError:
            return "  (no events.log)"
        out = []
        for line in lines:
            try:
                e = json.loads(line)
            except ValueError:
                continue
            if e.get("event") in kinds:
                tag = {v: k for k, v in self.names.items()}.get(e.get("project"), "")
                world = f" {e.get('worktree')}@{tag}" if e.get("worktree") else ""
                out.append(f"  {e.get('ts')} {e.get('event')}{world} {(e.get('detail') or '')[:110]}")
        return "\n".join(out[-n:])

    def monitor(self):
        while not self.stop_monitor.is_set():
            try:
                self.sample()
                self.check_processes()
                self.expire_sessions()
            except Exception:  # noqa: BLE001 - the monitor must not die silently
                self.violate(f"driver error in the monitor:\n{traceback.format_exc()}")
            self.stop_monitor.wait(self.args.monitor_interval)

    # ------------------------------------------------------------ verbs

    def world_op(self, who, verb, key, flags=(), cancel_after=None):
        tag, name = key
        label = f"{verb} {name}@{tag}" + ("".join(f" {f}" for f in flags))
        now = time.monotonic()
        with self.lock:
            w = self.worlds[key]
            if verb in STARTERS:
                w.gen += 1
                w.starters += 1
                w.quiet_since = None
                clean, gen0 = False, w.gen
            else:
                w.stoppers += 1
                w.last_stopper_start = now
                clean, gen0 = w.starters == 0, w.gen
            maybe_held = verb in STARTERS and any(key in smp[2] for smp in self.samples[-2:])
            token = object()
            w.inflight[token] = (verb, tuple(flags), now, None)
            slot_op = None
            if verb in ("reload", "reset"):
                slot_op = [key, now, None, self.held_slot(key)]
                self.slot_ops.append(slot_op)
            self.counts[verb] += 1
        held = None
        if maybe_held:
            # Does the world hold a slot right now? Read just before the verb, so that only
            # a few milliseconds separate what was read from the verb's own look.
            got = self.status()
            if got is not None:
                state = self.worlds_of(got[0]).get(key, {}).get("state")
                with self.lock:
                    quiet = self.worlds[key].stoppers == 0 and not any(
                        k > got[1] for k in self.daemon_kills
                    )
                if state == "running" and quiet:
                    held = got[1]
        self.log(who, f"-> {label}")
        waits = verb in STARTERS and "--no-wait" not in flags
        if cancel_after is not None:
            # A waiting verb near the time limit is cancelled sooner, so the run stays bounded.
            cancel_after = min(cancel_after, max(3.0, self.deadline + 5 - time.monotonic()))
        res = self.binky(
            [verb, name] + list(flags),
            cwd=self.main_dir(tag),
            cancel_after=cancel_after if waits else None,
        )
        end = time.monotonic()
        quiet = False
        with self.lock:
            w = self.worlds[key]
            del w.inflight[token]
            w.ops.append((verb, tuple(flags), now, end))
            if verb in STARTERS:
                w.starters -= 1
            else:
                w.stoppers -= 1
                if res.rc == 0 and clean and w.gen == gen0 and w.starters == 0:
                    w.quiet_since = end
                    quiet = True
            if slot_op is not None:
                idx = next(i for i, s in enumerate(self.slot_ops) if s is slot_op)
                self.slot_ops[idx] = (slot_op[0], slot_op[1], end, slot_op[3])
            if res.rc != 0:
                self.failures[verb] += 1
        note = " (cancelled with SIGINT)" if res.cancelled else ""
        self.log(
            who,
            f"<- {label} rc={res.rc} {res.dur:.1f}s{note}"
            + (f" | {res.first_error()}" if res.rc != 0 else ""),
        )
        if res.rc != 0 and not res.hung and res.rc != -signal.SIGINT:
            self.check_message(verb, name, tag, res)
            self.check_own_sessions(label, res)
        if (
            held is not None
            and "queued:" in res.err
            and not any(k > held for k in self.daemon_kills)
            and not any(o[0] in STOPPERS for o in self.overlapping(key, held, end))
            # Another verb starting the world at the same time may fail and give the slot up.
            and sum(o[0] in STARTERS for o in self.overlapping(key, held, end)) == 1
        ):
            self.violate(
                f"`{label}` waited in the admission queue although its world held a slot "
                f"(`binky status` said `running` {now - held:.2f} s before the verb began, and "
                f"no down, remove or daemon kill came between): a verb never queues behind "
                f"its own world. Its output:\n{res.text()[:1500]}",
                once=("queued-own", key, now),
            )
        if quiet:
            self.check_quiet_now(key, verb, gen0)
        return res

    def overlapping(self, key, t0, t1):
        """The verbs on world `key` that ran at some moment of [t0, t1], finished or not."""
        with self.lock:
            w = self.worlds[key]
            return [
                o
                for o in w.ops + list(w.inflight.values())
                if o[2] <= t1 and (o[3] is None or o[3] >= t0)
            ]

    def check_own_sessions(self, label, res):
        """A verb never refuses over a session of a world's own service: Binky started the
        service, so the session is Binky's to end (its worker's psql names itself)."""
        own = sorted(set(re.findall(rf"application (chaos-{self.run_id}-[ab]-[a-z]+-[a-z]+)", res.text())))
        if own:
            self.violate(
                f"`{label}` failed over session(s) of a world's own service ({', '.join(own)}), "
                f"which Binky started and stopped; it called them sessions Binky did not open:\n"
                + res.first_error()[:200]
                + "\n"
                + "\n".join(line for line in res.text().splitlines() if "application" in line)[-1200:],
                once=("own-session", label.split()[0], tuple(own)),
            )

    def normalise(self, text):
        """`text` with the run's names and numbers made generic, so one kind of message
        is reported once."""
        text = text.replace(self.run_id, "RUN")
        text = re.sub(r"\b(" + "|".join(WORLDS) + r")\b", "WORLD", text)
        return re.sub(r"\d+(\.\d+)?", "N", text)[-300:]

    def check_message(self, verb, world, tag, res):
        # The failure as said, without the progress lines (`· …`) that came before it.
        text = "\n".join(
            line for line in res.text().splitlines() if not line.startswith("· ")
        )
        names_world = re.search(rf"(?<![a-z0-9-]){re.escape(world)}(?![a-z0-9])", text)
        names_verb = re.search(VERB_WORDS[verb], text, re.IGNORECASE)
        if not (names_world and names_verb):
            missing = " and ".join(
                x
                for x, ok in (("its world", names_world), ("its verb", names_verb))
                if not ok
            )
            self.violate(
                f"`binky {verb} {world}` (project {self.names[tag]}) failed (rc {res.rc}) with "
                f"a message that does not name {missing}:\n{text[-1500:]}",
                once=("message", verb, self.normalise(text)),
            )

    def simple(self, who, args, timeout=120.0):
        self.log(who, f"-> {' '.join(args)}")
        with self.lock:
            self.counts[args[0]] += 1
        res = self.binky(args, timeout=timeout)
        self.log(
            who,
            f"<- {' '.join(args)} rc={res.rc} {res.dur:.1f}s"
            + (f" | {res.first_error()}" if res.rc != 0 else ""),
        )
        if res.rc != 0:
            with self.lock:
                self.failures[args[0]] += 1
            self.check_own_sessions(" ".join(args), res)
        return res

    def reserve(self, who, n):
        entry = dict(start=time.monotonic(), end=None, value=n, ok=False)
        with self.lock:
            self.limit_hist.append(entry)
        res = self.simple(who, ["reserve", "--max-parallel", str(n), "--ram", "0", "--disk", "0"])
        with self.lock:
            entry["end"] = time.monotonic()
            entry["ok"] = res.rc == 0
        return res

    def daemon_pid(self):
        try:
            with open(os.path.join(self.home, "daemon.lock")) as f:
                pid = int(f.read().strip())
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmd = f.read().split(b"\0")
        except (OSError, ValueError):
            return None
        # The daemon is `<this binary> daemon run`; a pid in a stale lock may be reused.
        if len(cmd) < 3 or cmd[1:3] != [b"daemon", b"run"]:
            return None
        if os.path.basename(cmd[0].decode(errors="replace")) != os.path.basename(self.binky_path):
            return None
        return pid

    def kill_daemon(self, who):
        pid = self.daemon_pid()
        if pid is None:
            self.log(who, "kill -9 daemon: none runs")
            return
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            return
        with self.lock:
            self.daemon_kills.append(time.monotonic())
        self.log(who, f"kill -9 daemon pid {pid}")

    def kill_service(self, who, pick, child):
        procs = sorted(self.scan(), key=lambda p: p.pid)
        pool = [p for p in procs if (p.instance != p.pid) == child] or procs
        if not pool:
            self.log(who, "kill -9 service: none runs")
            return
        p = pool[int(pick * len(pool)) % len(pool)]
        try:
            os.kill(p.pid, signal.SIGKILL)
        except ProcessLookupError:
            return
        with self.lock:
            self.service_kills += 1
        kind = "child" if p.instance != p.pid else "service"
        self.log(who, f"kill -9 {kind} {p.svc} of {p.key[1]}@{p.key[0]} pid {p.pid}")

    # ------------------------------------------------------------ sessions

    def open_session(self, who, key, life):
        if key[0] != "a":
            return
        with self.lock:
            self.session_n += 1
            app = f"chaos-{self.run_id}-fs-{self.session_n}"
        db = f"{self.names['a']}_{key[1]}"
        proc = subprocess.Popen(
            ["psql", f"{PG}/{db}?application_name={app}", "-qX"],
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        try:
            proc.stdin.write(
                "begin;\ncreate temp table chaos_t(x int);\ninsert into chaos_t values (1);\n"
            )
            proc.stdin.flush()
        except OSError:
            pass
        backend = None
        end = time.monotonic() + 3.0
        while backend is None and proc.poll() is None and time.monotonic() < end:
            backend = self.wait_backend(app, timeout=0.2)
        if backend is None:
            proc.kill()
            proc.wait()
            self.log(who, f"psql session on {db}: not opened (no database now)")
            return
        now = time.monotonic()
        with self.lock:
            self.sessions.append(Session(key, app, proc, backend, now, now + life))
            self.counts["session"] += 1
        self.log(who, f"psql session {app} (backend {backend}) opened on {db} for {life:.1f}s")

    def close_session(self, s, who="session"):
        rows = psql(
            f"select pid from pg_stat_activity where application_name = '{s.app}'"
        )
        alive = rows == [str(s.backend)]
        try:
            s.proc.stdin.write("commit;\n\\q\n")
            s.proc.stdin.close()
        except OSError:
            pass
        try:
            s.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            s.proc.kill()
            s.proc.wait()
        now = time.monotonic()
        if alive:
            self.log(who, f"psql session {s.app} closed by the driver (it survived)")
            return
        ops = self.overlapping(s.key, s.opened, now)
        exempt = any(o[0] == "remove" or (o[0] == "reset" and "--force" in o[1]) for o in ops)
        self.log(who, f"psql session {s.app} was ended" + (" (forced)" if exempt else ""))
        if not exempt:
            self.violate(
                f"the psql session {s.app} (backend pid {s.backend}) that the driver held on "
                f"world {s.key[1]}'s database was ended, though no `remove --force` or "
                f"`reset --force` of the world ran: verbs on the world meanwhile: "
                + (", ".join(f"{o[0]}{''.join(' ' + f for f in o[1])}" for o in ops) or "none"),
                once=("session", s.app),
            )

    def expire_sessions(self, everything=False):
        now = time.monotonic()
        with self.lock:
            due = [s for s in self.sessions if everything or s.close_at <= now]
            self.sessions = [s for s in self.sessions if s not in due]
        for s in due:
            self.close_session(s)

    # ------------------------------------------------------------ workers

    OPS = [
        ("up", 14),
        ("up_nowait", 8),
        ("down", 10),
        ("reload", 5),
        ("reset", 6),
        ("remove", 6),
        ("gc", 3),
        ("reserve", 4),
        ("kill_daemon", 3),
        ("crash_during", 4),
        ("kill_service", 6),
        ("burst", 4),
        ("session", 3),
        ("pause", 2),
    ]

    def draw(self, rng, allowed=None):
        """One operation and all its random parameters, drawn up front so that each
        worker's sequence depends on the seed alone."""
        ops = [o for o in self.OPS if allowed is None or o[0] in allowed]
        op = rng.choices([o[0] for o in ops], weights=[o[1] for o in ops])[0]
        key = (rng.choice("ab"), rng.choice(WORLDS))
        group = ["-g", f"g{rng.randint(1, 3)}"] if rng.random() < 0.4 else []
        p = dict(op=op, key=key, group=group, cancel=rng.uniform(4, 20))
        if op == "reload":
            p["nowait"] = rng.random() < 0.3
        if op == "reset":
            p["target"] = rng.choice([[r] for r in RESOURCES[key[0]]] + [["--all"]])
            p["force"] = rng.random() < 0.15
        if op == "gc":
            p["dry"] = rng.random() < 0.3
        if op == "reserve":
            p["n"] = rng.choice([1, 2, 2, 3, 3, 4, 0])
        if op == "crash_during":
            p["verb"] = rng.choice(["up", "up", "reload", "reset", "down", "remove"])
            p["delay"] = rng.uniform(0.05, 2.0)
            p["target"] = rng.choice([[r] for r in RESOURCES[key[0]]] + [["--all"]])
        if op == "kill_service":
            p["pick"] = rng.random()
            p["child"] = rng.random() < 0.35
        if op == "burst":
            simple = {"up", "up_nowait", "down", "reload", "reset", "remove", "gc"}
            p["subs"] = [self.draw(rng, simple) for _ in range(rng.randint(2, 4))]
        if op == "session":
            p["key"] = ("a", key[1])
            p["life"] = rng.uniform(3, 12)
        if op == "pause":
            p["secs"] = rng.uniform(0.2, 1.5)
        return p

    def perform(self, who, p):
        op, key = p["op"], p["key"]
        if op == "up":
            self.world_op(who, "up", key, p["group"], cancel_after=p["cancel"])
        elif op == "up_nowait":
            self.world_op(who, "up", key, ["--no-wait"] + p["group"])
        elif op == "down":
            self.world_op(who, "down", key)
        elif op == "reload":
            flags = (["--no-wait"] if p["nowait"] else []) + p["group"]
            self.world_op(who, "reload", key, flags, cancel_after=p["cancel"])
        elif op == "reset":
            flags = p["target"] + (["--force"] if p["force"] else []) + p["group"]
            self.world_op(who, "reset", key, flags, cancel_after=p["cancel"])
        elif op == "remove":
            self.world_op(who, "remove", key, ["--force"])
        elif op == "gc":
            self.simple(who, ["gc"] + (["--dry-run"] if p["dry"] else []))
        elif op == "reserve":
            self.reserve(who, p["n"])
        elif op == "kill_daemon":
            self.kill_daemon(who)
        elif op == "crash_during":
            verb = p["verb"]
            flags = {"remove": ["--force"], "reset": p["target"]}.get(verb, [])
            t = threading.Thread(
                target=self.guard,
                args=(self.world_op, who, verb, key, flags, p["cancel"]),
            )
            t.start()
            time.sleep(p["delay"])
            self.kill_daemon(who)
            t.join()
        elif op == "kill_service":
            self.kill_service(who, p["pick"], p["child"])
        elif op == "burst":
            self.log(who, f"burst of {len(p['subs'])} commands at once")
            threads = [
                threading.Thread(target=self.guard, args=(self.perform, f"{who}.{i}", sub))
                for i, sub in enumerate(p["subs"])
            ]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
        elif op == "session":
            self.open_session(who, key, p["life"])
        elif op == "pause":
            time.sleep(p["secs"])

    def guard(self, fn, *args):
        try:
            fn(*args)
        except Exception:  # noqa: BLE001 - reported as a driver error
            self.violate(f"driver error:\n{traceback.format_exc()}")
            self.abort = True

    def worker(self, i, n_ops):
        rng = random.Random(f"{self.seed}:{i}")
        for n in range(n_ops):
            p = self.draw(rng)
            if time.monotonic() >= self.deadline or self.abort:
                break
            self.expire_sessions()
            self.perform(f"w{i}#{n}", p)

    # ------------------------------------------------------------ the end

    def status_worlds(self):
        got = self.status()
        if got is None:
            raise Violation("`binky status --json` failed at the end, with no daemon killed")
        return self.worlds_of(got[0])

    def finish(self):
        """After the chaos: recovery, then removal, then nothing may be left."""
        self.expire_sessions(everything=True)
        worlds = self.status_worlds()
        states = sorted(f"{k[1]}@{k[0]}:{w.get('state')}" for k, w in worlds.items())
        self.log("end", f"worlds at the end: {', '.join(states)}")
        # Every world stops (one that is queued leaves the queue); then nothing of any world
        # runs, even once the limit is lifted.
        for key in sorted(self.worlds):
            res = self.world_op("end", "down", key)
            if res.rc != 0 and key in worlds:
                self.violate(f"`down {key[1]}` failed after the chaos, with nothing else running: {res.text()[:1500]}")
        self.reserve("end", 0)
        time.sleep(3)
        self.check_processes()
        leftover = self.scan()
        if leftover:
            self.violate(f"processes run after every world was stopped: {self.describe(leftover)}")
        # Every world comes up again: a crash never makes Binky refuse its own objects.
        up = []
        for key in sorted(self.worlds):
            res = self.world_op("end", "up", key)
            if res.rc != 0:
                self.violate(
                    f"after the chaos, `up {key[1]}` (project {self.names[key[0]]}) fails with "
                    f"no kill or other verb running:\n{res.text()[-1500:]}"
                )
            else:
                up.append(key)
        self.check_slices_exist(up)
        self.sample()
        self.check_processes()
        for key in sorted(self.worlds):
            res = self.world_op("end", "remove", key, ["--force"])
            if res.rc != 0:
                self.violate(f"`remove --force {key[1]}` failed after the chaos:\n{res.text()[-1500:]}")
        res = self.simple("end", ["gc"])
        if res.rc != 0:
            self.violate(f"`binky gc` after removing every world exits {res.rc}:\n{res.text()[-2000:]}")
        left = self.status_worlds()
        if left:
            self.violate(f"worlds still listed after `remove` and `gc`: {sorted(left)}")
        self.stop_monitor.set()
        leftover = self.scan()
        if leftover:
            self.violate(f"processes of the run alive after every world was removed: {self.describe(leftover)}")
        self.check_servers_clean()
        self.check_planted()
        self.check_worktrees()
        res = self.simple("end", ["daemon", "stop"], timeout=60)
        if res.rc != 0:
            self.violate(f"`binky daemon stop` failed: {res.text()}")
        self.check_registry()
        self.check_daemon_log()

    def check_slices_exist(self, up):
        a, b = self.names["a"], self.names["b"]
        pg = set(psql(f"select datname from pg_database where datname like '{a}\\_%'"))
        my = set(mysql(f"select schema_name from information_schema.schemata where schema_name like '{b}\\_%'"))
        vhosts = {v["name"] for v in rmq("GET", "/vhosts")}
        lite = os.listdir(os.path.join(self.home, "slices", "sqlite"))
        for tag, w in up:
            for what, ok in (
                [
                    (f"postgres database {a}_{w}", f"{a}_{w}" in pg),
                    (f"redis marker of {a}:{w}:", redis("exists", f"_binky:slice:{a}:{w}:") == ["1"]),
                ]
                if tag == "a"
                else [
                    (f"mysql database {b}_{w}", f"{b}_{w}" in my),
                    (f"rabbitmq vhost {b}_{w}", f"{b}_{w}" in vhosts),
                    (f"sqlite file {b}_{w}.*", any(f.startswith(f"{b}_{w}.") for f in lite)),
                ]
            ):
                if not ok:
                    self.violate(f"world {w} is up after the chaos but its {what} is missing")

    def leftovers(self):
        """Everything on the servers and in the state folder with the run's prefix."""
        p = self.prefix
        found = []
        found += [f"postgres database {d}" for d in psql(f"select datname from pg_database where datname like '{p}%'")]
        found += [f"postgres role {r}" for r in psql(f"select rolname from pg_roles where rolname like '{p}%'")]
        found += [f"mysql database {d}" for d in mysql(f"select schema_name from information_schema.schemata where schema_name like '{p}%'")]
        found += [f"mysql user {u}" for u in mysql(f"select concat(user, '@', host) from mysql.user where user like '{p}%'")]
        found += [f"redis key {k}" for k in redis("--scan", "--pattern", f"*{p}*")]
        found += [f"redis ACL user {u}" for u in redis("acl", "users") if p in u]
        found += [f"rabbitmq vhost {v['name']}" for v in rmq("GET", "/vhosts") if p in v["name"]]
        found += [f"rabbitmq user {u['name']}" for u in rmq("GET", "/users") if p in u["name"]]
        for sub in ("slices", "golden"):
            base = os.path.join(self.home, sub)
            for dirpath, _, files in os.walk(base):
                for f in files:
                    if p in f:
                        found.append(f"file {os.path.join(dirpath, f)}")
        return found

    def planted_names(self):
        pl = self.planted
        return {
            f"postgres database {pl['pg_db']}",
            f"postgres role {pl['pg_role']}",
            f"mysql database {pl['mysql_db']}",
            f"mysql user {pl['mysql_user']}@%",
            f"redis key {pl['redis_key']}",
            f"redis ACL user {pl['redis_user']}",
            f"rabbitmq vhost {pl['rmq_vhost']}",
            f"rabbitmq user {pl['rmq_user']}",
        }

    def check_servers_clean(self):
        found = set(self.leftovers())
        planted = self.planted_names()
        left = sorted(found - planted)
        if left:
            self.violate("left behind after removing every world and `binky gc`: " + ", ".join(left))
        gone = sorted(planted - found)
        if gone:
            self.violate("objects Binky did not make (planted with the run's prefix) are gone: " + ", ".join(gone))

    def check_planted(self):
        for path, text in self.planted_files.items():
            try:
                with open(path) as f:
                    now = f.read()
            except OSError as e:
                self.violate(f"a file Binky did not make is gone: {path} ({e})")
                continue
            if now != text:
                self.violate(f"a file Binky did not make was changed: {path}")
        app, proc, backend = self.admin_session
        rows = psql(f"select pid from pg_stat_activity where application_name = '{app}'")
        if rows != [str(backend)]:
            self.violate(f"the psql session on the admin database ({app}, backend {backend}) was ended")
        try:
            proc.stdin.write("commit;\n\\q\n")
            proc.stdin.close()
            proc.wait(timeout=5)
        except (OSError, subprocess.TimeoutExpired):
            proc.kill()

    def check_worktrees(self):
        for tag in "ab":
            root = self.worktree_root(tag)
            extra = sorted(set(os.listdir(root)) - {"zzforeign.txt", "zzforeign-dir"})
            if extra:
                self.violate(f"left in project {tag}'s worktree root {root}: {extra}")
            p = subprocess.run(
                ["git", "worktree", "list", "--porcelain"],
                cwd=self.main_dir(tag),
                capture_output=True,
                text=True,
            )
            trees = [line for line in p.stdout.splitlines() if line.startswith("worktree ")]
            if len(trees) != 1:
                self.violate(f"git still lists worktrees of project {tag}: {trees[1:]}")

    def check_registry(self):
        path = os.path.join(self.home, "registry.db")
        try:
            c = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
            rows = c.execute("pragma integrity_check").fetchall()
            c.close()
        except sqlite3.Error as e:
            self.violate(f"registry.db cannot be read: {e}")
            return
        if rows != [("ok",)]:
            self.violate(f"registry.db: pragma integrity_check says {rows[:10]}")

    def check_daemon_log(self):
        for name in sorted(os.listdir(self.home)):
            if not name.startswith("daemon.log"):
                continue
            with open(os.path.join(self.home, name), errors="replace") as f:
                lines = f.read().splitlines()
            for i, line in enumerate(lines):
                if "panicked" in line:
                    self.violate(
                        f"{name}: a panic: " + "\n".join(lines[i : i + 6]),
                        once=("panic", line),
                    )

    # ------------------------------------------------------------ cleanup

    def cleanup(self):
        """Whatever happened, nothing of the run stays on the machine."""
        for s in self.sessions:
            s.proc.kill()
        if self.admin_session:
            self.admin_session[1].kill()
        pid = self.daemon_pid()
        if pid:
            subprocess.run([self.binky_path, "daemon", "stop"], env=self.env, capture_output=True, timeout=30)
            if self.daemon_pid():
                os.kill(pid, signal.SIGKILL)
        for p in self.scan():
            try:
                os.kill(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        p = self.prefix
        steps = [
            lambda: [psql(f'drop database if exists "{d}" with (force)') for d in psql(f"select datname from pg_database where datname like '{p}%'")],
            lambda: [psql(f'drop role if exists "{r}"') for r in psql(f"select rolname from pg_roles where rolname like '{p}%'")],
            lambda: [mysql(f"drop database if exists `{d}`") for d in mysql(f"select schema_name from information_schema.schemata where schema_name like '{p}%'")],
            lambda: [mysql(f"drop user if exists '{u}'@'{h}'") for u, h in (r.split("\t") for r in mysql(f"select user, host from mysql.user where user like '{p}%'"))],
            lambda: [redis("unlink", k) for k in redis("--scan", "--pattern", f"*{p}*")],
            lambda: [redis("acl", "deluser", u) for u in redis("acl", "users") if p in u],
            lambda: [rmq("DELETE", f"/vhosts/{q(v['name'])}") for v in rmq("GET", "/vhosts") if p in v["name"]],
            lambda: [rmq("DELETE", f"/users/{q(u['name'])}") for u in rmq("GET", "/users") if p in u["name"]],
        ]
        for step in steps:
            try:
                step()
            except Exception as e:  # noqa: BLE001 - best effort, said
                print(f"chaos cleanup: {e}", file=sys.stderr)
        if self.violations or self.args.keep:
            print(f"chaos: the run's folder is kept: {self.tmp}", file=sys.stderr)
        else:
            shutil.rmtree(self.tmp, ignore_errors=True)

    # ------------------------------------------------------------ main

    def replay(self):
        a = self.args
        return (
            f"python3 tests/chaos/driver.py --binky {a.binky} --seed {self.seed} "
            f"--ops {a.ops} --workers {a.workers} --time-limit {a.time_limit}"
        )

    def go(self):
        started = time.monotonic()
        try:
            self.setup()
            self.log("driver", f"run {self.run_id}: projects {self.names['a']}, {self.names['b']}; home {self.home}")
            mon = threading.Thread(target=self.monitor, daemon=True)
            mon.start()
            per = -(-self.args.ops // self.args.workers)
            threads = [
                threading.Thread(target=self.guard, args=(self.worker, i, per))
                for i in range(self.args.workers)
            ]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            self.log("driver", "chaos over; checking the end state")
            if not self.abort:
                self.finish()
            self.stop_monitor.set()
            mon.join(timeout=90)
        except Violation as v:
            self.violate(str(v))
        except Exception:  # noqa: BLE001 - a driver error fails the run, said
            self.violate(f"driver error:\n{traceback.format_exc()}")
        finally:
            self.stop_monitor.set()
            self.cleanup()
        took = time.monotonic() - started
        ops = sum(self.counts.values())
        summary = (
            f"chaos seed {self.seed}: {ops} operations in {took:.0f} s "
            f"({', '.join(f'{k} {v}' for k, v in sorted(self.counts.items()))}; failed: "
            f"{', '.join(f'{k} {v}' for k, v in sorted(self.failures.items())) or 'none'}), "
            f"{len(self.daemon_kills)} daemon kill -9, {self.service_kills} service kill -9, "
            f"{self.counts_samples} status samples"
        )
        if not self.violations:
            print(summary + ": every invariant held", flush=True)
            return True
        out = [
            f"CHAOS FAILED: seed {self.seed}, {len(self.violations)} violation(s)",
            f"replay: {self.replay()}",
            summary,
            "",
            "violations:",
        ]
        out += [f"- {v}" for v in self.violations]
        out += ["", f"operation log of seed {self.seed} (seconds since start, worker#op):"]
        out += self.log_lines
        out += ["", f"replay: {self.replay()}"]
        print("\n".join(out), flush=True)
        return False


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    default_bin = os.path.join(os.environ.get("CARGO_TARGET_DIR", "target"), "debug", "binky")
    ap.add_argument("--binky", default=default_bin, help="the binky binary (default: %(default)s)")
    ap.add_argument("--seed", type=int, action="append", help="a seed; repeat for several runs (default: 1)")
    ap.add_argument("--ops", type=int, default=60, help="operations per seed, across the workers")
    ap.add_argument("--workers", type=int, default=3, help="threads running operations at once")
    ap.add_argument("--time-limit", type=float, default=45.0, help="seconds after which no new operation starts")
    ap.add_argument("--monitor-interval", type=float, default=1.0, help="seconds between invariant samples")
    ap.add_argument("--port-range-a", help="LO:HI, project a's port_range (default: free ports)")
    ap.add_argument("--port-range-b", help="LO:HI, project b's port_range (default: free ports)")
    ap.add_argument("--keep", action="store_true", help="keep the run's folder")
    ap.add_argument("-v", "--verbose", action="store_true", help="print the operation log as it goes")
    ap.add_argument("--check-servers", action="store_true", help="say what is missing, exit 3 if anything is")
    args = ap.parse_args()
    missing = missing_servers()
    if args.check_servers or missing:
        for m in missing:
            print(f"missing: {m}")
        sys.exit(3 if missing else 0)
    if not os.access(args.binky, os.X_OK):
        sys.exit(f"no binky binary at {args.binky} (`cargo build`, or --binky PATH)")
    ok = True
    for seed in args.seed or [1]:
        ok = Chaos(args, seed).go() and ok
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
