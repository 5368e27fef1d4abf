"""The server's signing keys (Ed25519) and signing of documents: audit checkpoints, deletion certificates and
decision receipts (docs/security.md, "Signing keys").

Where the keys come from:
- Production: `TRUST_SIGNING_KEY` holds the current private key as PEM (PKCS#8; `\\n` may stand for a line
  break, so it fits one environment line), `TRUST_SIGNING_KEY_VALID_FROM` when it took over (ISO 8601), and
  `TRUST_RETIRED_KEYS` a JSON list of the keys it replaced, `[{"public_key_pem", "valid_from", "valid_to"}]`, so
  documents signed before a rotation still verify.
- The embedded default (`make run`, tests): a keyring file, `VAR_DIR/trust/keyring.json` (mode 0600), created on
  first use; `manage.py trust_keys rotate` retires its key and writes a new one.

The canonical form and the verification live in the client package (`memory_governance.trust`), so the server
that signs and the offline verifier share one definition.
"""

from __future__ import annotations

import base64
import json
import os
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from cryptography.hazmat.primitives.serialization import (
    Encoding,
    NoEncryption,
    PrivateFormat,
    PublicFormat,
    load_pem_private_key,
)
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from memory_governance.trust import (
    ALGORITHM,
    SIGNATURE_FIELD,
    canonical_bytes,
    key_id_for,
    load_public_key,
    verify_document,
)

__all__ = [
    "ALGORITHM",
    "SigningKey",
    "VerifyingKey",
    "canonical_bytes",
    "keyring_path",
    "reset_cache",
    "rotate_file_keyring",
    "sign_document",
    "signing_key",
    "verify",
    "verifying_keys",
]


@dataclass(frozen=True)
class VerifyingKey:
    key_id: str
    public_key: Ed25519PublicKey
    valid_from: datetime | None
    valid_to: datetime | None

    def public_key_pem(self) -> str:
        return self.public_key.public_bytes(Encoding.PEM, PublicFormat.SubjectPublicKeyInfo).decode("ascii")

    def as_dict(self) -> dict[str, Any]:
        return {
            "key_id": self.key_id,
            "algorithm": ALGORITHM,
            "public_key_pem": self.public_key_pem(),
            "valid_from": self.valid_from.isoformat() if self.valid_from else None,
            "valid_to": self.valid_to.isoformat() if self.valid_to else None,
        }


@dataclass(frozen=True)
class SigningKey:
    private_key: Ed25519PrivateKey
    verifying: VerifyingKey

    @property
    def key_id(self) -> str:
        return self.verifying.key_id

    def sign(self, data: bytes) -> str:
        return base64.b64encode(self.private_key.sign(data)).decode("ascii")


@dataclass(frozen=True)
class _Keyring:
    current: SigningKey
    retired: tuple[VerifyingKey, ...]


_lock = threading.Lock()
_cached: _Keyring | None = None


def _parse_time(raw: object, what: str) -> datetime | None:
    if raw in (None, ""):
        return None
    if not isinstance(raw, str):
        raise ImproperlyConfigured(f"{what} must be an ISO 8601 time, not {raw!r}")
    try:
        parsed = datetime.fromisoformat(raw)
    except ValueError:
        raise ImproperlyConfigured(f"{what}={raw!r} is not an ISO 8601 time") from None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def _private_from_pem(pem: str, what: str) -> Ed25519PrivateKey:
    try:
        key = load_pem_private_key(pem.replace("\\n", "\n").encode("ascii"), password=None)
    except (ValueError, TypeError, UnicodeEncodeError):
        raise ImproperlyConfigured(f"{what} is not an unencrypted PEM private key") from None
    if not isinstance(key, Ed25519PrivateKey):
        raise ImproperlyConfigured(f"{what} is not an Ed25519 key")
    return key


def _retired_from(entries: object, what: str) -> tuple[VerifyingKey, ...]:
    if not isinstance(entries, list):
        raise ImproperlyConfigured(f"{what} must be a JSON list of retired keys")
    retired = []
    for index, entry in enumerate(entries):
        if not isinstance(entry, Mapping) or not isinstance(entry.get("public_key_pem"), str):
            raise ImproperlyConfigured(f"{what}[{index}] needs public_key_pem")
        try:
            public = load_public_key(str(entry["public_key_pem"]).replace("\\n", "\n"))
        except ValueError as exc:
            raise ImproperlyConfigured(f"{what}[{index}]: {exc}") from None
        retired.append(
            VerifyingKey(
                key_id=key_id_for(public),
                public_key=public,
                valid_from=_parse_time(entry.get("valid_from"), f"{what}[{index}].valid_from"),
                valid_to=_parse_time(entry.get("valid_to"), f"{what}[{index}].valid_to"),
            )
        )
    return tuple(retired)


