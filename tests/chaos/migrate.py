"""`migrate` and `seed` of a chaos run's resources: `python3 migrate.py KIND STEP`.

KIND is `pg`, `mysql` or `sqlite`; STEP `migrate` (makes the table `items`) or `seed`
(adds one row). The slice is `$BINKY_SLICE_URL`, as Binky hands it to every migrate and
seed.
"""

import os
import subprocess
import sys
import urllib.parse

MIGRATE = "create table if not exists items(n int)"
SEED = "insert into items values (1)"


def main():
    kind, step = sys.argv[1], sys.argv[2]
    sql = MIGRATE if step == "migrate" else SEED
    url = os.environ["BINKY_SLICE_URL"]
    if kind == "pg":
        subprocess.run(["psql", url, "-qX", "-v", "ON_ERROR_STOP=1", "-c", sql], check=True)
    elif kind == "mysql":
        u = urllib.parse.urlsplit(url)
        env = dict(os.environ, MYSQL_PWD=urllib.parse.unquote(u.password or ""))
        subprocess.run(
            [
                "mysql",
                f"-h{u.hostname}",
                f"-P{u.port or 3306}",
                f"-u{urllib.parse.unquote(u.username or '')}",
                urllib.parse.unquote(u.path.lstrip("/")),
                "-e",
                sql,
            ],
            check=True,
            env=env,
        )
    elif kind == "sqlite":
        import sqlite3

        path = urllib.parse.unquote(urllib.parse.urlsplit(url).path)
        with sqlite3.connect(path) as c:
            c.execute(sql)
    else:
        sys.exit(f"migrate.py: unknown kind {kind}")


if __name__ == "__main__":
    main()
