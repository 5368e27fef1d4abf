"""The data keys of crypto-shredding (issue 35, item 4): one AES-256 key per fact (tenant, project, subject, predicate),
kept in a store of its own, apart from the main database, its WAL and its backups (docs/deletion.md, "Sealed values (crypto-shredding)").

Where the store is:
- `KEYSTORE_PATH`: a SQLite file (default `VAR_DIR/keys/keys.sqlite3`). Opened with `PRAGMA secure_delete=ON` (SQLite
  overwrites the bytes of a deleted row with zeros) and `journal_mode=DELETE` (a rollback journal that is deleted
  after each transaction, no write-ahead log that would keep a page of a destroyed key). A destruction deletes the
  rows, then `VACUUM` rewrites the whole file, so the freed pages are gone too. Keep it on a volume that the data
  backups and WAL archives do not copy; back it up (if at all) on a schedule of its own, shorter than the
  data's retention, since a key backup is what would undo a shredding.
- The key-encryption key (KEK) wraps every data key (AES-256-GCM): `KEYSTORE_KEK` (32 bytes, base64) in
  production, else `VAR_DIR/keys/kek` (mode 0600) created on first use. A copy of the key store without the KEK
  opens nothing.

The store holds no identifier in clear: each row is found by keyed hashes (HMAC-SHA256 under a key derived from
the KEK) of its fact, its subject and its predicate, so a destruction by subject or by predicate is one DELETE.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import os
import secrets
import sqlite3
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

KEY_BYTES = 32


@dataclass(frozen=True)
class Fact:
    """What one data key seals: the values of one fact key of one tenant (every revision, and what is written
    about them: audit snapshots, dispute and expiry reasons, recheck observations)."""

    tenant_id: int
    project_id: int
    subject_id: str
    predicate: str


def keystore_path() -> Path:
    configured = os.environ.get("KEYSTORE_PATH", "").strip()
    return Path(configured) if configured else Path(settings.VAR_DIR) / "keys" / "keys.sqlite3"


def kek_path() -> Path:
    return Path(settings.VAR_DIR) / "keys" / "kek"


_lock = threading.Lock()
_kek: bytes | None = None
_local = threading.local()


def _load_kek() -> bytes:
    global _kek
    if _kek is not None:
        return _kek
    with _lock:
        if _kek is not None:
            return _kek
        raw = os.environ.get("KEYSTORE_KEK", "").strip()
        if raw:
            try:
                key = base64.b64decode(raw, validate=True)
            except (binascii.Error, ValueError):
                raise ImproperlyConfigured("KEYSTORE_KEK is not base64") from None
            if len(key) != KEY_BYTES:
                raise ImproperlyConfigured("KEYSTORE_KEK must hold 32 bytes (base64 of 32 random bytes)")
            _kek = key
            return key
        path = kek_path()
        if not path.exists():
            path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            temporary = path.with_suffix(f".tmp-{os.getpid()}")
            fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "wb") as handle:
                handle.write(secrets.token_bytes(KEY_BYTES))
            try:
                os.link(temporary, path)  # the first of two racing processes wins; the other reads its key
            except FileExistsError:
                pass
            os.unlink(temporary)
        key = path.read_bytes()
        if len(key) != KEY_BYTES:
            raise ImproperlyConfigured(f"{path} must hold 32 bytes")
        _kek = key
        return key


def reset_cache() -> None:
    """Forget the KEK and this thread's connection (tests that point VAR_DIR or KEYSTORE_PATH elsewhere)."""
    global _kek, _index
    with _lock:
        _kek = _index = None
    _open_cache.clear()
    connection = getattr(_local, "connection", None)
    if connection is not None:
        connection[1].close()
        _local.connection = None


_SCHEMA = """
CREATE TABLE IF NOT EXISTS data_key (
    key_id TEXT PRIMARY KEY,
    fact TEXT NOT NULL UNIQUE,
    subject TEXT NOT NULL,
    predicate TEXT NOT NULL,
    wrapped BLOB NOT NULL,
    created_at TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS data_key_subject ON data_key (subject);
CREATE INDEX IF NOT EXISTS data_key_predicate ON data_key (predicate);
"""


