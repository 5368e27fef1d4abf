"""The signed documents' format, shared by the server that signs and the offline verifier that checks.

A signed document (a deletion certificate, a decision receipt, an audit checkpoint) is a JSON object. Its
signature covers the document's *canonical form*: every member except `signature` itself, serialised as JSON
with object keys sorted by code point, no insignificant whitespace (`,` and `:` separators), strings written as
UTF-8 (no `\\u` escapes except those JSON requires), and no floating-point numbers (a float is refused, so two
implementations cannot disagree on its digits). The signature is Ed25519 over those bytes, written in standard
base64; `key_id` names the key, `ed25519:` followed by the first 16 hex digits of the SHA-256 of the raw 32-byte
public key, so a key's id can be computed from the key alone.

This module needs only the standard library to build the canonical form; verifying needs the `cryptography`
package (the client's `[verify]` extra). No Django, no server.
"""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import Iterable, Mapping
from typing import Any

ALGORITHM = "ed25519"
SIGNATURE_FIELD = "signature"


class SignatureInvalid(Exception):
    """The document does not verify; the message says why (which key, which check)."""


def _refuse_floats(value: Any, path: str = "$") -> None:
    if isinstance(value, float):
        raise ValueError(f"{path} is a floating-point number; signed documents carry integers or strings only")
    if isinstance(value, Mapping):
        for key, item in value.items():
            if not isinstance(key, str):
                raise ValueError(f"{path} has a non-string key {key!r}")
            _refuse_floats(item, f"{path}.{key}")
    elif isinstance(value, list | tuple):
        for index, item in enumerate(value):
            _refuse_floats(item, f"{path}[{index}]")


def canonical_bytes(document: Mapping[str, Any]) -> bytes:
    """The bytes a signature covers: the document without `signature`, in the canonical JSON form above."""
    unsigned = {key: value for key, value in document.items() if key != SIGNATURE_FIELD}
    _refuse_floats(unsigned)
    return json.dumps(unsigned, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def digest(data: bytes) -> str:
    """SHA-256 as lowercase hex: the hash chain's and the commitments' one hash."""
    return hashlib.sha256(data).hexdigest()


def key_id_for_raw(public_raw: bytes) -> str:
    return f"{ALGORITHM}:{hashlib.sha256(public_raw).hexdigest()[:16]}"


def load_public_key(pem: str | bytes) -> Any:
    """An Ed25519 public key from PEM (SubjectPublicKeyInfo); ValueError when the PEM is not one."""
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
    from cryptography.hazmat.primitives.serialization import load_pem_public_key

    data = pem.encode("ascii") if isinstance(pem, str) else pem
    try:
        key = load_pem_public_key(data)
    except (ValueError, TypeError) as exc:
        raise ValueError(f"not a PEM public key: {exc}") from None
    if not isinstance(key, Ed25519PublicKey):
        raise ValueError("the PEM holds a public key that is not Ed25519")
    return key


def key_id_for(public_key: Any) -> str:
    from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

    return key_id_for_raw(public_key.public_bytes(Encoding.Raw, PublicFormat.Raw))


def verify_document(document: Mapping[str, Any], public_keys: Iterable[Any]) -> str:
    """Check `document`'s signature against the key its `key_id` names among `public_keys`; return that key id.

    Raises SignatureInvalid with the reason: no signature, an unknown key, a signature that does not match the
    canonical form (any changed byte of any signed member), or a document that cannot be put in canonical form.
    """
    from cryptography.exceptions import InvalidSignature

    if not isinstance(document, Mapping):
        raise SignatureInvalid("the document is not a JSON object")
    signature = document.get(SIGNATURE_FIELD)
    key_id = document.get("key_id")
    if not isinstance(signature, str) or not signature:
        raise SignatureInvalid("the document has no signature")
    if not isinstance(key_id, str) or not key_id:
        raise SignatureInvalid("the document does not name its key (key_id)")
    by_id = {key_id_for(key): key for key in public_keys}
    if key_id not in by_id:
        known = ", ".join(sorted(by_id)) or "none"
        raise SignatureInvalid(
            f"the document was signed with key {key_id}, which is not among the keys given ({known})"
        )
    try:
        raw_signature = base64.b64decode(signature, validate=True)
    except ValueError:
        raise SignatureInvalid("the signature is not base64") from None
    try:
        data = canonical_bytes(document)
    except ValueError as exc:
        raise SignatureInvalid(f"the document cannot be put in canonical form: {exc}") from None
    try:
        by_id[key_id].verify(raw_signature, data)
    except InvalidSignature:
        raise SignatureInvalid(
            f"the signature does not match the document's content under key {key_id}: "
            "a signed member was changed, added or removed after signing"
        ) from None
    return key_id
