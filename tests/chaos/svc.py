"""A chaos run's service: what a real app does that makes process tracking hard.

Started by Binky as `python3 -X chaos-<run>-<project>-<world>-<service>=1 svc.py ROLE [PORT]`;
the `-X` option is the marker the driver finds the world's processes by in /proc. Every
process it starts carries the same marker, plus `chaosparent=<pid of the instance>`, so the
driver can tell the processes of one instance from those of an earlier one.

Roles:
- `app PORT`: serves HTTP on PORT (its health probe) and forks a child that calls
  `setsid()` (leaving the service's process group and session), as a self-daemonizing
  server does.
- `worker`: keeps a `psql` session busy on the world's database (`$DB_URL`, application
  name: the marker), as a worker in a long query does; opens it again when it ends. When
  the worker is stopped, its backend runs on until the query ends: PostgreSQL notices a
  client gone only when it next talks to it.
- `stray`: the `setsid()` child; only sleeps.

Nothing outlives LIFE seconds, so a run that is killed leaves nothing running for long.
"""

import http.server
import os
import subprocess
import sys
import time

LIFE = 1800
MARKER = next(k for k in sys._xoptions if k.startswith("chaos-"))
HERE = os.path.abspath(__file__)


def spawn_stray():
    parent = os.getpid()
    if os.fork() == 0:
        try:
            os.setsid()
            os.execv(
                sys.executable,
                [
                    sys.executable,
                    "-X",
                    f"{MARKER}=1",
                    "-X",
                    f"chaosparent={parent}",
                    HERE,
                    "stray",
                ],
            )
        finally:
            os._exit(1)


class Quiet(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = b"ok\n"
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


def main():
    role = sys.argv[1]
    start = time.monotonic()
    if role == "stray":
        while time.monotonic() - start < LIFE:
            time.sleep(1)
        return
    if role == "app":
        spawn_stray()
        server = http.server.ThreadingHTTPServer(("127.0.0.1", int(sys.argv[2])), Quiet)
        server.timeout = 1
        while time.monotonic() - start < LIFE:
            server.handle_request()
        return
    if role == "worker":
        me = os.getpid()
        while time.monotonic() - start < LIFE:
            session = subprocess.Popen(
                [
                    "psql",
                    os.environ["DB_URL"],
                    "-qX",
                    "-v",
                    f"m={MARKER}",
                    "-v",
                    f"chaosparent={me}",
                    "-c",
                    "select pg_sleep(3600)",
                ],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                # Named, so a message that lists the session says whose it is.
                env=dict(os.environ, PGAPPNAME=MARKER),
            )
            session.wait()
            time.sleep(1)
        return
    sys.exit(f"svc.py: unknown role {role}")


if __name__ == "__main__":
    main()