def _connect() -> sqlite3.Connection:
    """This thread's (and process's) connection to the key store, created with its table on first use."""
    path = keystore_path()
    held = getattr(_local, "connection", None)
    if held is not None and held[0] == (os.getpid(), str(path)):
        return held[1]
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    connection = sqlite3.connect(path, timeout=30, isolation_level=None, check_same_thread=True)
    connection.execute("PRAGMA secure_delete = ON")
    connection.execute("PRAGMA journal_mode = DELETE")
    connection.execute("PRAGMA synchronous = FULL")
    connection.executescript(_SCHEMA)
    try:
        os.chmod(path, 0o600)
    except OSError:
        pass
    _local.connection = ((os.getpid(), str(path)), connection)
    return connection


_index: bytes | None = None


def _index_key() -> bytes:
    """The key of the store's tags, derived from the KEK once per process (every sealed write computes a tag)."""
    global _index
    if _index is None:
        _index = hmac.new(_load_kek(), b"keystore index v1", hashlib.sha256).digest()
    return _index


def _tag(*parts: object) -> str:
    message = "\x1f".join(str(p) for p in parts).encode("utf-8")
    return hmac.new(_index_key(), message, hashlib.sha256).hexdigest()


def fact_tag(fact: Fact) -> str:
    return _tag("fact", fact.tenant_id, fact.project_id, fact.subject_id, fact.predicate)


def subject_tag(tenant_id: int, project_id: int, subject_id: str) -> str:
    return _tag("subject", tenant_id, project_id, subject_id)


def predicate_tag(tenant_id: int, project_id: int, predicate: str) -> str:
    return _tag("predicate", tenant_id, project_id, predicate)


def _wrap(key_id: str, key: bytes) -> bytes:
    nonce = secrets.token_bytes(12)
    return nonce + AESGCM(_load_kek()).encrypt(nonce, key, b"data key v1|" + key_id.encode("ascii"))


def _unwrap(key_id: str, wrapped: bytes) -> bytes:
    try:
        return AESGCM(_load_kek()).decrypt(wrapped[:12], wrapped[12:], b"data key v1|" + key_id.encode("ascii"))
    except InvalidTag:
        raise ImproperlyConfigured(
            "a data key of the key store does not open with this KEYSTORE_KEK (another deployment's store?)"
        ) from None


def key_for(fact: Fact) -> tuple[str, bytes]:
    """The data key that seals `fact`'s values (its id and bytes), created on first use. A key destroyed by a
    deletion is never handed out again: a later value of the fact gets a new key."""
    connection = _connect()
    tag = fact_tag(fact)
    row = connection.execute("SELECT key_id, wrapped FROM data_key WHERE fact = ?", (tag,)).fetchone()
    if row is None:
        key_id = secrets.token_hex(12)
        key = secrets.token_bytes(KEY_BYTES)
        connection.execute(
            "INSERT OR IGNORE INTO data_key (key_id, fact, subject, predicate, wrapped, created_at)"
            " VALUES (?, ?, ?, ?, ?, ?)",
            (
                key_id,
                tag,
                subject_tag(fact.tenant_id, fact.project_id, fact.subject_id),
                predicate_tag(fact.tenant_id, fact.project_id, fact.predicate),
                _wrap(key_id, key),
                datetime.now(UTC).isoformat(),
            ),
        )
        # Another process may have created it first: the stored row wins.
        row = connection.execute("SELECT key_id, wrapped FROM data_key WHERE fact = ?", (tag,)).fetchone()
    return str(row[0]), _unwrap(str(row[0]), bytes(row[1]))


