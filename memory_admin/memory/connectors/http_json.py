"""A canonical source that answers JSON over HTTP(S).

Its settings come from a tenant admin: the secret it sends must be one the operator allowed
(SOURCE_SECRET_ENV_ALLOWLIST), the header carrying it must be a plain header name, and the fetch goes
through `outbound`, which refuses internal addresses in production. An answer that contains the
secret it was sent is refused, so "test this source" can never show a server secret.
"""

from __future__ import annotations

import json
import os
import re
from string import Formatter
from typing import Any
from urllib.parse import quote, urlsplit

from django.conf import settings as django_settings

from memory_admin.lib.source_settings import DEFAULT_PORTS
from memory_admin.memory.connectors import outbound
from memory_admin.memory.connectors.base import (
    Connector,
    FactKey,
    Observation,
    SettingField,
    SourceAmbiguous,
    SourceUnavailable,
)

_PLACEHOLDERS = {"project_id", "subject_id", "predicate"}
# A template is at most 2,000 characters and each identifier at most 200 (each quoted byte at most 3 characters,
# each UTF-8 character at most 4 bytes): no honest URL comes near this; anything longer is refused before a fetch.
MAX_URL_LENGTH = 8192
_MISSING = object()
# RFC 9110 field-name token; anything else (a CR or LF above all) could split the request.
_HEADER_NAME = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]{1,100}")
# Headers http.client sets itself, or that would change how the request is framed.
_RESERVED_HEADERS = {"host", "content-length", "transfer-encoding", "connection", "accept", "te", "upgrade"}


def resolve_pointer(document: Any, pointer: str) -> Any:
    """RFC 6901 JSON pointer; returns _MISSING when a step does not exist."""
    if pointer == "":
        return document
    node = document
    for raw in pointer.lstrip("/").split("/"):
        step = raw.replace("~1", "/").replace("~0", "~")
        if isinstance(node, dict) and step in node:
            node = node[step]
        elif isinstance(node, list) and step.isdigit() and int(step) < len(node):
            node = node[int(step)]
        else:
            return _MISSING
    return node


