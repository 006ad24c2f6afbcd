"""A web front end that calls the api server-side."""
import argparse
import json
import os
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

API = os.environ["API_URL"]


class Handler(BaseHTTPRequestHandler):
    def do_GET(self):
        if self.path == "/healthz":
            return self.reply(200, "ok", "text/plain")
        with urllib.request.urlopen(f"{API}/hello", timeout=5) as r:
            hello = json.load(r)
        items = "".join(f"<li>{g}</li>" for g in hello["greetings"])
        page = f"<h1>world {hello['world']}</h1><ul>{items}</ul><p>api: {os.environ.get('API_PUBLIC_URL')}</p>"
        self.reply(200, page, "text/html; charset=utf-8")

    def reply(self, code, text, ctype):
        data = text.encode()
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, fmt, *args):
        print("web:", fmt % args, flush=True)


p = argparse.ArgumentParser()
p.add_argument("--port", type=int, required=True)
port = p.parse_args().port
print(f"web listening on 127.0.0.1:{port}", flush=True)
ThreadingHTTPServer(("127.0.0.1", port), Handler).serve_forever()
