#!/usr/bin/env python3
"""What N worlds cost: a PostgreSQL server per world versus Binky's slices.

Run from anywhere (as root, or as a user that may run initdb):

    python3 benchmarks/worlds.py            # N = 1, 2, 4, 8; 200,000 rows a world
    python3 benchmarks/worlds.py --max 4    # quicker
    python3 benchmarks/worlds.py --json     # JSON on stdout instead of tables

Python 3 standard library only, plus the PostgreSQL server binaries (initdb,
pg_ctl, psql) and the server on 127.0.0.1:5432 (trust auth, user postgres).
MariaDB on :3306 with the mysql client is optional (the MySQL clone strategy
section is skipped without it). Uses the release binary as the other
benchmarks do (`cargo build --release` when missing or stale).

What is compared, world by world (1..N), in one run:
  (a) a server each: initdb, pg_ctl start, migrate, seed, for every world:
      the honest stand-in for "a container each" (no container engine here).
      RAM = the sum of the PSS of every process of every such server.
  (b) Binky: `binky up w<i>` against the one shared server: the first world
      builds the golden template (migrate + seed once), later worlds are
      `CREATE DATABASE ... TEMPLATE` copies. RAM = what Binky adds: the
      daemon's PSS plus the growth of the shared server's PSS since the
      daemon started.
Time to ready for N = the sum of the first N worlds' times. The marginal
cost of the Nth world is its own time and RAM increment.

Adapters (`--adapters` runs only this part): for every adapter whose server
is here (sqlite; postgres, mysql, redis, rabbitmq, clickhouse on their usual
ports; s3 against a moto server, kafka against a tansu broker and mongodb
against an NX-27017 server the script starts), the median `binky up` and
`binky remove` of a world whose only service is that resource. The sqlite
row is the floor (worktree, ports, registry): the difference is the slice.
For redis also: `binky remove` of a world holding 10k / 100k / 1M keys, with
another client sending GETs to the same server the whole time; its p99 and
max latency say whether teardown stalls the server for other worlds.
For clickhouse and mongodb also: each extra world as a server of its own
(a clickhouse-server with its own ports and folders; an NX-27017) versus
`binky up` of a slice on one shared server, its time and the RAM in all.

Two more measurements decide the clone strategies:
  - PostgreSQL: CREATE DATABASE ... STRATEGY WAL_LOG versus FILE_COPY, for
    templates of several sizes (median of --clones), which sets
    FILE_COPY_FROM_BYTES in src/adapters/postgres/clone.rs;
  - MySQL: `binky up` of a 200,000-row world with clone_strategy = "copy"
    versus "dump" (median of --clones).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import BenchError, ensure_binary, loadavg, log, verdict  # noqa: E402

PG_ADMIN = "postgresql://postgres@127.0.0.1:5432/postgres"
MYSQL_ADMIN = "mysql://root@127.0.0.1:3306/"
# Targets from the adapters issue: each extra world costs Binky at most this.
TARGET_SECONDS = 0.4
TARGET_MIB = 5.0

MIGRATE = "create table items(id int primary key, tag text, payload text)"
# About 40 MB on disk for 200,000 rows, like the reference figure.
SEED = ("insert into items select g, 'v1', repeat(md5(g::text), 4) "
        "from generate_series(1, {rows}) g")


def pg_bin(name: str) -> str:
    for d in sorted(Path("/usr/lib/postgresql").glob("*/bin"), reverse=True):
        if (d / name).exists():
            return str(d / name)
    found = shutil.which(name)
    if not found:
        raise BenchError(f"{name} not found (install postgresql)")
    return found


def psql(url: str, sql: str) -> str:
    r = subprocess.run(["psql", url, "-v", "ON_ERROR_STOP=1", "-tAqc", sql],
                       capture_output=True, text=True)
    if r.returncode != 0:
        raise BenchError(f"psql {sql[:60]}: {r.stderr.strip()}")
    return r.stdout.strip()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def pss_kib(pid: int) -> int:
    """Proportional set size of one process, KiB (0 when it is gone)."""
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                if line.startswith("Pss:"):
                    return int(line.split()[1])
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        pass
    return 0


def children(pid: int) -> list[int]:
    out = []
    for e in os.listdir("/proc"):
        if e.isdigit():
            try:
                with open(f"/proc/{e}/stat") as f:
                    if int(f.read().rsplit(")", 1)[1].split()[1]) == pid:
                        out.append(int(e))
            except (FileNotFoundError, ProcessLookupError, IndexError):
                pass
    return out


def server_pss_kib(postmaster: int) -> int:
    return pss_kib(postmaster) + sum(pss_kib(c) for c in children(postmaster))


def shared_postmaster() -> int:
    """The pid of the server listening on :5432."""
    pid = psql(PG_ADMIN, "select pid from pg_stat_activity where backend_type = 'checkpointer'")
    ppid = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[1]
    return int(ppid)


def as_postgres(cmd: list[str]) -> list[str]:
    return ["runuser", "-u", "postgres", "--", *cmd] if os.geteuid() == 0 else cmd


# --------------------------------------------------------------------------
# (a) a server per world
# --------------------------------------------------------------------------


class ServerEach:
    def __init__(self, root: Path, rows: int):
        self.root = root
        self.rows = rows
        self.servers: list[tuple[Path, int]] = []

    def add(self) -> float:
        i = len(self.servers)
        data = self.root / f"pg{i}"
        port = free_port()
        t0 = time.perf_counter()
        subprocess.run(as_postgres([pg_bin("initdb"), "-D", str(data), "-A", "trust",
                                    "-U", "postgres", "-E", "UTF8", "--locale=C"]),
                       check=True, capture_output=True)
        subprocess.run(as_postgres([pg_bin("pg_ctl"), "-D", str(data), "-w", "-l",
                                    str(data / "server.log"), "-o",
                                    f"-p {port} -k {data} -c listen_addresses=127.0.0.1",
                                    "start"]), check=True, capture_output=True)
        url = f"postgresql://postgres@127.0.0.1:{port}/postgres"
        psql(url, MIGRATE)
        psql(url, SEED.format(rows=self.rows))
        took = time.perf_counter() - t0
        self.servers.append((data, port))
        return took

    def pss_kib(self) -> int:
        total = 0
        for data, _ in self.servers:
            pid = int((data / "postmaster.pid").read_text().split()[0])
            total += server_pss_kib(pid)
        return total

    def stop(self) -> None:
        for data, _ in self.servers:
            subprocess.run(as_postgres([pg_bin("pg_ctl"), "-D", str(data), "-m", "immediate",
                                        "stop"]), capture_output=True)


# --------------------------------------------------------------------------
# (b) Binky
# --------------------------------------------------------------------------


def git(cwd: Path, *args: str) -> None:
    subprocess.run(["git", "-c", "user.name=bench", "-c", "user.email=bench@example.com",
                    *args], cwd=cwd, check=True, capture_output=True)


class BinkyWorlds:
    def __init__(self, binary: Path, root: Path, project: str, resource_toml: str,
                 env_extra: dict[str, str]):
        self.binary = binary
        self.project = project
        self.home = root / f"home-{project}"
        self.repo = root / f"repo-{project}"
        self.repo.mkdir(parents=True)
        (self.repo / "binky.toml").write_text(
            f'[project]\nname = "{project}"\n\n[services.db]\n{resource_toml}')
        git(self.repo, "init", "-q", "-b", "main")
        git(self.repo, "add", "-A")
        git(self.repo, "commit", "-qm", "bench")
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("BINKY_")}
        self.env.update(BINKY_HOME=str(self.home), BINKY_PROXY_PORT=str(free_port()),
                        BINKY_HTTPS_PORT=str(free_port()), NO_COLOR="1", **env_extra)
        self.worlds: list[str] = []

    def run(self, *args: str) -> subprocess.CompletedProcess:
        r = subprocess.run([str(self.binary), *args], cwd=self.repo, env=self.env,
                           capture_output=True, text=True, timeout=600)
        if r.returncode != 0:
            raise BenchError(f"binky {' '.join(args)}: {r.stdout}{r.stderr}")
        return r

    def start(self) -> None:
        self.run("daemon", "start")

    def daemon_pid(self) -> int:
        return int(json.loads(self.run("daemon", "status", "--json").stdout)["pid"])

    def add(self) -> float:
        name = f"w{len(self.worlds) + 1}"
        t0 = time.perf_counter()
        self.run("up", name)
        took = time.perf_counter() - t0
        self.worlds.append(name)
        return took

    def remove_all(self) -> None:
        for w in self.worlds:
            try:
                self.run("remove", w, "--force")
            except BenchError as e:
                log(f"cleanup: {e}")
        try:
            self.run("daemon", "stop")
        except BenchError:
            pass


def pg_resource(rows: int, strategy: str) -> str:
    return (
        'adapter = "postgres"\nadmin_url = "${env.BENCH_PG_ADMIN}"\n'
        f'migrate = "psql \\"$DB_URL\\" -qc \'{MIGRATE}\'"\n'
        f'seed = "psql \\"$DB_URL\\" -qc \\"{SEED.format(rows=rows)}\\""\n'
        'clone_from = "golden"\n'
        f'options = {{ clone_strategy = "{strategy}" }}\n'
    )


def drop_pg_databases(prefix: str) -> None:
    for db in psql(PG_ADMIN, f"select datname from pg_database where datname like '{prefix}%'").split():
        psql(PG_ADMIN, f'drop database if exists "{db}" with (force)')


# --------------------------------------------------------------------------
# Clone strategies
# --------------------------------------------------------------------------


def pg_strategies(rows_list: list[int], clones: int, tag: str) -> list[dict]:
    out = []
    for rows in rows_list:
        tpl = f"bench_tpl_{tag}_{rows}"
        psql(PG_ADMIN, f'drop database if exists "{tpl}"')
        psql(PG_ADMIN, f'create database "{tpl}"')
        url = PG_ADMIN.rsplit("/", 1)[0] + f"/{tpl}"
        psql(url, MIGRATE)
        if rows:
            psql(url, SEED.format(rows=rows))
        size = int(psql(PG_ADMIN, f"select pg_database_size('{tpl}')"))
        times: dict[str, list[float]] = {"WAL_LOG": [], "FILE_COPY": []}
        for i in range(clones):
            for strat in ("WAL_LOG", "FILE_COPY"):
                db = f"{tpl}_c{i}_{strat.lower()}"
                t0 = time.perf_counter()
                psql(PG_ADMIN, f'create database "{db}" template "{tpl}" strategy {strat}')
                times[strat].append(time.perf_counter() - t0)
                psql(PG_ADMIN, f'drop database "{db}"')
        psql(PG_ADMIN, f'drop database "{tpl}"')
        row = {"rows": rows, "bytes": size,
               "wal_log_s": statistics.median(times["WAL_LOG"]),
               "file_copy_s": statistics.median(times["FILE_COPY"])}
        log(f"strategy: {rows} rows ({size / 2**20:.1f} MiB): WAL_LOG {row['wal_log_s']:.3f} s, "
            f"FILE_COPY {row['file_copy_s']:.3f} s")
        out.append(row)
    return out


def mysql_available() -> bool:
    try:
        socket.create_connection(("127.0.0.1", 3306), timeout=1).close()
    except OSError:
        return False
    return shutil.which("mysql") is not None


MYSQL_MIGRATE = ("create table items(id int primary key, tag text, payload text); "
                 "create table d(x int); insert into d values (0),(1),(2),(3),(4),(5),(6),(7),(8),(9); "
                 "create view n_items as select count(*) c from items")
MYSQL_SEED = ("insert into items select a.x+10*b.x+100*c.x+1000*e.x+10000*f.x+100000*g.x, 'v1', "
              "repeat(md5(a.x+10*b.x+100*c.x+1000*e.x), 4) from d a, d b, d c, d e, d f, d g "
              "where a.x+10*b.x+100*c.x+1000*e.x+10000*f.x+100000*g.x < {rows}")


def mysql_strategies(binary: Path, root: Path, rows: int, clones: int, tag: str) -> dict:
    runs: dict[str, list[float]] = {}
    sets = {}
    try:
        for strat in ("copy", "dump"):
            res = (
                'adapter = "mysql"\nadmin_url = "${env.BENCH_MYSQL_ADMIN}"\n'
                f'migrate = "mysql -h127.0.0.1 -uroot \\"${{DB_URL##*/}}\\" -e \'{MYSQL_MIGRATE}\'"\n'
                f'seed = "mysql -h127.0.0.1 -uroot \\"${{DB_URL##*/}}\\" -e \\"{MYSQL_SEED.format(rows=rows)}\\""\n'
                'clone_from = "golden"\n'
                f'options = {{ clone_strategy = "{strat}" }}\n'
            )
            b = BinkyWorlds(binary, root, f"mybench{tag}{strat}", res,
                            {"BENCH_MYSQL_ADMIN": MYSQL_ADMIN})
            b.start()
            b.add()  # builds the template
            sets[strat] = b
            runs[strat] = []
        for _ in range(clones):
            for strat, b in sets.items():
                runs[strat].append(b.add())
    finally:
        for strat, b in sets.items():
            b.remove_all()
            subprocess.run(["mysql", "-h127.0.0.1", "-uroot", "-e",
                            f"drop database if exists `{b.project}_golden_golden`"],
                           capture_output=True)
    out = {s: statistics.median(v) for s, v in runs.items()}
    log(f"mysql clone of {rows} rows: copy {out['copy']:.3f} s, dump {out['dump']:.3f} s (median `up`)")
    return out


# --------------------------------------------------------------------------


def benchmark(args: argparse.Namespace, binary: Path, root: Path) -> dict:
    tag = str(os.getpid())
    res: dict = {"rows": args.rows, "max": args.max, "loadavg_before": loadavg()}
    # PostgreSQL clone strategies first: they decide `auto`.
    res["pg_strategies"] = pg_strategies([0, 20_000, 200_000, 1_000_000], args.clones, tag)

    # (b) Binky, world by world.
    project = f"wbench{tag}"
    strategy = "auto"
    b = BinkyWorlds(binary, root, project, pg_resource(args.rows, strategy),
                    {"BENCH_PG_ADMIN": PG_ADMIN})
    a = ServerEach(root / "servers", args.rows)
    (root / "servers").mkdir()
    if os.geteuid() == 0:
        shutil.chown(root / "servers", "postgres", "postgres")
        os.chmod(root, 0o755)
    binky_rows, each_rows = [], []
    try:
        b.start()
        master = shared_postmaster()
        time.sleep(1)
        base = server_pss_kib(master)
        for n in range(1, args.max + 1):
            t = b.add()
            time.sleep(0.5)
            kib = pss_kib(b.daemon_pid()) + max(0, server_pss_kib(master) - base)
            binky_rows.append({"n": n, "seconds": t, "kib": kib})
            log(f"binky: world {n} ready in {t:.3f} s; RAM {kib / 1024:.1f} MiB")
        for n in range(1, args.max + 1):
            t = a.add()
            time.sleep(0.5)
            kib = a.pss_kib()
            each_rows.append({"n": n, "seconds": t, "kib": kib})
            log(f"server each: world {n} ready in {t:.3f} s; RAM {kib / 1024:.1f} MiB")
    finally:
        a.stop()
        b.remove_all()
        drop_pg_databases(f"{project}_")
    res["binky"] = binky_rows
    res["server_each"] = each_rows
    if not args.no_mysql and mysql_available():
        res["mysql_strategies"] = mysql_strategies(binary, root, args.rows, args.clones, tag)
    res["loadavg_after"] = loadavg()
    return res


# --------------------------------------------------------------------------
# Adapters: provision + teardown per adapter; Redis teardown under load
# --------------------------------------------------------------------------


def port_open(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0


class Resp:
    """A minimal RESP client (stdlib only): enough to fill and probe Redis."""

    def __init__(self, port: int = 6379):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=30)
        self.buf = b""

    @staticmethod
    def encode(*args: str) -> bytes:
        out = [f"*{len(args)}\r\n".encode()]
        for a in args:
            b = a.encode()
            out.append(b"$%d\r\n%s\r\n" % (len(b), b))
        return b"".join(out)

    def _line(self) -> bytes:
        while b"\r\n" not in self.buf:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise BenchError("redis closed the connection")
            self.buf += chunk
        line, self.buf = self.buf.split(b"\r\n", 1)
        return line

    def reply(self) -> bytes:
        line = self._line()
        if line[:1] == b"$" and line != b"$-1":
            n = int(line[1:])
            while len(self.buf) < n + 2:
                self.buf += self.sock.recv(65536)
            data, self.buf = self.buf[:n], self.buf[n + 2:]
            return data
        if line[:1] == b"-":
            raise BenchError(f"redis: {line.decode()}")
        return line

    def call(self, *args: str) -> bytes:
        self.sock.sendall(self.encode(*args))
        return self.reply()

    def fill(self, prefix: str, n: int, batch: int = 10_000) -> None:
        for start in range(0, n, batch):
            count = min(batch, n - start)
            self.sock.sendall(b"".join(self.encode("SET", f"{prefix}k{i}", "v" * 16)
                                       for i in range(start, start + count)))
            for _ in range(count):
                self.reply()


def probe_latencies(stop: "threading.Event", out: list[float]) -> None:
    c = Resp()
    while not stop.is_set():
        t0 = time.perf_counter()
        c.call("GET", "binky-bench-probe")
        out.append((time.perf_counter() - t0) * 1000)


def pct(samples: list[float], q: float) -> float:
    if not samples:
        return float("nan")
    s = sorted(samples)
    return s[min(len(s) - 1, int(math.ceil(q * len(s))) - 1)]


class Moto:
    def __init__(self) -> None:
        self.port = free_port()
        self.proc = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1",
                                      "-p", str(self.port)], stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL)
        for _ in range(100):
            if port_open(self.port):
                return
            time.sleep(0.2)
        raise BenchError("moto did not start")

    def stop(self) -> None:
        self.proc.kill()
        self.proc.wait()


class Tansu:
    """A tansu Kafka broker (in-memory storage) on a free port: BINKY_TANSU,
    the one .ci/run builds into ~/.cache/binky-tansu, or PATH's."""

    def __init__(self) -> None:
        binary = os.environ.get("BINKY_TANSU") or str(Path.home() / ".cache/binky-tansu/bin/tansu")
        if not Path(binary).is_file():
            binary = shutil.which("tansu") or ""
        if not binary:
            raise BenchError("no tansu binary (cargo install tansu --features dynostore)")
        self.port = free_port()
        url = f"tcp://127.0.0.1:{self.port}"
        self.proc = subprocess.Popen([binary, "broker", "--listener-url", url,
                                      "--advertised-listener-url", url,
                                      "--storage-engine", "memory://tansu/", "--silent"],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for _ in range(100):
            if port_open(self.port):
                return
            time.sleep(0.2)
        raise BenchError("tansu did not start")

    def stop(self) -> None:
        self.proc.kill()
        self.proc.wait()


def nx_binary() -> str:
    """NX-27017 (a MongoDB wire-protocol server, PyPI): BINKY_NX27017, the
    venv .ci/run makes in ~/.cache/binky-nx, or PATH's."""
    binary = os.environ.get("BINKY_NX27017") or str(Path.home() / ".cache/binky-nx/bin/nx-27017")
    if not Path(binary).is_file():
        binary = shutil.which("nx-27017") or ""
    if not binary:
        raise BenchError("no nx-27017 (pip install nx-27017 into a venv)")
    return binary


class Spawned:
    """A server process of the script's own on a free port, ready when the
    port answers; killed at stop."""

    def __init__(self, argv_for_port, what: str, port: int | None = None,
                 cwd: Path | None = None) -> None:
        self.port = port or free_port()
        self.proc = subprocess.Popen(argv_for_port(self.port), stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL, cwd=cwd)
        for _ in range(300):
            if port_open(self.port):
                return
            if self.proc.poll() is not None:
                break
            time.sleep(0.1)
        raise BenchError(f"{what} did not start")

    def stop(self) -> None:
        self.proc.kill()
        self.proc.wait()


def nx_server(data: Path) -> Spawned:
    data.mkdir(parents=True, exist_ok=True)
    binary = nx_binary()
    return Spawned(lambda port: [binary, "--data-dir", str(data), "--host", "127.0.0.1",
                                 "-p", str(port), "--log-file", str(data / "nx.log"),
                                 "--pid-file", str(data / "nx.pid")], "nx-27017")


CLICKHOUSE_CONFIG = "/etc/clickhouse-server/config.xml"


def clickhouse_server(data: Path) -> Spawned:
    """A ClickHouse server of its own: Debian's config with its own ports
    and folders."""
    import re
    data.mkdir(parents=True, exist_ok=True)
    text = Path(CLICKHOUSE_CONFIG).read_text()
    http = free_port()

    def conf(port: int) -> list[str]:
        c = text
        for tag, value in [("http_port", str(port)), ("tcp_port", str(free_port())),
                           ("interserver_http_port", str(free_port())),
                           ("path", f"{data}/"), ("tmp_path", f"{data}/tmp/"),
                           ("user_files_path", f"{data}/user_files/"),
                           ("format_schema_path", f"{data}/format_schemas/"),
                           ("log", f"{data}/server.log"), ("errorlog", f"{data}/server.err.log")]:
            c = re.sub(f"<{tag}>[^<]*</{tag}>", f"<{tag}>{value}</{tag}>", c, count=1)
        (data / "config.xml").write_text(c)
        users = Path(CLICKHOUSE_CONFIG).with_name("users.xml")
        shutil.copy(users, data / "users.xml")
        return ["/usr/sbin/clickhouse-server", f"--config-file={data}/config.xml"]

    return Spawned(conf, "clickhouse-server", port=http, cwd=data)


def server_each_vs_slices(binary: Path, root: Path, n: int, tag: str) -> list[dict]:
    """For ClickHouse and MongoDB: time and RAM of each extra world, as a
    server of its own versus Binky's slice of one shared server."""
    cases = []
    if port_open(8123) and Path("/usr/sbin/clickhouse-server").is_file():
        shared = int(subprocess.run(["pgrep", "-o", "-f", "clickhouse-server"],
                                    capture_output=True, text=True).stdout.split()[0])
        cases.append(("clickhouse", 'adapter = "clickhouse"\n', {}, clickhouse_server,
                      lambda: shared))
    try:
        nx_binary()
        shared_nx = nx_server(root / f"nx-shared-{tag}")
        cases.append(("mongodb", 'adapter = "mongodb"\nadmin_url = "${env.BENCH_MONGO}"\n',
                      {"BENCH_MONGO": f"mongodb://127.0.0.1:{shared_nx.port}"}, nx_server,
                      lambda: shared_nx.proc.pid))
    except BenchError as e:
        shared_nx = None
        log(f"mongodb rows skipped: {e}")
    rows = []
    try:
        for name, toml, env, start, shared_pid in cases:
            b = BinkyWorlds(binary, root, f"se{name}{tag}", toml, env)
            servers: list[Spawned] = []
            try:
                b.start()
                time.sleep(0.5)
                base = pss_kib(shared_pid())
                for i in range(1, n + 1):
                    t = b.add()
                    time.sleep(0.5)
                    # As for PostgreSQL: the daemon, plus what the shared
                    # server grew by (its own churn can shrink it).
                    kib = pss_kib(b.daemon_pid()) + max(0, pss_kib(shared_pid()) - base)
                    t0 = time.perf_counter()
                    servers.append(start(root / f"{name}-each-{i}"))
                    each = time.perf_counter() - t0
                    time.sleep(0.5)
                    each_kib = sum(pss_kib(s.proc.pid) for s in servers)
                    rows.append({"adapter": name, "n": i, "slice_s": t, "slice_kib": kib,
                                 "server_s": each, "server_kib": each_kib})
                    log(f"{name} world {i}: slice {t * 1000:.0f} ms, +{kib / 1024:.1f} MiB in all; "
                        f"server each {each * 1000:.0f} ms, {each_kib / 1024:.1f} MiB in all")
            finally:
                for s in servers:
                    s.stop()
                b.remove_all()
    finally:
        if shared_nx:
            shared_nx.stop()
    return rows


def adapter_rows(binary: Path, root: Path, runs: int, tag: str) -> list[dict]:
    cases: list[tuple[str, str, dict[str, str]]] = [("sqlite", 'adapter = "sqlite"\n', {})]
    if port_open(5432):
        cases.append(("postgres", 'adapter = "postgres"\nadmin_url = "${env.BENCH_PG_ADMIN}"\n',
                      {"BENCH_PG_ADMIN": PG_ADMIN}))
    if mysql_available():
        cases.append(("mysql", 'adapter = "mysql"\nadmin_url = "${env.BENCH_MYSQL_ADMIN}"\n',
                      {"BENCH_MYSQL_ADMIN": MYSQL_ADMIN}))
    if port_open(6379):
        cases.append(("redis", 'adapter = "redis"\n', {}))
    if port_open(15672):
        cases.append(("rabbitmq", 'adapter = "rabbitmq"\n', {}))
    if port_open(8123):
        cases.append(("clickhouse", 'adapter = "clickhouse"\n', {}))
    nx = None
    try:
        nx = nx_server(root / f"nx-rows-{tag}")
        cases.append(("mongodb", 'adapter = "mongodb"\nadmin_url = "${env.BENCH_MONGO}"\n',
                      {"BENCH_MONGO": f"mongodb://127.0.0.1:{nx.port}"}))
    except BenchError as e:
        log(f"mongodb row skipped: {e}")
    moto = None
    try:
        import moto as _moto  # noqa: F401
        moto = Moto()
        cases.append(("s3", 'adapter = "s3"\nadmin_url = "${env.BENCH_S3}"\n',
                      {"BENCH_S3": f"http://bench:bench@127.0.0.1:{moto.port}"}))
    except (ImportError, BenchError) as e:
        log(f"s3 row skipped: {e}")
    tansu = None
    try:
        tansu = Tansu()
        cases.append(("kafka", 'adapter = "kafka"\nadmin_url = "${env.BENCH_KAFKA}"\n'
                      'options = { topics = ["orders", "events"] }\n',
                      {"BENCH_KAFKA": f"kafka://127.0.0.1:{tansu.port}"}))
    except BenchError as e:
        log(f"kafka row skipped: {e}")
    rows = []
    try:
        for name, toml, env in cases:
            b = BinkyWorlds(binary, root, f"ab{name}{tag}", toml, env)
            ups, removes = [], []
            try:
                b.start()
                for i in range(runs):
                    w = f"w{i}"
                    t0 = time.perf_counter()
                    b.run("up", w)
                    t1 = time.perf_counter()
                    b.run("remove", w, "--force")
                    t2 = time.perf_counter()
                    ups.append(t1 - t0)
                    removes.append(t2 - t1)
            finally:
                b.remove_all()
            row = {"adapter": name, "up_s": statistics.median(ups),
                   "remove_s": statistics.median(removes), "runs": runs}
            log(f"{name}: up {row['up_s'] * 1000:.0f} ms, remove {row['remove_s'] * 1000:.0f} ms")
            rows.append(row)
    finally:
        if moto:
            moto.stop()
        if nx:
            nx.stop()
        if tansu:
            tansu.stop()
    return rows


def redis_teardown(binary: Path, root: Path, sizes: list[int], tag: str) -> list[dict]:
    import threading
    project = f"rt{tag}"
    b = BinkyWorlds(binary, root, project, 'adapter = "redis"\n', {})
    rows = []
    try:
        b.start()
        for n in sizes:
            w = f"k{n}"
            b.run("up", w)
            prefix = f"{project}:{w}:"
            t0 = time.perf_counter()
            Resp().fill(prefix, n)
            fill_s = time.perf_counter() - t0
            # Other clients' latency with the server idle, then during teardown.
            idle: list[float] = []
            stop = threading.Event()
            th = threading.Thread(target=probe_latencies, args=(stop, idle))
            th.start()
            time.sleep(2)
            stop.set()
            th.join()
            during: list[float] = []
            stop = threading.Event()
            th = threading.Thread(target=probe_latencies, args=(stop, during))
            th.start()
            t0 = time.perf_counter()
            b.run("remove", w, "--force")
            took = time.perf_counter() - t0
            stop.set()
            th.join()
            left = int(Resp().call("EVAL", f"return #redis.call('keys', '{prefix}*')",
                                   "0").lstrip(b":"))
            row = {"keys": n, "fill_s": fill_s, "teardown_s": took, "left": left,
                   "idle_p99_ms": pct(idle, 0.99), "p50_ms": pct(during, 0.5),
                   "p99_ms": pct(during, 0.99), "max_ms": max(during, default=float("nan")),
                   "probes": len(during)}
            log(f"redis {n:,} keys: teardown {took:.2f} s; other clients p99 "
                f"{row['p99_ms']:.2f} ms (idle {row['idle_p99_ms']:.2f} ms), max {row['max_ms']:.1f} ms")
            rows.append(row)
    finally:
        b.remove_all()
    return rows


def print_adapters(res: dict) -> None:
    if res.get("adapters"):
        print("\nAdapters: median `binky up` and `binky remove` of a one-resource world "
              f"({res['adapters'][0]['runs']} runs each; sqlite is the floor)\n")
        print("| adapter | up | remove |")
        print("|---|---:|---:|")
        for r in res["adapters"]:
            print(f"| {r['adapter']} | {r['up_s'] * 1000:.0f} ms | {r['remove_s'] * 1000:.0f} ms |")
    if res.get("server_each"):
        print("\nEach extra world: a server of its own versus a slice of one shared server "
              "(time to ready; RAM = PSS in all: for the slices the daemon's plus what the "
              "shared server grew by)\n")
        print("| adapter | worlds | slice: time | slice: RAM in all | server each: time | "
              "server each: RAM in all |")
        print("|---|---:|---:|---:|---:|---:|")
        for r in res["server_each"]:
            print(f"| {r['adapter']} | {r['n']} | {r['slice_s'] * 1000:.0f} ms | "
                  f"{r['slice_kib'] / 1024:.1f} MiB | {r['server_s'] * 1000:.0f} ms | "
                  f"{r['server_kib'] / 1024:.1f} MiB |")
    if res.get("redis_teardown"):
        print("\nRedis teardown (SCAN + UNLINK, 1,000 a batch) while another client sends GETs:\n")
        print("| keys | teardown | other client p50 | p99 | max | p99 idle |")
        print("|---:|---:|---:|---:|---:|---:|")
        for r in res["redis_teardown"]:
            print(f"| {r['keys']:,} | {r['teardown_s']:.2f} s | {r['p50_ms']:.2f} ms | "
                  f"{r['p99_ms']:.2f} ms | {r['max_ms']:.1f} ms | {r['idle_p99_ms']:.2f} ms |")


def summarise(res: dict) -> dict:
    def cum(rows: list[dict], n: int) -> float:
        return sum(r["seconds"] for r in rows[:n])

    table = []
    for n in [1, 2, 4, 8, 16]:
        if n > res["max"]:
            break
        table.append({
            "worlds": n,
            "ram_each_mib": res["server_each"][n - 1]["kib"] / 1024,
            "ram_binky_mib": res["binky"][n - 1]["kib"] / 1024,
            "time_each_s": cum(res["server_each"], n),
            "time_binky_s": cum(res["binky"], n),
        })
    later_b = res["binky"][1:]
    later_a = res["server_each"][1:]
    marg = {}
    if later_b:
        marg = {
            "binky_s": statistics.median(r["seconds"] for r in later_b),
            "each_s": statistics.median(r["seconds"] for r in later_a),
            "binky_mib": (res["binky"][-1]["kib"] - res["binky"][0]["kib"]) / 1024 / len(later_b),
            "each_mib": (res["server_each"][-1]["kib"] - res["server_each"][0]["kib"]) / 1024 / len(later_a),
        }
        marg["ok"] = (marg["binky_s"] <= TARGET_SECONDS and marg["binky_mib"] <= TARGET_MIB
                      and marg["binky_s"] <= marg["each_s"] / 4
                      and marg["binky_mib"] <= marg["each_mib"] / 4)
    return {"table": table, "marginal": marg}


def print_tables(res: dict, summary: dict) -> None:
    print(f"\nWhat N worlds cost: PostgreSQL, {res['rows']:,} rows a world "
          f"(loadavg {res['loadavg_before'][0]:.2f} before, {res['loadavg_after'][0]:.2f} after)\n")
    print("| worlds | RAM: a server each | RAM: Binky | time: a server each | time: Binky |")
    print("|---:|---:|---:|---:|---:|")
    for r in summary["table"]:
        print(f"| {r['worlds']} | {r['ram_each_mib']:.1f} MiB | {r['ram_binky_mib']:.1f} MiB | "
              f"{r['time_each_s']:.2f} s | {r['time_binky_s']:.2f} s |")
    m = summary["marginal"]
    if m:
        print(f"\nMarginal world (median of worlds 2..{res['max']}): a server each "
              f"{m['each_s']:.2f} s and {m['each_mib']:.1f} MiB; Binky {m['binky_s']:.3f} s and "
              f"{m['binky_mib']:.2f} MiB. Target: ≤ {TARGET_SECONDS} s and ≤ {TARGET_MIB:.0f} MiB, "
              f"and ≤ a quarter of a server each: {verdict(m['ok'])}")
    print("\nPostgreSQL clone strategy (CREATE DATABASE … TEMPLATE, median):\n")
    print("| template rows | size | WAL_LOG | FILE_COPY |")
    print("|---:|---:|---:|---:|")
    for r in res["pg_strategies"]:
        print(f"| {r['rows']:,} | {r['bytes'] / 2**20:.1f} MiB | {r['wal_log_s']:.3f} s | "
              f"{r['file_copy_s']:.3f} s |")
    if "mysql_strategies" in res:
        m = res["mysql_strategies"]
        print(f"\nMySQL (MariaDB) clone of {res['rows']:,} rows, median `binky up`: "
              f"copy {m['copy']:.3f} s, dump {m['dump']:.3f} s")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--max", type=int, default=8, help="worlds to bring up (default 8)")
    ap.add_argument("--rows", type=int, default=200_000, help="rows a world (default 200,000)")
    ap.add_argument("--clones", type=int, default=5, help="samples per clone strategy")
    ap.add_argument("--no-mysql", action="store_true", help="skip the MySQL strategy section")
    ap.add_argument("--binary", help="the binky binary to measure")
    ap.add_argument("--build", action="store_true", help="force cargo build --release")
    ap.add_argument("--json", action="store_true", help="JSON on stdout")
    ap.add_argument("--adapters", action="store_true",
                    help="only the adapter rows and the Redis teardown")
    ap.add_argument("--adapter-runs", type=int, default=5, help="samples per adapter row")
    ap.add_argument("--server-worlds", type=int, default=4,
                    help="worlds for the ClickHouse/MongoDB server-each rows (default 4)")
    ap.add_argument("--redis-keys", default="10000,100000,1000000",
                    help="world sizes for the Redis teardown (comma-separated)")
    args = ap.parse_args()
    if args.adapters:
        try:
            binary = ensure_binary(args.binary, args.build)
            tag = str(os.getpid())
            with tempfile.TemporaryDirectory(prefix="binky-adapters-") as tmp:
                res = {"adapters": adapter_rows(binary, Path(tmp), args.adapter_runs, tag),
                       "loadavg": loadavg()}
                res["server_each"] = server_each_vs_slices(binary, Path(tmp), args.server_worlds,
                                                           tag)
                if port_open(6379):
                    sizes = [int(x) for x in args.redis_keys.split(",") if x]
                    res["redis_teardown"] = redis_teardown(binary, Path(tmp), sizes, tag)
        except (BenchError, subprocess.CalledProcessError) as e:
            log(f"error: {e}")
            return 1
        if args.json:
            json.dump(res, sys.stdout, indent=2)
            print()
        else:
            print_adapters(res)
        return 0
    try:
        binary = ensure_binary(args.binary, args.build)
        psql(PG_ADMIN, "select 1")
        with tempfile.TemporaryDirectory(prefix="binky-worlds-") as tmp:
            res = benchmark(args, binary, Path(tmp))
    except (BenchError, subprocess.CalledProcessError) as e:
        log(f"error: {e}")
        return 1
    summary = summarise(res)
    if args.json:
        json.dump({**res, **summary}, sys.stdout, indent=2)
        print()
    else:
        print_tables(res, summary)
    return 0


if __name__ == "__main__":
    sys.exit(main())
