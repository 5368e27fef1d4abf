"""Sealed values (crypto-shredding, issue 35 item 4): the one place values are encrypted and opened.

A value, and every text written about it, is stored sealed under its fact's data key (lib.keystore): AES-256-GCM,
a fresh 96-bit nonce per seal, in a self-describing envelope

    mg1.<tenant id>.<key id>.<base64url(nonce || ciphertext || tag)>

whose associated data binds it to the tenant, the key and the column it was written for (its `purpose`), so an
envelope copied into another tenant's row or another column does not open. Opening needs only the envelope and the
key store. A deletion destroys the fact's key (deletion/stores/keys.py): every copy of the envelope — the row's dead
tuples, the WAL, a replica, a backup taken before — is then ciphertext nobody can open.

How columns hold envelopes:
- a JSON column (`SealedJSONField`): `{"$sealed": "<envelope>"}` in place of the value;
- a text column (`SealedTextField`): the envelope after a record-separator character (`\\x1e`), which free text
  accepted by the domain (memory.validation refuses control characters) never begins with;
- audit snapshots (`SealedJSONField(nested=...)`): the named keys of the snapshot hold `{"$sealed": ...}`, the
  rest stays readable (status, times), sealed by the audit writer, which knows the fact (memory.audit).

Model fields seal in `pre_save` (Django's save, bulk_create, and lib.rows's statements all call it) from the
instance's `sealing_fact()`, and open in `from_db_value` (every queryset, values_list, lib.rows.load and
lib.prepared apply it), so the instances every layer reads hold the plain value. A value whose key was destroyed
opens as `ERASED_VALUE` / `ERASED_TEXT`: a clear state, never an error.

`SEALING_ENABLED` (environment `SEALING`, on by default on both backends) turns sealing of new writes off; reads
open envelopes either way. `manage.py seal_values` seals rows written before (or while sealing was off).
"""

from __future__ import annotations

import base64
import binascii
import json
import re
import secrets
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any, Protocol

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from django.conf import settings
from django.core.serializers.json import DjangoJSONEncoder
from django.db import models

from memory_admin.lib import keystore
from memory_admin.lib.keystore import Fact

__all__ = [
    "ERASED_TEXT",
    "ERASED_VALUE",
    "Fact",
    "KeyDestroyed",
    "SealedJSONField",
    "SealedTextField",
    "SystemOfField",
    "enabled",
    "envelope_key_id",
    "is_sealed",
    "open_envelope",
    "open_json",
    "open_text",
    "prepare_keys",
    "seal_json",
    "seal_text",
    "system_of",
]

VERSION = "mg1"
JSON_MARK = "$sealed"
TEXT_MARK = "\x1e"
ERASED_TEXT = "[erased: the key that sealed this text was destroyed by a deletion]"
ERASED_VALUE: dict[str, Any] = {"erased": "the key that sealed this value was destroyed by a deletion"}

# Purposes of the nested snapshot keys (memory.audit seals them, AuditEvent opens them).
# `restorable`: a dispute resolution's record states kept for undo (their status reasons quote values).
SNAPSHOT_KEYS = ("value", "source_canonical_ref", "status_reason", "restorable")


class KeyDestroyed(Exception):
    """The envelope's key no longer exists (a deletion destroyed it), or the envelope is not one of ours."""


class Sealable(Protocol):
    def sealing_fact(self) -> Fact | None: ...


def enabled() -> bool:
    return bool(getattr(settings, "SEALING_ENABLED", True))


def _aad(tenant_id: int, key_id: str, purpose: str) -> bytes:
    return f"{VERSION}|{tenant_id}|{key_id}|{purpose}".encode()


def prepare_keys(facts: Iterable[Fact]) -> None:
    """Before a batch seals the values of many facts: their missing data keys created in one commit of the key
    store (keystore.ensure_keys) rather than one each as the values are sealed."""
    if enabled():
        keystore.ensure_keys(facts)


def seal_bytes(data: bytes, fact: Fact, purpose: str) -> str:
    key_id, key = keystore.key_for(fact)
    nonce = secrets.token_bytes(12)
    sealed = AESGCM(key).encrypt(nonce, data, _aad(fact.tenant_id, key_id, purpose))
    body = base64.urlsafe_b64encode(nonce + sealed).rstrip(b"=").decode("ascii")
    return f"{VERSION}.{fact.tenant_id}.{key_id}.{body}"


def parse_envelope(envelope: str) -> tuple[int, str, bytes]:
    """The tenant id, key id and sealed bytes of an envelope (KeyDestroyed if it is not one)."""
    try:
        version, tenant, key_id, body = envelope.split(".", 3)
        if version != VERSION:
            raise ValueError(version)
        data = base64.urlsafe_b64decode(body + "=" * (-len(body) % 4))
        return int(tenant), key_id, data
    except (ValueError, binascii.Error):
        raise KeyDestroyed("not a sealed envelope") from None


