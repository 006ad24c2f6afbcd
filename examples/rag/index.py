"""Build the search index of one database: documents, chunks and their vectors.

Binky runs this as the `db` resource's `migrate`. The index is a function of
three things in the branch — corpus.jsonl, chunking.json and the model — and
`index_state` records what the current one was built from. When they still
match, this does nothing; when any differs, it empties the tables and rebuilds
them in one transaction (a search never sees half an index).

With `clone_from = "golden"` it runs once, on the golden template; every
world is a copy of that database and embeds nothing. It runs again in a world
only when that world's branch changes one of the inputs (`clone_inputs` in
binky.toml) and the world is reloaded.

By hand: DATABASE_URL=postgresql://… python3 index.py
"""

import hashlib
import json
import os
import re
import sys
import time
from pathlib import Path

import psycopg

from embed import NAME, Embedder

HERE = Path(__file__).resolve().parent

SCHEMA = """
CREATE TABLE IF NOT EXISTS documents (
    id    text PRIMARY KEY,
    topic text NOT NULL,
    title text NOT NULL,
    body  text NOT NULL
);
-- pgvector is not available on every server (nor installable here), so a
-- vector is a plain float4 array and similarity is computed in SQL below.
-- That is a full scan per query: fine for thousands of chunks, not millions.
CREATE TABLE IF NOT EXISTS chunks (
    id        serial PRIMARY KEY,
    doc_id    text NOT NULL REFERENCES documents ON DELETE CASCADE,
    seq       int NOT NULL,
    body      text NOT NULL,
    embedding real[] NOT NULL
);
CREATE TABLE IF NOT EXISTS index_state (
    one       boolean PRIMARY KEY DEFAULT true CHECK (one),
    model     text NOT NULL,
    chunking  jsonb NOT NULL,
    corpus    text NOT NULL,   -- sha256 of corpus.jsonl
    chunks    int NOT NULL,
    seconds   float8 NOT NULL  -- how long embedding took
);
CREATE OR REPLACE FUNCTION cosine(a real[], b real[]) RETURNS float8
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $$
    SELECT sum(x::float8 * y) / nullif(sqrt(sum(x::float8 * x) * sum(y::float8 * y)), 0)
    FROM unnest(a, b) AS t(x, y)
$$;
"""


def split(text, chunking):
    """The chunks of one document: windows of whole sentences."""
    size, overlap = chunking["max_sentences"], chunking["overlap"]
    if size < 1 or not 0 <= overlap < size:
        sys.exit(f"chunking.json: need max_sentences >= 1 and 0 <= overlap < max_sentences, got {chunking}")
    sentences = re.split(r"(?<=[.!?])\s+", text.strip())
    step = size - overlap
    # The last window may be short; a window wholly inside the previous one
    # (possible with overlap) would only repeat it.
    return [" ".join(sentences[i : i + size]) for i in range(0, max(len(sentences) - overlap, 1), step)]


def main():
    # Binky hands migrate the slice's address in BINKY_SLICE_URL: while the
    # golden template is built that is the template's own database.
    url = os.environ.get("BINKY_SLICE_URL") or os.environ["DATABASE_URL"]
    corpus_bytes = (HERE / "corpus.jsonl").read_bytes()
    chunking = json.loads((HERE / "chunking.json").read_text())
    wanted = (NAME, chunking, hashlib.sha256(corpus_bytes).hexdigest())

    with psycopg.connect(url) as db:
        db.execute(SCHEMA)
        row = db.execute("SELECT model, chunking, corpus FROM index_state").fetchone()
        if row == wanted:
            print(f"index is current ({NAME}, chunking {json.dumps(chunking)}): nothing to embed", flush=True)
            return

        docs = [json.loads(line) for line in corpus_bytes.decode().splitlines() if line.strip()]
        chunks = [(d["id"], seq, body) for d in docs for seq, body in enumerate(split(d["text"], chunking))]

        started = time.monotonic()
        model = Embedder()
        loaded = time.monotonic()
        vectors = model.encode([body for _, _, body in chunks])
        seconds = time.monotonic() - loaded

        db.execute("TRUNCATE documents, chunks, index_state RESTART IDENTITY")
        with db.cursor() as cur:
            cur.executemany(
                "INSERT INTO documents (id, topic, title, body) VALUES (%s, %s, %s, %s)",
                [(d["id"], d["topic"], d["title"], d["text"]) for d in docs],
            )
            cur.executemany(
                "INSERT INTO chunks (doc_id, seq, body, embedding) VALUES (%s, %s, %s, %s)",
                [(doc, seq, body, vec.tolist()) for (doc, seq, body), vec in zip(chunks, vectors)],
            )
        db.execute(
            "INSERT INTO index_state (model, chunking, corpus, chunks, seconds) VALUES (%s, %s, %s, %s, %s)",
            (NAME, json.dumps(chunking), wanted[2], len(chunks), seconds),
        )
    # One line per build, and only per build: the example's test counts them
    # to show the corpus is embedded once for all worlds.
    print(
        f"embedded {len(chunks)} chunks of {len(docs)} documents in {seconds:.1f} s "
        f"(model loaded in {loaded - started:.1f} s; chunking {json.dumps(chunking)})",
        flush=True,
    )


if __name__ == "__main__":
    main()
