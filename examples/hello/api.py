"""A tiny JSON API on $PORT, backed by the world's own SQLite file."""
import json
import os
import sqlite3
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

DB = os.environ["DATABASE_URL"].removeprefix("sqlite://")


class Handler(BaseHTTPRequestHandler):
    def do_GET(self):
        if self.path == "/healthz":
            return self.reply(200, {"ok": True})
        if self.path == "/hello":
            rows = sqlite3.connect(DB).execute("SELECT text FROM greetings ORDER BY id").fetchall()
            world = os.environ.get("BINKY_WORLD", "?")
            return self.reply(200, {"world": world, "greetings": [r[0] for r in rows]})
        self.reply(404, {"error": "not found"})

    def reply(self, code, body):
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, fmt, *args):
        print("api:", fmt % args, flush=True)


port = int(os.environ["PORT"])
print(f"api listening on 127.0.0.1:{port}", flush=True)
ThreadingHTTPServer(("127.0.0.1", port), Handler).serve_forever()