def envelope_key_id(envelope: str) -> str:
    """The key id an envelope names ("" when it is not one): what a page of sealed values looks up at once
    (keystore.warm_opening_keys) before opening them."""
    parts = envelope.split(".", 3)
    return parts[2] if len(parts) == 4 and parts[0] == VERSION else ""


def open_envelope(envelope: str, purpose: str, *, cached: bool = False) -> bytes:
    """The plain bytes of `envelope`; KeyDestroyed when its key is gone (or it was altered or moved). The reads of
    the model fields take the key from the process's short-lived cache (`cached`, keystore.opening_key); a proof
    asks the key store itself."""
    tenant_id, key_id, data = parse_envelope(envelope)
    key = keystore.opening_key(key_id) if cached else keystore.key_by_id(key_id)
    if key is None:
        raise KeyDestroyed("its data key was destroyed")
    try:
        return AESGCM(key).decrypt(data[:12], data[12:], _aad(tenant_id, key_id, purpose))
    except InvalidTag:
        raise KeyDestroyed("the envelope does not open with its key (altered, or moved to another column)") from None


def _dumps(value: Any) -> bytes:
    return json.dumps(value, cls=DjangoJSONEncoder, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def seal_json(value: Any, fact: Fact, purpose: str) -> dict[str, str]:
    return {JSON_MARK: seal_bytes(_dumps(value), fact, purpose)}


def seal_text(text: str, fact: Fact, purpose: str) -> str:
    return TEXT_MARK + seal_bytes(text.encode("utf-8"), fact, purpose)


def is_sealed(stored: Any) -> bool:
    return (type(stored) is dict and len(stored) == 1 and JSON_MARK in stored) or (
        isinstance(stored, str) and stored.startswith(TEXT_MARK)
    )


# Inside `reading_stored()`, reads give sealed columns as stored (envelopes), not opened.
_READ_STORED: ContextVar[bool] = ContextVar("sealing_read_stored", default=False)


@contextmanager
def reading_stored() -> Iterator[None]:
    """Reads inside the block get sealed columns as they are stored, envelopes unopened: the audit chain's
    verification checks its commitments over the stored form, which still holds once a deletion destroyed the key
    (and costs no decryption)."""
    token = _READ_STORED.set(True)
    try:
        yield
    finally:
        _READ_STORED.reset(token)


def open_json(stored: Any, purpose: str) -> Any:
    """A JSON column's value as stored → the plain value (unsealed values are returned as they are)."""
    if _READ_STORED.get():
        return stored
    if type(stored) is dict and len(stored) == 1 and JSON_MARK in stored:
        try:
            return json.loads(open_envelope(str(stored[JSON_MARK]), purpose, cached=True))
        except KeyDestroyed:
            return dict(ERASED_VALUE)
    return stored


def open_text(stored: Any, purpose: str) -> Any:
    if _READ_STORED.get():
        return stored
    if isinstance(stored, str) and stored.startswith(TEXT_MARK):
        try:
            return open_envelope(stored[len(TEXT_MARK) :], purpose, cached=True).decode("utf-8")
        except KeyDestroyed:
            return ERASED_TEXT
    return stored


def seal_snapshot(snapshot: dict[str, Any] | None, fact: Fact) -> dict[str, Any] | None:
    """An audit snapshot with its `SNAPSHOT_KEYS` sealed (the rest stays readable: status, revision, times)."""
    if snapshot is None or not enabled():
        return snapshot
    sealed = dict(snapshot)
    for name in SNAPSHOT_KEYS:
        if name in sealed and sealed[name] not in (None, "") and not is_sealed(sealed[name]):
            sealed[name] = seal_json(sealed[name], fact, f"snapshot.{name}")
    return sealed


def open_snapshot(stored: Any) -> Any:
    if type(stored) is not dict or _READ_STORED.get():
        return stored
    opened = None
    for name in SNAPSHOT_KEYS:
        item = stored.get(name)
        if type(item) is dict and JSON_MARK in item:
            opened = opened or dict(stored)
            opened[name] = open_json(item, f"snapshot.{name}")
    return opened if opened is not None else stored


def item_fact(tenant_id: int, project_id: int, kind: str, public_id: str) -> Fact | None:
    """The key of a derived item built from several facts (a summary, a planned action): one of its own, destroyed
    when a deletion removes or blanks the item. Its "subject" begins with a control character no subject id has."""
    return Fact(tenant_id, project_id, f"{TEXT_MARK}{kind}:{public_id}", "") if public_id else None


def fact_of(obj: Any) -> Fact | None:
    method = getattr(obj, "sealing_fact", None)
    return method() if method is not None else None


class SealedJSONField(models.JSONField):
    """A JSON column whose value is stored sealed under the row's fact key (`sealing_fact()`), opened on read.
    With `snapshot=True` the writer seals (audit snapshots, `seal_snapshot`) and reads open the snapshot's keys."""

    sealed = True

    def __init__(self, *args: Any, purpose: str = "", snapshot: bool = False, **kwargs: Any) -> None:
        self.purpose = purpose
        self.snapshot = snapshot
        super().__init__(*args, **kwargs)

    def deconstruct(self) -> Any:
        name, path, args, kwargs = super().deconstruct()
        kwargs["purpose"] = self.purpose
        if self.snapshot:
            kwargs["snapshot"] = True
        return name, path, args, kwargs

    def pre_save(self, model_instance: models.Model, add: bool) -> Any:
        value = getattr(model_instance, self.attname)
        if self.snapshot or value is None or not enabled() or is_sealed(value):
            return value
        fact = fact_of(model_instance)
        return value if fact is None else seal_json(value, fact, self.purpose)

    def from_db_value(self, value: Any, expression: Any, connection: Any) -> Any:
        value = super().from_db_value(value, expression, connection)
        return open_snapshot(value) if self.snapshot else open_json(value, self.purpose)


class SealedTextField(models.TextField):
    """A text column stored sealed under the row's fact key when not empty, opened on read. With
    `by_writer=True` the writer seals it (an audit event's reason) and reads only open it."""

    sealed = True

    def __init__(self, *args: Any, purpose: str = "", by_writer: bool = False, **kwargs: Any) -> None:
        self.purpose = purpose
        self.by_writer = by_writer
        super().__init__(*args, **kwargs)

    def deconstruct(self) -> Any:
        name, path, args, kwargs = super().deconstruct()
        kwargs["purpose"] = self.purpose
        if self.by_writer:
            kwargs["by_writer"] = True
        return name, path, args, kwargs

    def pre_save(self, model_instance: models.Model, add: bool) -> Any:
        value = getattr(model_instance, self.attname)
        if self.by_writer or not value or not isinstance(value, str) or not enabled() or is_sealed(value):
            return value
        fact = fact_of(model_instance)
        return value if fact is None else seal_text(value, fact, self.purpose)

    def from_db_value(self, value: Any, expression: Any, connection: Any) -> Any:
        return open_text(value, self.purpose)


@contextmanager
def stored_values(objects: Sequence[models.Model], names: Sequence[str]) -> Iterator[None]:
    """For a write that takes attributes as they are (Django's `bulk_update`, which calls no `pre_save`): the
    sealed fields among `names` hold their stored (sealed) form inside the block, their plain value again after."""
    if not objects:
        yield
        return
    meta = type(objects[0])._meta
    fields = [f for f in (meta.get_field(n) for n in names) if getattr(f, "sealed", False)]
    if not fields:
        yield
        return
    kept = [(o, f.attname, getattr(o, f.attname)) for o in objects for f in fields]  # type: ignore[union-attr]
    for o in objects:
        for f in fields:
            setattr(o, f.attname, f.pre_save(o, False))  # type: ignore[union-attr]
    try:
        yield
    finally:
        for o, attname, value in kept:
            setattr(o, attname, value)


# A source ref's system: the part before its first ':' when it looks like a system name ("crm" of
# "crm:contacts/alice@example.com"), else empty. It stays in clear beside the sealed ref, so that lists filter by
# system in SQL (memory.filters) while the rest of the ref — which may name the person — is sealed.
SYSTEM_NAME = re.compile(r"[a-z][a-z0-9_.-]{0,63}")


def system_of(ref: str | None) -> str:
    system, colon, _ = (ref or "").partition(":")
    return system if colon and SYSTEM_NAME.fullmatch(system) else ""


class SystemOfField(models.CharField):
    """The clear system part (`system_of`) of the sealed ref in the field `of`, computed on every write from the
    instance's plain ref (`pre_save`: Django's save and bulk_create, and lib.rows's statements, which call it for
    fields marked `computed`), so no writer has to remember it."""

    computed = True

    def __init__(self, *args: Any, of: str = "", **kwargs: Any) -> None:
        self.of = of
        kwargs.setdefault("max_length", 64)
        kwargs.setdefault("blank", True)
        kwargs.setdefault("default", "")
        super().__init__(*args, **kwargs)

    def deconstruct(self) -> Any:
        name, path, args, kwargs = super().deconstruct()
        kwargs["of"] = self.of
        return name, path, args, kwargs

    def pre_save(self, model_instance: models.Model, add: bool) -> Any:
        ref = getattr(model_instance, self.of, "") if self.of else ""
        if not isinstance(ref, str) or is_sealed(ref):
            return getattr(model_instance, self.attname)  # the ref as stored (a migration's copy): kept as it is
        system = system_of(ref)
        setattr(model_instance, self.attname, system)
        return system
