"""The operator's settings for canonical sources, parsed at startup (memory_admin/settings.py) and read by
memory_admin/memory/connectors/outbound.py: which origins internal sources may use (SOURCE_ALLOWED_HOSTS) and
where each secret may be sent (SOURCE_SECRET_BINDINGS). Standard library only, so settings.py can import it."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from urllib.parse import unquote, urlsplit

# The server's own settings: never sent anywhere, whatever the allowlist says.
NEVER_SENT = frozenset({"SECRET_KEY", "DATABASE_URL", "CELERY_BROKER_URL", "CACHE_URL", "REDIS_URL"})
DEFAULT_PORTS = {"http": 80, "https": 443}
Origin = tuple[str, str, int]  # (scheme, host, port), lower-case
_SLUG = re.compile(r"[a-z0-9][a-z0-9_-]{0,63}")


def parse_origin(entry: str) -> list[Origin]:
    """An entry of SOURCE_ALLOWED_HOSTS: `scheme://host:port` (port defaults to the scheme's), or a bare host
    name, which allows that host on http port 80 and https port 443 only (never its other ports: a bare
    `localhost` must not reach Redis on 6379 or PostgreSQL on 5432). ValueError when malformed."""
    text = entry.strip().lower()
    if "://" not in text:
        if not text or any(c in text for c in "/:@?#[] "):
            raise ValueError(f"{entry!r} is neither a host name nor scheme://host:port")
        return [(scheme, text, port) for scheme, port in DEFAULT_PORTS.items()]
    parts = urlsplit(text)
    if parts.scheme not in DEFAULT_PORTS or not parts.hostname or parts.username or parts.password:
        raise ValueError(f"{entry!r} must be http(s)://host[:port]")
    if parts.path not in ("", "/") or parts.query or parts.fragment:
        raise ValueError(f"{entry!r} must name an origin only (scheme, host, port), no path")
    return [(parts.scheme, parts.hostname, parts.port or DEFAULT_PORTS[parts.scheme])]


@dataclass(frozen=True)
class SecretBinding:
    """Where the operator lets one secret go: these tenants (slugs), to URLs under these prefixes."""

    tenants: frozenset[str]
    prefixes: tuple[tuple[str, str, int, str], ...]  # (scheme, host, port, path prefix)


def parse_secret_bindings(raw: str) -> dict[str, SecretBinding]:
    """SOURCE_SECRET_BINDINGS, a JSON object: {"VARIABLE": {"tenants": ["slug", ...], "urls": ["https://host[:port]
    /path/prefix", ...]}}. ValueError, naming the entry, when malformed."""
    try:
        document = json.loads(raw or "{}")
    except ValueError:
        raise ValueError("is not JSON") from None
    if not isinstance(document, dict):
        raise ValueError('must be a JSON object {"VARIABLE": {"tenants": [...], "urls": [...]}}')
    bindings: dict[str, SecretBinding] = {}
    for name, entry in document.items():
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name) or name in NEVER_SENT:
            raise ValueError(f"{name!r} is not a variable a source may use")
        if not isinstance(entry, dict) or set(entry) != {"tenants", "urls"}:
            raise ValueError(f"{name}: give exactly tenants and urls")
        tenants, urls = entry["tenants"], entry["urls"]
        if (
            not isinstance(tenants, list)
            or not tenants
            or not all(isinstance(t, str) and _SLUG.fullmatch(t) for t in tenants)
        ):
            raise ValueError(f"{name}: tenants must be a non-empty list of tenant slugs")
        if not isinstance(urls, list) or not urls or not all(isinstance(u, str) for u in urls):
            raise ValueError(f"{name}: urls must be a non-empty list of URL prefixes")
        prefixes = []
        for url in urls:
            parts = urlsplit(url.strip())
            try:
                port = parts.port
            except ValueError:
                raise ValueError(f"{name}: {url!r} has a malformed port") from None
            if parts.scheme not in DEFAULT_PORTS or not parts.hostname or parts.username or parts.query:
                raise ValueError(f"{name}: {url!r} must be http(s)://host[:port]/path-prefix")
            path = parts.path or "/"
            if dot_segments(path):
                raise ValueError(f"{name}: {url!r} has . or .. in its path")
            prefixes.append((parts.scheme, parts.hostname.lower(), port or DEFAULT_PORTS[parts.scheme], path))
        bindings[name] = SecretBinding(frozenset(tenants), tuple(prefixes))
    return bindings


def dot_segments(path: str) -> bool:
    """Whether a URL path has a `.` or `..` segment, written plainly or percent-encoded."""
    return any(segment in (".", "..") for segment in unquote(path).split("/"))


def under(path: str, prefix: str) -> bool:
    """Whether `path` lies under `prefix` by whole segments (/api matches /api and /api/x, not /apix)."""
    if prefix.endswith("/"):
        return path.startswith(prefix)
    return path == prefix or path.startswith(prefix + "/")