def ensure_keys(facts: Iterable[Fact]) -> int:
    """Create the missing data keys of `facts` in one transaction of the key store: one durable commit for a
    batch's new facts instead of one per fact (each `key_for` of a new fact commits on its own, with the store's
    `synchronous = FULL`). `key_for` then finds each key. How many were created."""
    wanted = {fact_tag(fact): fact for fact in facts}
    if not wanted:
        return 0
    connection = _connect()
    existing: set[str] = set()
    for chunk in _chunks(wanted):
        marks = ",".join("?" * len(chunk))
        existing.update(
            row[0] for row in connection.execute(f"SELECT fact FROM data_key WHERE fact IN ({marks})", chunk)
        )
    missing = [tag for tag in wanted if tag not in existing]
    if not missing:
        return 0
    created_at = datetime.now(UTC).isoformat()
    rows = []
    for tag in missing:
        fact = wanted[tag]
        key_id = secrets.token_hex(12)
        rows.append(
            (
                key_id,
                tag,
                subject_tag(fact.tenant_id, fact.project_id, fact.subject_id),
                predicate_tag(fact.tenant_id, fact.project_id, fact.predicate),
                _wrap(key_id, secrets.token_bytes(KEY_BYTES)),
                created_at,
            )
        )
    connection.execute("BEGIN IMMEDIATE")
    try:
        before = connection.total_changes
        # Another process may have created some first: its rows win (`fact` is unique).
        connection.executemany(
            "INSERT OR IGNORE INTO data_key (key_id, fact, subject, predicate, wrapped, created_at)"
            " VALUES (?, ?, ?, ?, ?, ?)",
            rows,
        )
        created = connection.total_changes - before
        connection.execute("COMMIT")
    except BaseException:
        connection.execute("ROLLBACK")
        raise
    return created


def key_by_id(key_id: str) -> bytes | None:
    """The data key `key_id`, or None once a deletion destroyed it."""
    row = _connect().execute("SELECT wrapped FROM data_key WHERE key_id = ?", (key_id,)).fetchone()
    return None if row is None else _unwrap(key_id, bytes(row[0]))


# Opened keys a process keeps for reads (`opening_key`): at most OPEN_CACHE_SIZE, each for OPEN_CACHE_SECONDS. A key
# destroyed by another process may still open a row here for that long; the rows a deletion covers are hidden from
# reads from its acceptance, and the copies on disk are what the destruction protects. The deletion's proof reads
# the store itself (`key_by_id`), never this cache.
OPEN_CACHE_SECONDS = 30.0
OPEN_CACHE_SIZE = 4096
_open_cache: dict[str, tuple[float, bytes]] = {}


def opening_key(key_id: str) -> bytes | None:
    """`key_by_id` for reads, remembered for OPEN_CACHE_SECONDS (a page of 50 sealed records is 50 keys)."""
    now = time.monotonic()
    held = _open_cache.get(key_id)
    if held is not None and held[0] > now:
        return held[1]
    key = key_by_id(key_id)
    if key is not None:
        if len(_open_cache) >= OPEN_CACHE_SIZE:
            _open_cache.clear()
        _open_cache[key_id] = (now + OPEN_CACHE_SECONDS, key)
    return key


def warm_opening_keys(key_ids: Iterable[str]) -> None:
    """Put the keys among `key_ids` that `opening_key` does not hold yet into its cache, in one look-up (a page of
    sealed records from many facts would otherwise cost one look-up per record). Destroyed keys stay out: their
    rows open as erased through `opening_key`, as before."""
    now = time.monotonic()
    missing = []
    for key_id in key_ids:
        held = _open_cache.get(key_id)
        if key_id and (held is None or held[0] <= now):
            missing.append(key_id)
    if not missing:
        return
    found = keys_by_id(missing)
    if len(_open_cache) + len(found) > OPEN_CACHE_SIZE:
        _open_cache.clear()
    for key_id, key in found.items():
        _open_cache[key_id] = (now + OPEN_CACHE_SECONDS, key)


def keys_by_id(key_ids: Iterable[str]) -> dict[str, bytes]:
    """The data keys among `key_ids` that still exist (one statement per 500)."""
    found: dict[str, bytes] = {}
    connection = _connect()
    for chunk in _chunks(key_ids):
        marks = ",".join("?" * len(chunk))
        for key_id, wrapped in connection.execute(
            f"SELECT key_id, wrapped FROM data_key WHERE key_id IN ({marks})", chunk
        ):
            found[str(key_id)] = _unwrap(str(key_id), bytes(wrapped))
    return found


