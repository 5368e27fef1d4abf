"""Text embedders for the vector index.

The default is `HashingEmbedder`: deterministic, dependency-free and never downloads anything, so the
index works offline, in tests and on a fresh checkout. A sentence-transformers model is used only when
`settings.EMBEDDING_MODEL` names one that is already on local disk and the library is installed.

Vectors from different embedders are not comparable; the vector index records the embedder's `name`
and refuses to mix them (see `memory_admin.derived.vectors`).
"""

from __future__ import annotations

import functools
import hashlib
import itertools
import logging
import math
import os
import re
import unicodedata
from typing import Any, Protocol, runtime_checkable

from django.conf import settings

logger = logging.getLogger(__name__)

__all__ = [
    "Embedder",
    "HashingEmbedder",
    "SentenceTransformerEmbedder",
    "get_embedder",
]


@runtime_checkable
class Embedder(Protocol):
    """Anything that turns texts into fixed-size vectors of length `dim`."""

    dim: int
    name: str

    def embed(self, texts: list[str]) -> list[list[float]]: ...


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


@functools.cache
def get_embedder() -> Embedder:
    """The process-wide embedder: the configured local model if it loads, else hashing.

    `get_embedder.cache_clear()` forgets the choice (tests, settings changes).
    """
    model_name = str(getattr(settings, "EMBEDDING_MODEL", "") or "")
    if model_name:
        try:
            return SentenceTransformerEmbedder(model_name)
        except Exception as exc:  # ImportError, missing files, bad config: never fatal
            logger.warning("EMBEDDING_MODEL=%r unavailable offline (%s); using HashingEmbedder", model_name, exc)
    return HashingEmbedder(int(getattr(settings, "EMBEDDING_DIM", 256)))
