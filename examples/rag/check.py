"""`binky verify`: the model is the real one, and this world's search works.

    python3 check.py http://localhost:PORT
"""

import json
import sys
import urllib.parse
import urllib.request

from embed import Embedder

# The first five dimensions of all-MiniLM-L6-v2's embedding of "hello world"
# as sentence-transformers computes it, published with fastembed's tests of
# the same model (rounded to six decimals there).
HELLO_WORLD = [-0.034478, 0.03102, 0.00673, 0.02611, -0.039362]

model = Embedder()
hello, cat, kitten, rates = model.encode(
    ["hello world", "A cat sits on the mat.", "A kitten rests on a rug.", "Interest rates rose again."]
)
off = abs(hello[:5] - HELLO_WORLD).max()
assert off < 1e-4, f"'hello world' embeds {hello[:5]}, expected {HELLO_WORLD}"
# Meaning, not shared words: the paraphrase is far closer than the unrelated sentence.
assert cat @ kitten > 0.5 > 0.1 > cat @ rates, (cat @ kitten, cat @ rates)
print(f"model: matches the reference (max diff {off:.1e}); paraphrase {cat @ kitten:.2f}, unrelated {cat @ rates:.2f}")

base = sys.argv[1]
query = "my tap keeps dripping"
with urllib.request.urlopen(f"{base}/search?{urllib.parse.urlencode({'q': query, 'k': 3})}", timeout=30) as r:
    top = json.load(r)["results"][0]
assert top["doc"] == "home-repair-01", top
print(f"search: {query!r} -> {top['title']!r} ({top['score']})")
