"""Outbound HTTP for canonical sources: where the server may connect, and how much it reads.

A policy's URL comes from a tenant admin, who is not the operator. So, unless the operator allows it
by setting, the server refuses loopback, private, link-local and metadata addresses; it checks every
address a name resolves to and then connects to the address it checked (a second lookup could
answer differently); it never follows a redirect, never uses a proxy from the environment, caps the
answer's size, and stops at one deadline for the whole exchange. Failures are a few classes with
fixed texts, so an error never tells an open port from a closed one.
"""

from __future__ import annotations

import http.client
import ipaddress
import socket
import ssl
import time
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from django.conf import settings

from memory_admin.lib.source_settings import DEFAULT_PORTS, NEVER_SENT, Origin, dot_segments, parse_origin, under

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

# Cloud metadata services (AWS, AWS IPv6, ECS tasks, Alibaba, Azure's wire server): refused even where
# private networks are allowed; only an explicit SOURCE_ALLOWED_NETWORKS/HOSTS entry reaches them.
METADATA_ADDRESSES = frozenset(
    ipaddress.ip_address(a)
    for a in ("169.254.169.254", "169.254.170.2", "fd00:ec2::254", "100.100.100.200", "168.63.129.16")
)


class Refused(Exception):
    """The target is an address this server does not fetch."""


class Unreachable(Exception):
    """No answer: name not found, connection refused or reset, TLS failure, malformed answer."""


class Timeout(Exception):
    """The exchange did not finish within the connector's timeout."""


class Redirected(Exception):
    def __init__(self, status: int) -> None:
        super().__init__(status)
        self.status = status


class TooLarge(Exception):
    """The answer is larger than SOURCE_MAX_RESPONSE_BYTES."""


@dataclass(frozen=True)
class Answer:
    status: int
    body: bytes


def address_kind(ip: IPAddress) -> str | None:
    """None for a public address; else what kind of internal address it is."""
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped  # ::ffff:127.0.0.1 is 127.0.0.1
    if ip in METADATA_ADDRESSES:
        return "metadata"
    if ip.is_loopback:
        return "loopback"
    if ip.is_link_local:
        return "link-local"
    if ip.is_unspecified or ip.is_multicast or ip.is_reserved:
        return "reserved"
    if ip.is_private or not ip.is_global:
        return "private"  # RFC 1918, unique local, shared (CGNAT) and documentation ranges
    return None


def allowed_origins() -> set[Origin]:
    return {origin for entry in settings.SOURCE_ALLOWED_HOSTS for origin in parse_origin(entry)}


def origin_allowed(scheme: str, host: str, port: int) -> bool:
    """Whether the operator named this exact origin (SOURCE_ALLOWED_HOSTS) as one sources may use."""
    return (scheme.lower(), host.lower(), port) in allowed_origins()


def address_allowed(host: str, ip: IPAddress, scheme: str, port: int) -> bool:
    if origin_allowed(scheme, host, port):
        return True
    if any(ip in ipaddress.ip_network(n, strict=False) for n in settings.SOURCE_ALLOWED_NETWORKS):
        return True
    kind = address_kind(ip)
    if kind is None:
        return True
    return kind in ("loopback", "private") and bool(settings.SOURCE_ALLOW_PRIVATE_NETWORKS)


def literal_refused(host: str, scheme: str, port: int) -> bool:
    """Whether a URL's host, read without any lookup, is an address this server would refuse."""
    if origin_allowed(scheme, host, port):
        return False
    if host.lower() == "localhost" or host.lower().endswith(".localhost"):
        return not address_allowed(host, ipaddress.ip_address("127.0.0.1"), scheme, port)
    try:
        ip = ipaddress.ip_address(host.split("%")[0])
    except ValueError:
        return False  # a name: checked after resolution, at every fetch
    return not address_allowed(host, ip, scheme, port)


def secret_env_allowed(name: str) -> bool:
    """Whether a policy may name this environment variable as its secret at all (SOURCE_SECRET_ENV_ALLOWLIST);
    where it may be sent is `secret_binding_problem`'s question."""
    if name in NEVER_SENT:
        return False
    for entry in settings.SOURCE_SECRET_ENV_ALLOWLIST:
        if name == entry or (entry.endswith("*") and name.startswith(entry[:-1])):
            return True
    return False


