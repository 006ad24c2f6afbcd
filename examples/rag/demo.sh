#!/usr/bin/env bash
# Two worlds, one embedding run. World a's branch re-chunks the corpus and
# its world re-indexes; world b's search answers exactly as before.
#
# Needs what README.md sets up: `binky` on PATH, PG_ADMIN_URL and RAG_PYTHON.
set -euo pipefail
cd "$(dirname "$0")"
: "${PG_ADMIN_URL:?set PG_ADMIN_URL (README.md)}" "${RAG_PYTHON:?set RAG_PYTHON (README.md)}"

query="how+do+owls+find+prey+in+the+dark"
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

say() { printf '\n== %s\n' "$*"; }
# Saves a world's answer to the query as out/<name>.json and prints its hits.
search() {
  binky curl "$1" search "/search?q=$query&k=3" -f >"$out/$2.json"
  "$RAG_PYTHON" -c 'import json, sys
answer = json.load(open(sys.argv[1]))
print("  chunking", json.dumps(answer["chunking"]))
for r in answer["results"]:
    print("  %.4f  %s #%d: %s" % (r["score"], r["title"], r["chunk"], r["text"]))' "$out/$2.json"
}

# World a is re-indexed below, so a second run needs fresh worlds.
for world in a b; do
  if binky env "$world" >/dev/null 2>&1; then
    echo "world $world exists: the demo starts from fresh worlds (binky remove $world)" >&2
    exit 1
  fi
done

say "binky up a: the project's first world builds the golden template, which embeds the corpus"
binky up a
binky logs a db -n 1
say "binky up b: a copy of the template, nothing embedded"
binky up b
binky logs b db -n 1

say "a and b search their own copies: ${query//+/ }"
search a a-before
search b b-before

say "world a's branch: one sentence per chunk instead of three; binky reload a"
# The world's own checkout of this folder, from `binky env`.
worktree=$(eval "$(binky env a --export)" && echo "$BINKY_WORKTREE")
printf '{ "max_sentences": 1, "overlap": 0 }\n' >"$worktree/chunking.json"
git -C "$worktree" diff --quiet || git -C "$worktree" commit -qm "rag: one sentence per chunk" chunking.json
# chunking.json is a clone input: the world's migrate key moved, so reload
# runs migrate (index.py) in world a alone, which rebuilds its index.
binky reload a
binky logs a db -n 1

say "a and b again"
search a a-after
search b b-after

say "result"
if ! cmp -s "$out/b-before.json" "$out/b-after.json"; then
  echo "✗ world b's results changed" >&2
  exit 1
fi
if cmp -s "$out/a-before.json" "$out/a-after.json"; then
  echo "✗ world a's results did not change" >&2
  exit 1
fi
echo "✓ world a re-indexed with its branch's chunking; world b's results are byte for byte what they were"
echo "  both still run: binky status; binky remove a && binky remove b when done"
