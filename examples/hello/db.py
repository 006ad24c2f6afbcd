"""Migrate and seed the world's SQLite database (DATABASE_URL or BINKY_SLICE_URL)."""
import os
import sqlite3
import sys


def path():
    url = os.environ.get("DB_URL") or os.environ["BINKY_SLICE_URL"]
    return url.removeprefix("sqlite://")


def main(step):
    db = sqlite3.connect(path())
    if step == "migrate":
        db.execute("CREATE TABLE IF NOT EXISTS greetings (id INTEGER PRIMARY KEY, text TEXT NOT NULL)")
    elif step == "seed":
        db.executemany("INSERT INTO greetings(text) VALUES (?)", [("hello",), ("hallo",), ("olá",)])
    else:
        sys.exit(f"unknown step {step!r}")
    db.commit()
    print(f"{step}: ok")


if __name__ == "__main__":
    main(sys.argv[1])