def secret_binding_problem(name: str, tenant_slug: str, url: str) -> str | None:
    """Why the secret in variable `name` may not be sent for this tenant to this URL (None: it may). Checked
    when a policy is saved (with the template's fixed part) and again on every fetch (with the URL built).
    The answer never says where the secret may go: another tenant's admin must not learn that either."""
    binding = settings.SOURCE_SECRET_BINDINGS.get(name)
    refusal = (
        f"The operator has not bound the secret variable {name} to this tenant and this URL "
        "(SOURCE_SECRET_BINDINGS: its tenants and URL prefixes)."
    )
    if binding is None or tenant_slug not in binding.tenants:
        return refusal
    try:
        parts = urlsplit(url)
        scheme, host, port = parts.scheme, (parts.hostname or "").lower(), parts.port or DEFAULT_PORTS.get(parts.scheme)
    except ValueError:
        return refusal
    path = parts.path or "/"
    if dot_segments(path):  # /api/../admin would leave the prefix once the server normalises it
        return refusal
    if not any(
        (scheme, host, port) == (p_scheme, p_host, p_port) and under(path, p_path)
        for p_scheme, p_host, p_port, p_path in binding.prefixes
    ):
        return refusal
    return None


def _resolve(host: str, port: int, scheme: str) -> list[tuple[int, Any]]:
    """Every (family, sockaddr) the host resolves to, each allowed, or Refused/Unreachable."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError):
        raise Unreachable from None
    targets: list[tuple[int, Any]] = []
    for family, _, _, _, sockaddr in infos:
        ip = ipaddress.ip_address(str(sockaddr[0]).split("%")[0])
        # One internal address among public ones refuses the whole name: we do not pick and choose.
        if not address_allowed(host, ip, scheme, port):
            raise Refused
        if (family, sockaddr) not in targets:
            targets.append((family, sockaddr))
    if not targets:
        raise Unreachable
    return targets


def _connect_checked(targets: list[tuple[int, Any]], timeout: float | None) -> socket.socket:
    last: OSError | None = None
    for family, sockaddr in targets:
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.settimeout(timeout)
        try:
            sock.connect(sockaddr)
        except OSError as exc:
            sock.close()
            last = exc
            continue
        return sock
    raise last or OSError("no address")


# Connections that go only to addresses already checked (no second lookup): http.client opens its
# socket through `_create_connection`, for HTTP and, before TLS (which still checks the host name), HTTPS.
class _PinnedHTTP(http.client.HTTPConnection):
    def __init__(self, host: str, port: int, targets: list[tuple[int, Any]], timeout: float) -> None:
        super().__init__(host, port, timeout=timeout)
        self._create_connection = lambda _address, timeout=None, _source=None: _connect_checked(targets, timeout)


class _PinnedHTTPS(http.client.HTTPSConnection):
    def __init__(self, host: str, port: int, targets: list[tuple[int, Any]], timeout: float) -> None:
        super().__init__(host, port, timeout=timeout, context=ssl.create_default_context())
        self._create_connection = lambda _address, timeout=None, _source=None: _connect_checked(targets, timeout)


def get(url: str, headers: dict[str, str], timeout: float) -> Answer:
    """GET `url` under the rules above; the status and the body, or one of this module's exceptions."""
    deadline = time.monotonic() + timeout
    limit = int(settings.SOURCE_MAX_RESPONSE_BYTES)
    try:
        parts = urlsplit(url)
        host, port = parts.hostname or "", parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        raise Unreachable from None
    if parts.scheme not in ("http", "https") or not host:
        raise Unreachable
    targets = _resolve(host, port, parts.scheme)
    connection = (_PinnedHTTPS if parts.scheme == "https" else _PinnedHTTP)(host, port, targets, timeout)
    path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    try:
        connection.request("GET", path, headers=headers)
        response = connection.getresponse()
        if 300 <= response.status < 400:
            raise Redirected(response.status)
        declared = response.getheader("Content-Length")
        if declared and declared.isdigit() and int(declared) > limit:
            raise TooLarge
        chunks: list[bytes] = []
        size = 0
        while True:
            if time.monotonic() > deadline:
                raise Timeout  # a source that trickles bytes is cut off at the same deadline
            chunk = response.read(min(64 * 1024, limit + 1 - size))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
            if size > limit:
                raise TooLarge
        return Answer(response.status, b"".join(chunks))
    except TimeoutError:
        raise Timeout from None
    except (OSError, http.client.HTTPException, ValueError):
        # Refused, reset, closed early, TLS errors, bad status lines: one class, one text.
        raise Unreachable from None
    finally:
        connection.close()
