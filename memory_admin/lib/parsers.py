from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from typing import Any

from django.conf import settings
from rest_framework import exceptions, status
from rest_framework.parsers import JSONParser

# Deeper JSON than this is refused: no value the API stores needs it, and Python's decoder and the
# renderers recurse once per level (5,000 levels used to end in a RecursionError, a 500).
MAX_JSON_DEPTH = 64

# Characters no field may hold: PostgreSQL text and jsonb refuse NUL, and a lone surrogate (valid as a
# JSON escape, `"\ud800"`) is not Unicode and cannot be encoded to store. Checked once here, for every
# string and key of every body, so no endpoint has to remember it.
_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")


class PayloadTooLarge(exceptions.APIException):
    status_code = status.HTTP_413_REQUEST_ENTITY_TOO_LARGE
    default_detail = "The request body is larger than this API accepts."
    default_code = "payload_too_large"


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def _finite_float(text: str) -> float:
    # `1e400` is valid JSON but reads as infinity, which jsonb (and the JSON renderer) refuse.
    number = float(text)
    if not math.isfinite(number):
        raise ValueError("a number is out of range (finite numbers only)")
    return number


class DuplicateKey(ValueError):
    """A JSON object names the same key twice. Python's decoder keeps the last one silently, while a proxy or an
    audit tool reading the same body may keep the first: the two would disagree on, say, the subject."""

    def __init__(self, key: str) -> None:
        super().__init__(key)
        self.key = key

    @property
    def message(self) -> str:
        return f'The JSON object names the key "{self.key[:100]}" twice; send each key once.'


def unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """`object_pairs_hook` for json.loads: the object, or DuplicateKey."""
    built: dict[str, Any] = {}
    for key, value in pairs:
        if key in built:
            raise DuplicateKey(key)
        built[key] = value
    return built


def check_storable(value: Any, depth: int = 0) -> None:
    """Raise ParseError if `value` nests deeper than MAX_JSON_DEPTH or holds an unstorable character."""
    if depth > MAX_JSON_DEPTH:
        raise exceptions.ParseError(f"JSON nested deeper than {MAX_JSON_DEPTH} levels.")
    if isinstance(value, str):
        if _UNSTORABLE.search(value):
            raise exceptions.ParseError("JSON strings may not contain NUL characters or lone surrogates.")
    elif isinstance(value, dict):
        for key, item in value.items():
            check_storable(key, depth + 1)
            check_storable(item, depth + 1)
    elif isinstance(value, list):
        for item in value:
            check_storable(item, depth + 1)


class BadJSON(ValueError):
    """What `loads_guarded` refuses, with a reason that quotes no value of the input."""


def loads_guarded(raw: bytes | str) -> Any:
    """Strict JSON from `raw`, as every JSON door reads it: UTF-8, no NaN or Infinity, no key twice in one object,
    at most MAX_JSON_DEPTH levels deep, no string or key holding NUL or a lone surrogate. Raises BadJSON with the
    reason (positions, never content). An empty input is an empty object."""
    try:
        text = raw.decode("utf-8") if isinstance(raw, bytes) else raw
    except UnicodeDecodeError as exc:
        raise BadJSON(f"Not UTF-8: byte {exc.start + 1} cannot be decoded ({exc.reason}).") from None
    if not text.strip():
        return {}
    try:
        data = json.loads(
            text, parse_constant=_refuse_constant, parse_float=_finite_float, object_pairs_hook=unique_keys
        )
    except RecursionError:
        raise BadJSON(f"JSON nested deeper than {MAX_JSON_DEPTH} levels.") from None
    except DuplicateKey as exc:
        raise BadJSON(exc.message) from None
    except json.JSONDecodeError as exc:
        raise BadJSON(f"Not JSON: {exc.msg} at column {exc.colno}.") from None
    except ValueError as exc:  # NaN, Infinity, a number out of range (the message names the constant only)
        raise BadJSON(f"Not JSON: {exc}.") from None
    try:
        check_storable(data)
    except exceptions.ParseError as exc:
        raise BadJSON(str(exc.detail)) from None
    return data


class LimitedJSONParser(JSONParser):
    """JSON bodies up to DATA_UPLOAD_MAX_MEMORY_SIZE; larger ones are a 413, never read in full.

    Strict JSON only (no NaN or Infinity, which jsonb refuses, and no key twice in one object), at most
    MAX_JSON_DEPTH levels deep, and no string or key holding NUL or a lone surrogate: each is a 400 `parse_error` before any view runs.
    """

    def parse(
        self,
        stream: Any,
        media_type: str | None = None,
        parser_context: Mapping[str, Any] | None = None,
    ) -> Any:
        limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
        raw = stream.read(limit + 1) if stream is not None else b""
        if len(raw) > limit:
            raise PayloadTooLarge(f"The request body is larger than {limit} bytes.")
        try:
            return loads_guarded(raw)
        except BadJSON as exc:
            raise exceptions.ParseError(str(exc)) from None
