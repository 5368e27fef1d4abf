"""A canonical source that answers JSON over HTTP(S)."""

from __future__ import annotations

import json
import os
import socket
import urllib.error
import urllib.request
from string import Formatter
from typing import Any
from urllib.parse import quote

from memory_admin.memory.connectors.base import Connector, FactKey, Observation, SourceAmbiguous, SourceUnavailable

_PLACEHOLDERS = {"project_id", "subject_id", "predicate"}
_MISSING = object()
MAX_BODY_BYTES = 1024 * 1024


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
    allowed_keys = frozenset(
        {"url_template", "value_pointer", "revision_pointer", "timeout_seconds", "auth_header", "auth_secret_env"}
    )

    @classmethod
    def validate(cls, settings: dict[str, Any]) -> list[str]:
        problems = super().validate(settings)
        template = settings.get("url_template")
        if not isinstance(template, str) or not template.startswith(("http://", "https://")):
            problems.append("url_template must be an http(s) URL.")
        else:
            try:
                names = {name for _, name, _, _ in Formatter().parse(template) if name is not None}
            except ValueError:
                names = {"<unbalanced braces>"}
            bad = names - _PLACEHOLDERS
            if bad:
                problems.append(
                    f"url_template may use only {{project_id}}, {{subject_id}} and {{predicate}}; found {sorted(bad)}."
                )
        for key in ("value_pointer", "revision_pointer"):
            pointer = settings.get(key)
            if not isinstance(pointer, str) or not (pointer == "" or pointer.startswith("/")):
                problems.append(f"{key} must be a JSON pointer such as /data/value.")
        timeout = settings.get("timeout_seconds")
        if not isinstance(timeout, int | float) or isinstance(timeout, bool) or not 0 < timeout <= 60:
            problems.append("timeout_seconds must be a number of seconds between 0 and 60.")
        if ("auth_header" in settings) != ("auth_secret_env" in settings):
            problems.append("auth_header and auth_secret_env go together (the secret is read from that variable).")
        env_name = settings.get("auth_secret_env")
        if env_name is not None and (not isinstance(env_name, str) or not env_name.isidentifier()):
            problems.append("auth_secret_env must name an environment variable; secrets are never stored here.")
        return problems

    def url_for(self, key: FactKey) -> str:
        values = {name: quote(getattr(key, name), safe="") for name in _PLACEHOLDERS}
        return str(self.settings["url_template"]).format(**values)

    def fetch(self, key: FactKey) -> Observation:
        url = self.url_for(key)
        request = urllib.request.Request(url, headers={"Accept": "application/json"})
        if self.settings.get("auth_header"):
            secret = os.environ.get(str(self.settings["auth_secret_env"]))
            if not secret:
                raise SourceUnavailable(f"The secret variable {self.settings['auth_secret_env']} is not set.")
            request.add_header(str(self.settings["auth_header"]), secret)
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:
                body = response.read(MAX_BODY_BYTES + 1)
        except urllib.error.HTTPError as exc:
            if exc.code in (401, 403) or exc.code >= 500 or exc.code == 429:
                raise SourceUnavailable(f"{url} answered HTTP {exc.code}.") from None
            raise SourceAmbiguous(f"{url} answered HTTP {exc.code}: it does not know this fact.") from None
        except TimeoutError:
            raise SourceUnavailable(f"{url} did not answer within {self.timeout:g} s.") from None
        except (urllib.error.URLError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            if isinstance(reason, TimeoutError | socket.timeout):
                raise SourceUnavailable(f"{url} did not answer within {self.timeout:g} s.") from None
            raise SourceUnavailable(f"{url} could not be reached ({reason}).") from None
        if len(body) > MAX_BODY_BYTES:
            raise SourceAmbiguous(f"{url} answered more than {MAX_BODY_BYTES} bytes.")
        try:
            document = json.loads(body)
        except ValueError:
            raise SourceAmbiguous(f"{url} did not answer JSON.") from None
        value = resolve_pointer(document, str(self.settings["value_pointer"]))
        revision = resolve_pointer(document, str(self.settings["revision_pointer"]))
        if value is _MISSING or value is None:
            raise SourceAmbiguous(f"{url}: nothing at {self.settings['value_pointer']}.")
        if isinstance(value, list):
            distinct = list({json.dumps(v, sort_keys=True): v for v in value}.values())
            if len(distinct) != 1:
                raise SourceAmbiguous(f"{url}: {len(distinct)} values at {self.settings['value_pointer']}.", distinct)
            value = distinct[0]
        if revision is _MISSING or revision is None or isinstance(revision, dict | list):
            raise SourceAmbiguous(f"{url}: no single source revision at {self.settings['revision_pointer']}.")
        return Observation(value=value, revision=str(revision), ref=url)