def _signing(private: Ed25519PrivateKey, valid_from: datetime | None) -> SigningKey:
    public = private.public_key()
    return SigningKey(private, VerifyingKey(key_id_for(public), public, valid_from, None))


def keyring_path() -> Path:
    return Path(settings.VAR_DIR) / "trust" / "keyring.json"


def _pem(private: Ed25519PrivateKey) -> str:
    return private.private_bytes(Encoding.PEM, PrivateFormat.PKCS8, NoEncryption()).decode("ascii")


def _write_keyring(path: Path, document: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    temporary = path.with_suffix(f".tmp-{os.getpid()}")
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        json.dump(document, handle, indent=2)
    os.replace(temporary, path)


def _load_file_keyring() -> _Keyring:
    path = keyring_path()
    if not path.exists():
        # First start of the embedded default: create the key, atomically, readable by this user only. Two
        # processes racing here both write a valid keyring; os.replace keeps one, and the loser re-reads it.
        _write_keyring(
            path,
            {"signing": {"private_key_pem": _pem(Ed25519PrivateKey.generate()), "valid_from": _now()}, "retired": []},
        )
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
        signing = document["signing"]
        private = _private_from_pem(signing["private_key_pem"], f"{path} signing.private_key_pem")
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ImproperlyConfigured(f"the signing keyring {path} cannot be read: {exc}") from None
    return _Keyring(
        _signing(private, _parse_time(signing.get("valid_from"), f"{path} signing.valid_from")),
        _retired_from(document.get("retired", []), f"{path} retired"),
    )


def _load_environment_keyring(pem: str) -> _Keyring:
    private = _private_from_pem(pem, "TRUST_SIGNING_KEY")
    valid_from = _parse_time(os.environ.get("TRUST_SIGNING_KEY_VALID_FROM"), "TRUST_SIGNING_KEY_VALID_FROM")
    raw_retired = os.environ.get("TRUST_RETIRED_KEYS", "").strip() or "[]"
    try:
        entries = json.loads(raw_retired)
    except ValueError:
        raise ImproperlyConfigured("TRUST_RETIRED_KEYS is not JSON") from None
    return _Keyring(_signing(private, valid_from), _retired_from(entries, "TRUST_RETIRED_KEYS"))


def _keyring() -> _Keyring:
    global _cached
    with _lock:
        if _cached is None:
            pem = os.environ.get("TRUST_SIGNING_KEY", "").strip()
            _cached = _load_environment_keyring(pem) if pem else _load_file_keyring()
        return _cached


def reset_cache() -> None:
    """Forget the loaded keys (after a rotation, or when a test changes the environment)."""
    global _cached
    with _lock:
        _cached = None


def signing_key() -> SigningKey:
    return _keyring().current


def verifying_keys() -> list[VerifyingKey]:
    """Every key a document of this deployment may be signed with: the current one first, then retired ones."""
    keyring = _keyring()
    return [keyring.current.verifying, *keyring.retired]


def _now() -> str:
    return datetime.now(UTC).isoformat()


def sign_document(document: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of `document` with `algorithm`, `key_id` and `signature` over its canonical form."""
    key = signing_key()
    signed = {key: value for key, value in document.items() if key != SIGNATURE_FIELD}
    signed["algorithm"] = ALGORITHM
    signed["key_id"] = key.key_id
    signed[SIGNATURE_FIELD] = key.sign(canonical_bytes(signed))
    return signed


def verify(document: Mapping[str, Any]) -> str:
    """Verify against this deployment's keys; the key id, or memory_governance.trust.SignatureInvalid."""
    return verify_document(document, [key.public_key for key in verifying_keys()])


def rotate_file_keyring() -> tuple[str, str]:
    """Retire the embedded keyring's key (kept for verifying) and create a new one; (old key id, new key id).

    Only for the keyring file: a key from the environment is rotated by changing the environment
    (docs/security.md)."""
    if os.environ.get("TRUST_SIGNING_KEY", "").strip():
        raise ImproperlyConfigured(
            "the signing key comes from TRUST_SIGNING_KEY; rotate it in the environment (docs/security.md)"
        )
    old = _load_file_keyring()
    now = _now()
    retired = [
        {
            "public_key_pem": key.public_key_pem(),
            "valid_from": key.valid_from.isoformat() if key.valid_from else None,
            "valid_to": key.valid_to.isoformat() if key.valid_to else None,
        }
        for key in old.retired
    ]
    retired.insert(
        0,
        {
            "public_key_pem": old.current.verifying.public_key_pem(),
            "valid_from": old.current.verifying.valid_from.isoformat() if old.current.verifying.valid_from else None,
            "valid_to": now,
        },
    )
    new_private = Ed25519PrivateKey.generate()
    _write_keyring(
        keyring_path(), {"signing": {"private_key_pem": _pem(new_private), "valid_from": now}, "retired": retired}
    )
    reset_cache()
    return old.current.key_id, signing_key().key_id