class HttpJsonConnector(Connector):
    name = "http_json"
    label = "HTTP JSON"
    settings_fields = (
        SettingField(
            "url_template",
            "URL template",
            max_length=1000,
            help="Where one fact is read; {project_id}, {subject_id} and {predicate} are filled in per fact.",
            example="https://tasks.example.com/api/{project_id}/tasks/{subject_id}",
        ),
        SettingField(
            "value_pointer",
            "Value pointer",
            help="A JSON pointer to the value in the source's answer.",
            example="/data/deadline",
        ),
        SettingField(
            "revision_pointer",
            "Revision pointer",
            help="A JSON pointer to the source's revision or version of that value.",
            example="/data/revision",
        ),
        SettingField(
            "timeout_seconds",
            "Timeout in seconds",
            kind="seconds",
            default=5,
            help="How long to wait for the source (at most 60).",
            example="5",
        ),
        SettingField(
            "auth_header",
            "Auth header (optional)",
            max_length=100,
            optional=True,
            help="The header that carries the secret, if the source needs one.",
            example="X-Api-Key",
        ),
        SettingField(
            "auth_secret_env",
            "Auth secret: environment variable name",
            max_length=100,
            optional=True,
            help="The server's environment variable holding the secret; the secret itself is never stored here.",
            example="SOURCE_SECRET_TASKS",
        ),
    )
    allowed_keys = Connector.allowed_keys | frozenset(
        {"url_template", "value_pointer", "revision_pointer", "timeout_seconds", "auth_header", "auth_secret_env"}
    )

    @classmethod
    def validate(cls, settings: dict[str, Any], *, tenant_id: int | None = None) -> list[str]:
        problems = super().validate(settings, tenant_id=tenant_id)
        problems += _url_problems(settings.get("url_template"))
        for key in ("value_pointer", "revision_pointer"):
            pointer = settings.get(key)
            if not isinstance(pointer, str) or not (pointer == "" or pointer.startswith("/")):
                problems.append(f"{key} must be a JSON pointer such as /data/value.")
        timeout = settings.get("timeout_seconds")
        if not isinstance(timeout, int | float) or isinstance(timeout, bool) or not 0 < timeout <= 60:
            problems.append("timeout_seconds must be a number of seconds between 0 and 60.")
        if ("auth_header" in settings) != ("auth_secret_env" in settings):
            problems.append("auth_header and auth_secret_env go together (the secret is read from that variable).")
        header = settings.get("auth_header")
        if header is not None and (
            not isinstance(header, str) or not _HEADER_NAME.fullmatch(header) or header.lower() in _RESERVED_HEADERS
        ):
            problems.append(
                "auth_header must be one header name (letters, digits and -, such as X-Api-Key or Authorization), "
                "without spaces or line breaks, and not one the server sets itself."
            )
        env_name = settings.get("auth_secret_env")
        if env_name is not None:
            if not isinstance(env_name, str) or not env_name.isidentifier():
                problems.append("auth_secret_env must name an environment variable; secrets are never stored here.")
            elif not outbound.secret_env_allowed(env_name):
                allowed = ", ".join(django_settings.SOURCE_SECRET_ENV_ALLOWLIST) or "none"
                problems.append(
                    f"auth_secret_env {env_name!r} is not a variable the operator allows canonical sources to use "
                    f"(SOURCE_SECRET_ENV_ALLOWLIST: {allowed})."
                )
            elif isinstance(template := settings.get("url_template"), str) and (
                refusal := outbound.secret_binding_problem(env_name, _tenant_slug(tenant_id), _fixed_part(template))
            ):
                problems.append(f"auth_secret_env: {refusal}")
        return problems

    def url_for(self, key: FactKey) -> str:
        """The URL for `key`, or ValueError. The template is checked again here, as the secret is (a policy saved
        before a rule existed must not get around it), and the built URL is capped at MAX_URL_LENGTH."""
        template = str(self.settings["url_template"])
        if _placeholder_problems(template):
            raise ValueError("url_template is not valid")
        values = {name: quote(getattr(key, name), safe="") for name in _PLACEHOLDERS}
        url = template.format(**values)
        if len(url) > MAX_URL_LENGTH:
            raise ValueError("the URL is too long")
        return url

    def _headers(self, url: str) -> tuple[dict[str, str], str]:
        """The request headers for `url` and the secret sent (empty when none), refusing what must not be sent."""
        headers = {"Accept": "application/json"}
        if not self.settings.get("auth_header"):
            return headers, ""
        env_name = str(self.settings["auth_secret_env"])
        header = str(self.settings["auth_header"])
        # Checked again at every fetch: a policy saved before the allowlist existed, or before the
        # operator narrowed it, must not send what is no longer allowed.
        if not outbound.secret_env_allowed(env_name):
            raise SourceUnavailable(f"The secret variable {env_name} is not allowed by SOURCE_SECRET_ENV_ALLOWLIST.")
        # ...and where it goes: this tenant, this URL as built (SOURCE_SECRET_BINDINGS), on every fetch.
        if refusal := outbound.secret_binding_problem(env_name, _tenant_slug(self.tenant_id), url):
            raise SourceUnavailable(refusal)
        if not _HEADER_NAME.fullmatch(header) or header.lower() in _RESERVED_HEADERS:
            raise SourceUnavailable("auth_header is not a usable header name.")
        secret = os.environ.get(env_name)
        if not secret:
            raise SourceUnavailable(f"The secret variable {env_name} is not set.")
        if any(ord(c) < 0x20 or ord(c) == 0x7F for c in secret):
            raise SourceUnavailable(f"The secret variable {env_name} holds a value that cannot be sent as a header.")
        headers[header] = secret
        return headers, secret

    def fetch(self, key: FactKey) -> Observation:
        try:
            url = self.url_for(key)
        except (KeyError, IndexError, ValueError, AttributeError):
            raise SourceUnavailable(
                "url_template cannot be filled in (it is no longer valid, or the URL would be longer than "
                f"{MAX_URL_LENGTH} characters); save the policy again."
            ) from None
        headers, secret = self._headers(url)
        limit = django_settings.SOURCE_MAX_RESPONSE_BYTES
        try:
            answer = outbound.get(url, headers, self.timeout)
        except outbound.Refused:
            raise SourceUnavailable(
                f"{url} is not an address this server fetches (loopback, private, link-local and metadata addresses "
                "are refused unless the operator allows them: SOURCE_ALLOWED_HOSTS, SOURCE_ALLOWED_NETWORKS)."
            ) from None
        except outbound.Timeout:
            raise SourceUnavailable(f"{url} did not answer within {self.timeout:g} s.") from None
        except outbound.Redirected as exc:
            raise SourceUnavailable(
                f"{url} answered with a redirect (HTTP {exc.status}), which is not followed: give the final URL."
            ) from None
        except outbound.TooLarge:
            raise SourceAmbiguous(f"{url} answered more than {limit} bytes.") from None
        except outbound.Unreachable:
            raise SourceUnavailable(f"{url} could not be reached.") from None
        code = answer.status
        if code in (401, 403, 429) or code >= 500:
            raise SourceUnavailable(f"{url} answered HTTP {code}.")
        if code >= 400 or code < 200:
            raise SourceAmbiguous(f"{url} answered HTTP {code}: it does not know this fact.")
        if secret and secret.encode() in answer.body:
            raise SourceAmbiguous(f"{url} answered with the credential it was sent; the answer is not used.")
        try:
            document = json.loads(answer.body)
        except (ValueError, RecursionError):
            raise SourceAmbiguous(f"{url} did not answer JSON.") from None
        if secret and _mentions(document, secret):
            # The same echo, written with JSON escapes.
            raise SourceAmbiguous(f"{url} answered with the credential it was sent; the answer is not used.")
        value = resolve_pointer(document, str(self.settings["value_pointer"]))
        revision = resolve_pointer(document, str(self.settings["revision_pointer"]))
        if value is _MISSING or value is None:
            raise SourceAmbiguous(
                f"{url} answered, but there is nothing at {self.settings['value_pointer']} (the value pointer)."
            )
        if isinstance(value, list):
            distinct = list({json.dumps(v, sort_keys=True): v for v in value}.values())
            if len(distinct) != 1:
                raise SourceAmbiguous(f"{url}: {len(distinct)} values at {self.settings['value_pointer']}.", distinct)
            value = distinct[0]
        if revision is _MISSING or revision is None or isinstance(revision, dict | list):
            raise SourceAmbiguous(
                f"{url} answered, but there is no single source revision at {self.settings['revision_pointer']} "
                "(the revision pointer)."
            )
        return Observation(value=value, revision=str(revision), ref=url)


