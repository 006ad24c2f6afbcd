"""Semantic search over the world's own index, on $PORT.

    GET /search?q=…&k=5   top-k chunks as JSON, best first
    GET /healthz          200 once the model is loaded and the index answers
    GET /                 a search box, for a person

The model is loaded once at start (the query is embedded here, the
documents were embedded by index.py); the database is the world's own copy
of the golden template (DATABASE_URL).
"""

import html
import json
import os
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

import psycopg

from embed import Embedder

DB = os.environ["DATABASE_URL"]
MODEL = Embedder()

SEARCH = """
SELECT c.doc_id, d.title, c.seq, c.body, cosine(c.embedding, %s::real[]) AS score
FROM chunks c JOIN documents d ON d.id = c.doc_id
ORDER BY score DESC, c.id
LIMIT %s
"""


def search(query, k):
    vector = MODEL.encode([query])[0].tolist()
    with psycopg.connect(DB) as db:
        chunking = db.execute("SELECT chunking FROM index_state").fetchone()
        rows = db.execute(SEARCH, (vector, k)).fetchall()
    return {
        "query": query,
        "chunking": chunking[0] if chunking else None,
        # Rounded so that the same index answers with the same bytes.
        "results": [
            {"doc": doc, "title": title, "chunk": seq, "text": body, "score": round(score, 4)}
            for doc, title, seq, body, score in rows
        ],
    }


PAGE = """<!doctype html><meta charset="utf-8"><title>search · {world}</title>
<h1>search · world {world}</h1>
<form action="/"><input name="q" value="{q}" size="50" autofocus> <button>search</button></form>
<ol>{items}</ol>"""


class Handler(BaseHTTPRequestHandler):
    def do_GET(self):
        url = urlsplit(self.path)
        args = parse_qs(url.query)
        q = args.get("q", [""])[0].strip()
        if url.path == "/healthz":
            with psycopg.connect(DB) as db:
                (n,) = db.execute("SELECT count(*) FROM chunks").fetchone()
            return self.reply(200, "application/json", json.dumps({"ok": True, "chunks": n}))
        if url.path == "/search":
            if not q:
                return self.reply(400, "application/json", json.dumps({"error": "missing q"}))
            k = args.get("k", ["5"])[0]
            if not k.isdigit() or not 1 <= int(k) <= 50:
                return self.reply(400, "application/json", json.dumps({"error": "k must be 1 to 50"}))
            return self.reply(200, "application/json", json.dumps(search(q, int(k)), indent=1))
        if url.path == "/":
            hits = search(q, 5)["results"] if q else []
            items = "".join(
                f"<li><b>{html.escape(h['title'])}</b> ({h['score']:.3f})<br>{html.escape(h['text'])}" for h in hits
            )
            world = html.escape(os.environ.get("BINKY_WORLD", "?"))
            return self.reply(200, "text/html; charset=utf-8", PAGE.format(world=world, q=html.escape(q), items=items))
        self.reply(404, "application/json", json.dumps({"error": "not found"}))

    def reply(self, code, kind, text):
        data = text.encode()
        self.send_response(code)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, fmt, *args):
        print("app:", fmt % args, flush=True)


port = int(os.environ["PORT"])
print(f"app listening on 127.0.0.1:{port}", flush=True)
ThreadingHTTPServer(("127.0.0.1", port), Handler).serve_forever()