@dataclass(frozen=True)
class Selection:
    """Which keys a destruction takes: a subject's, a predicate's, or named facts' (of one tenant's project)."""

    tenant_id: int
    project_id: int
    subject_id: str | None = None
    predicate: str | None = None
    facts: tuple[tuple[str, str], ...] = ()  # (subject_id, predicate) pairs

    def _where(self) -> tuple[str, list[str]]:
        if self.subject_id is not None:
            return "subject = ?", [subject_tag(self.tenant_id, self.project_id, self.subject_id)]
        if self.predicate is not None:
            return "predicate = ?", [predicate_tag(self.tenant_id, self.project_id, self.predicate)]
        tags = [fact_tag(Fact(self.tenant_id, self.project_id, s, p)) for s, p in self.facts]
        if not tags:
            return "0", []
        return f"fact IN ({','.join('?' * len(tags))})", tags


def count(selection: Selection) -> int:
    where, params = selection._where()
    return int(_connect().execute(f"SELECT count(*) FROM data_key WHERE {where}", params).fetchone()[0])


def key_ids(selection: Selection) -> list[str]:
    where, params = selection._where()
    return [str(r[0]) for r in _connect().execute(f"SELECT key_id FROM data_key WHERE {where}", params)]


def destroy(selection: Selection) -> int:
    """Delete the selected keys and rewrite the store (`VACUUM`): how many were destroyed. With secure_delete the
    deleted rows' bytes are overwritten at once; VACUUM then rebuilds the file from the live rows only, through a
    rollback journal that is deleted when it ends. What may remain is described in docs/deletion.md."""
    where, params = selection._where()
    connection = _connect()
    destroyed = connection.execute(f"DELETE FROM data_key WHERE {where}", params).rowcount
    _open_cache.clear()
    if destroyed:
        rewrite()
    return int(destroyed)


def _chunks(key_ids: Iterable[str]) -> Iterable[list[str]]:
    wanted = sorted(set(key_ids))
    for start in range(0, len(wanted), 500):
        yield wanted[start : start + 500]


def retire(key_ids: Iterable[str]) -> int:
    """Take the keys off their facts (a deletion's acceptance): they still open what they sealed until destroyed,
    and a later value of the fact gets a new key. How many were retired."""
    connection = _connect()
    retired = 0
    for chunk in _chunks(key_ids):
        marks = ",".join("?" * len(chunk))
        retired += connection.execute(
            "UPDATE data_key SET fact = 'retired:' || key_id, subject = 'retired', predicate = 'retired'"
            f" WHERE key_id IN ({marks})",
            chunk,
        ).rowcount
    return retired


def destroy_ids(key_ids: Iterable[str]) -> int:
    """Delete the keys `key_ids` and rewrite the store (see `destroy`): how many were destroyed."""
    connection = _connect()
    destroyed = 0
    for chunk in _chunks(key_ids):
        marks = ",".join("?" * len(chunk))
        destroyed += connection.execute(f"DELETE FROM data_key WHERE key_id IN ({marks})", chunk).rowcount
        for key_id in chunk:
            _open_cache.pop(key_id, None)
    if destroyed:
        rewrite()
    return destroyed


def rewrite() -> None:
    """Rebuild the key store's file from its live rows (the file is small: one row of ~250 bytes per fact)."""
    _connect().execute("VACUUM")


def describe() -> dict[str, object]:
    """What the deletion report says about the key store (no key material)."""
    path = keystore_path()
    connection = _connect()
    journal = connection.execute("PRAGMA journal_mode").fetchone()[0]
    secure = connection.execute("PRAGMA secure_delete").fetchone()[0]
    return {
        "kind": "sqlite",
        "journal_mode": str(journal),
        "secure_delete": bool(secure),
        "separate_from_database": _is_separate(path),
    }


def _is_separate(path: Path) -> bool:
    database = settings.DATABASES["default"]
    if database.get("ENGINE", "").endswith("sqlite3"):
        return Path(str(database.get("NAME"))).resolve() != path.resolve()
    return True