def _mentions(document: Any, text: str) -> bool:
    """Whether any string (key or value) in a parsed JSON document contains `text`."""
    stack = [document]
    while stack:
        node = stack.pop()
        if isinstance(node, str) and text in node:
            return True
        if isinstance(node, dict):
            stack.extend(node.keys())
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
    return False


def _url_problems(template: Any) -> list[str]:
    if not isinstance(template, str) or not template.startswith(("http://", "https://")):
        return ["url_template must be an http(s) URL."]
    if len(template) > 2000 or any(ord(c) <= 0x20 or ord(c) == 0x7F for c in template):
        return ["url_template must be one URL without spaces, line breaks or control characters."]
    problems = _placeholder_problems(template)
    authority = template.split("://", 1)[1].split("/", 1)[0].split("?", 1)[0]
    if "{" in authority or "}" in authority:
        # A placeholder in the host would let whoever writes a subject_id choose where the secret goes.
        problems.append("url_template may use placeholders only in its path and query, not in the host.")
        return problems
    try:
        parts = urlsplit(template)
        host, port = parts.hostname, parts.port or DEFAULT_PORTS[parts.scheme]
    except ValueError:
        return [*problems, "url_template has a malformed host or port."]
    if not host:
        problems.append("url_template has no host.")
    elif outbound.literal_refused(host, parts.scheme, port):
        problems.append(
            f"url_template points at {host}, an internal address this server does not fetch "
            "(the operator can allow it: SOURCE_ALLOWED_HOSTS, SOURCE_ALLOWED_NETWORKS)."
        )
    return problems


def _placeholder_problems(template: str) -> list[str]:
    """Only the three names, each bare: no format spec or conversion (checked on save and before every fetch)."""
    problems: list[str] = []
    try:
        fields = [
            (name, spec, conversion) for _, name, spec, conversion in Formatter().parse(template) if name is not None
        ]
    except ValueError:
        fields = [("<unbalanced braces>", "", None)]
    bad = {name for name, _, _ in fields} - _PLACEHOLDERS
    if bad:
        problems.append(
            f"url_template may use only {{project_id}}, {{subject_id}} and {{predicate}}; found {sorted(bad)}."
        )
    if any(spec or conversion for _, spec, conversion in fields):
        # `{subject_id:>30000000}` would build a 30 MB URL on every fetch: a placeholder is its name alone.
        problems.append(
            "url_template placeholders take no format spec or conversion: write {subject_id}, "
            "not {subject_id:>10} or {subject_id!r}."
        )
    return problems


def _fixed_part(template: str) -> str:
    """The template up to its first placeholder: what a saved policy always sends to (scheme, host, port and
    the start of the path), checked against the secret's bindings when the policy is saved."""
    return template.split("{", 1)[0]


def _tenant_slug(tenant_id: int | None) -> str:
    """The slug the operator names tenants by in SOURCE_SECRET_BINDINGS ('' when none: nothing is bound to it)."""
    if tenant_id is None:
        return ""
    from memory_admin.accounts.models import Tenant

    return Tenant.objects.filter(pk=tenant_id).values_list("slug", flat=True).first() or ""
