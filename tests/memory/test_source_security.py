"""An http_json canonical source is written by a tenant admin, who is not the operator (issue 10, item 1).

The secret it sends must be one the operator allowed; in production (SOURCE_ALLOW_PRIVATE_NETWORKS off,
the default when DEBUG=0) the server refuses loopback, private, link-local and metadata addresses after
resolving the name, follows no redirect, caps the answer, and its errors do not tell open ports from
closed ones. `make run` (DEBUG on) keeps loopback allowed, as the rest of the suite relies on.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings as django_settings
from django.test import Client

from memory_admin.memory.models import FieldPolicy, RecheckAttempt
from tests.support import DEADLINE
from tests.support.canonical_source import http_json_source

SUBJECT = DEADLINE["subject_id"]
REFUSED = "not an address this server fetches"
BASE_DIR = Path(django_settings.BASE_DIR)


class _Handler(BaseHTTPRequestHandler):
    respond: Callable[[BaseHTTPRequestHandler], None]
    seen: list[dict[str, str]]

    def log_message(self, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        self.seen.append(dict(self.headers))
        type(self).respond(self)


@contextmanager
def serving(respond: Callable[[BaseHTTPRequestHandler], None]) -> Iterator[tuple[str, list[dict[str, str]]]]:
    """A loopback server answering with `respond`; yields its base URL and the headers of each request."""
    seen: list[dict[str, str]] = []
    handler = type("Handler", (_Handler,), {"respond": staticmethod(respond), "seen": seen})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", seen
    finally:
        server.shutdown()
        server.server_close()


def send(handler: BaseHTTPRequestHandler, status: int, body: bytes, *, length: bool = True, **headers: str) -> None:
    handler.send_response(status)
    handler.send_header("Content-Type", "application/json")
    if length:
        handler.send_header("Content-Length", str(len(body)))
    for name, value in headers.items():
        handler.send_header(name, value)
    handler.end_headers()
    try:
        handler.wfile.write(body)
    except (BrokenPipeError, ConnectionResetError):
        pass


def echo(handler: BaseHTTPRequestHandler) -> None:
    """The attack's loopback echo server: the value it answers is the credential it was sent."""
    answer = {"data": {"deadline": handler.headers.get("X-Api-Key", "none"), "revision": "r1"}}
    send(handler, 200, json.dumps({**answer, "headers": dict(handler.headers)}).encode())


def make_policy(admin, base_url: str, **extra: Any) -> FieldPolicy:
    """A stored policy, written past validation: a policy saved before these rules, or by hand."""
    return FieldPolicy.objects.create(
        tenant=admin.tenant,
        predicate="submission_deadline",
        canonical_source=http_json_source(base_url, timeout=1.0, **extra),
    )


def try_source(api, admin, policy: FieldPolicy):
    response = api(admin).post(
        f"/api/v1/field-policies/{policy.pk}/test/", {"subject_id": SUBJECT, "project_id": "project-a"}, format="json"
    )
    assert response.status_code == 200, response.content
    return response.json()


def policy_body(**source: Any) -> dict[str, Any]:
    return {
        "project_id": "project-a",
        "predicate": "submission_deadline",
        "canonical_source": {
            "connector": "http_json",
            "url_template": "https://tasks.example.com/tasks/{subject_id}",
            "value_pointer": "/deadline",
            "revision_pointer": "/revision",
            "timeout_seconds": 2,
            **source,
        },
    }


@pytest.fixture
def production(settings):
    """The production profile: DEBUG=0 without SOURCE_ALLOW_PRIVATE_NETWORKS."""
    settings.SOURCE_ALLOW_PRIVATE_NETWORKS = False
    settings.SOURCE_ALLOWED_HOSTS = []
    settings.SOURCE_ALLOWED_NETWORKS = []
    return settings


# --- Secrets --------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["SECRET_KEY", "DATABASE_URL", "TASKS_KEY", "PATH"])
def test_a_secret_variable_not_on_the_allowlist_is_refused_at_save_with_the_field_named(api, admin, name):
    body = policy_body(auth_header="X-Api-Key", auth_secret_env=name)
    response = api(admin).post("/api/v1/field-policies/", body, format="json")
    assert response.status_code == 400
    problems = " ".join(response.json()["errors"]["canonical_source"])
    assert "auth_secret_env" in problems and name in problems and "SOURCE_SECRET_ENV_ALLOWLIST" in problems
    assert FieldPolicy.objects.count() == 0


def test_changing_a_policy_to_a_server_secret_is_refused_and_changes_nothing(api, admin):
    created = api(admin).post("/api/v1/field-policies/", policy_body(), format="json")
    assert created.status_code == 201, created.json()
    url = f"/api/v1/field-policies/{created.json()['id']}/"
    bad = policy_body(auth_header="Authorization", auth_secret_env="SECRET_KEY")
    response = api(admin).patch(url, {"canonical_source": bad["canonical_source"]}, format="json")
    assert response.status_code == 400
    assert "auth_secret_env" in " ".join(response.json()["errors"]["canonical_source"])
    assert "auth_secret_env" not in (FieldPolicy.objects.get().canonical_source or {})


def test_the_operator_decides_which_secret_variables_policies_may_name(api, admin, settings, bind_secret):
    bind_secret("SOURCE_SECRET_TASKS", "https://tasks.example.com/tasks/")
    bind_secret("TASKS_KEY", "https://tasks.example.com/")
    ok = api(admin).post(
        "/api/v1/field-policies/",
        policy_body(auth_header="X-Api-Key", auth_secret_env="SOURCE_SECRET_TASKS"),
        format="json",
    )
    assert ok.status_code == 201, ok.json()  # the default allowlist: SOURCE_SECRET_*
    settings.SOURCE_SECRET_ENV_ALLOWLIST = ["TASKS_KEY", "SECRET_KEY"]
    exact = {**policy_body(auth_header="X-Api-Key", auth_secret_env="TASKS_KEY"), "project_id": "project-b"}
    assert api(admin).post("/api/v1/field-policies/", exact, format="json").status_code == 201
    # The server's own settings are never sent, even when listed.
    server_secret = {**policy_body(auth_header="X-Api-Key", auth_secret_env="SECRET_KEY"), "project_id": "project-c"}
    assert api(admin).post("/api/v1/field-policies/", server_secret, format="json").status_code == 400


@pytest.mark.parametrize("name", ["SECRET_KEY", "DATABASE_URL"])
def test_a_stored_policy_naming_a_server_secret_never_sends_it(api, admin, monkeypatch, name):
    """The attack: a loopback echo server returned SECRET_KEY and DATABASE_URL as observed_value."""
    monkeypatch.setenv(name, "postgres://app:hunter2-very-secret@db.internal:5432/prod")
    with serving(echo) as (base_url, seen):
        policy = make_policy(admin, base_url, auth_header="X-Api-Key", auth_secret_env=name)
        response = api(admin).post(f"/api/v1/field-policies/{policy.pk}/test/", {"subject_id": SUBJECT}, format="json")
    assert response.status_code == 200
    assert response.json()["outcome"] == "source_unavailable"
    assert "SOURCE_SECRET_ENV_ALLOWLIST" in response.json()["detail"]
    assert "hunter2" not in response.content.decode()
    assert seen == []  # nothing was sent at all
    assert RecheckAttempt.objects.count() == 0


@pytest.mark.parametrize("secret", ["s3cret-token-value", "s3cret-\u00e9t\u00e9-value", 's3cret-"quoted"\\-value'])
def test_an_answer_that_echoes_the_secret_is_not_shown(api, admin, monkeypatch, secret, bind_secret):
    """Even an allowed secret never comes back as observed_value (raw, or written with JSON escapes)."""
    monkeypatch.setenv("SOURCE_SECRET_ECHO", secret)
    with serving(echo) as (base_url, seen):
        bind_secret("SOURCE_SECRET_ECHO", base_url + "/tasks/")
        policy = make_policy(admin, base_url, auth_header="X-Api-Key", auth_secret_env="SOURCE_SECRET_ECHO")
        data = try_source(api, admin, policy)
        client = Client()
        client.force_login(admin)
        page = client.post(f"/policies/{policy.pk}/test/", {"subject_id": SUBJECT, "project_id": "project-a"})
    assert seen and seen[0]["X-Api-Key"] == secret  # it was sent to the source, as configured
    assert data["outcome"] == "source_ambiguous" and "credential" in data["detail"]
    assert "observed_value" not in data
    assert secret not in json.dumps(data, ensure_ascii=False) and "s3cret" not in json.dumps(data)
    assert page.status_code == 200 and "s3cret" not in page.content.decode()


# --- Where a secret may go (issue 30, item 1) ------------------------------------------------------------


def test_another_tenants_admin_cannot_save_a_policy_sending_a_secret_bound_to_acme(api, outsider, bind_secret):
    """The attack: globex's admin named acme's secret with a URL on its own server. Refused on save, without
    saying where the secret may go."""
    bind_secret("SOURCE_SECRET_TEST", "https://tasks.example.com/api/", tenants=("acme",))
    for url in ("https://attacker.example.net/{subject_id}", "https://tasks.example.com/api/{subject_id}"):
        body = policy_body(url_template=url, auth_header="X-Api-Key", auth_secret_env="SOURCE_SECRET_TEST")
        response = api(outsider).post("/api/v1/field-policies/", body, format="json")
        assert response.status_code == 400, response.content
        problems = " ".join(response.json()["errors"]["canonical_source"])
        assert "not bound the secret variable SOURCE_SECRET_TEST to this tenant and this URL" in problems
        assert "tasks.example.com/api" not in problems and "acme" not in problems
    assert not FieldPolicy.objects.filter(tenant=outsider.tenant).exists()


@pytest.mark.parametrize(
    "template",
    [
        "https://attacker.example.net/api/{subject_id}",  # another host
        "http://tasks.example.com/api/{subject_id}",  # another scheme
        "https://tasks.example.com:8443/api/{subject_id}",  # another port
        "https://tasks.example.com/admin/{subject_id}",  # outside the path prefix
        "https://tasks.example.com/apiary/{subject_id}",  # a prefix of a segment is not the segment
        "https://tasks.example.com/api/../admin/{subject_id}",  # leaves the prefix once normalised
        "https://tasks.example.com/api/%2e%2e/admin/{subject_id}",
        "https://tasks.example.com/{subject_id}/api/",  # the fixed part alone must lie under the prefix
    ],
)
def test_a_secret_goes_only_under_the_url_prefixes_it_is_bound_to(api, admin, bind_secret, template):
    bind_secret("SOURCE_SECRET_TEST", "https://tasks.example.com/api/")
    body = policy_body(url_template=template, auth_header="X-Api-Key", auth_secret_env="SOURCE_SECRET_TEST")
    response = api(admin).post("/api/v1/field-policies/", body, format="json")
    assert response.status_code == 400, response.content
    assert "not bound the secret variable" in " ".join(response.json()["errors"]["canonical_source"])
    ok = policy_body(
        url_template="https://tasks.example.com/api/tasks/{subject_id}",
        auth_header="X-Api-Key",
        auth_secret_env="SOURCE_SECRET_TEST",
    )
    assert api(admin).post("/api/v1/field-policies/", ok, format="json").status_code == 201


def test_a_stored_policy_of_another_tenant_never_sends_the_secret(api, outsider, monkeypatch, bind_secret):
    """Written past validation (before the bindings existed, or by hand): refused again at every fetch."""
    monkeypatch.setenv("SOURCE_SECRET_TEST", "acme-only-s3cret")
    with serving(echo) as (base_url, seen):
        bind_secret("SOURCE_SECRET_TEST", base_url + "/", tenants=("acme",))
        policy = make_policy(outsider, base_url, auth_header="X-Api-Key", auth_secret_env="SOURCE_SECRET_TEST")
        data = try_source(api, outsider, policy)
    assert data["outcome"] == "source_unavailable" and "SOURCE_SECRET_BINDINGS" in data["detail"]
    assert seen == []  # nothing was sent at all
    assert "s3cret" not in json.dumps(data)


def test_a_stored_policy_whose_built_url_leaves_the_prefix_never_sends_the_secret(api, admin, monkeypatch, bind_secret):
    """The binding is checked on the URL as built, not only on the template: a subject id of `..` would
    leave /tasks/ once the server normalises the path."""
    monkeypatch.setenv("SOURCE_SECRET_TEST", "s3cret")
    with serving(echo) as (base_url, seen):
        bind_secret("SOURCE_SECRET_TEST", base_url + "/tasks/")
        policy = make_policy(admin, base_url, auth_header="X-Api-Key", auth_secret_env="SOURCE_SECRET_TEST")
        assert policy.canonical_source is not None
        policy.canonical_source["url_template"] = base_url + "/tasks/{subject_id}/info"
        policy.save()
        outside = api(admin).post(
            f"/api/v1/field-policies/{policy.pk}/test/", {"subject_id": "..", "project_id": "project-a"}, format="json"
        )
        inside = try_source(api, admin, policy)
    assert outside.status_code in (200, 400), outside.content
    if outside.status_code == 200:
        assert outside.json()["outcome"] == "source_unavailable"
    assert len(seen) == 1 and seen[0]["X-Api-Key"] == "s3cret"  # only the URL under the prefix got it
    assert inside["outcome"] != "source_unavailable"


# --- Which ports an allowed host may use (issue 30, item 3) ---------------------------------------------


def test_a_bare_allowed_host_reaches_ports_80_and_443_only(api, admin, source, production):
    """With SOURCE_ALLOWED_HOSTS=localhost, a policy reached localhost:6379 and :5432."""
    production.SOURCE_ALLOWED_HOSTS = ["localhost"]
    for port in ("6379", "5432", source[0].rsplit(":", 1)[1]):
        response = api(admin).post(
            "/api/v1/field-policies/",
            policy_body(url_template=f"http://localhost:{port}/{{subject_id}}"),
            format="json",
        )
        assert response.status_code == 400, (port, response.content)
    stored = make_policy(admin, source[0].replace("127.0.0.1", "localhost"))
    data = try_source(api, admin, stored)
    assert data["outcome"] == "source_unavailable" and REFUSED in data["detail"]
    assert source[1].hits == {}


def test_an_allowed_origin_names_its_scheme_and_port(api, admin, source, production):
    port = source[0].rsplit(":", 1)[1]
    source[1].set(SUBJECT, value="2026-11-02", revision="r18")
    production.SOURCE_ALLOWED_HOSTS = [f"http://localhost:{port}"]
    policy = make_policy(admin, source[0].replace("127.0.0.1", "localhost"))
    assert try_source(api, admin, policy)["outcome"] != "source_unavailable"
    https = policy_body(url_template=f"https://localhost:{port}/{{subject_id}}")  # same port, other scheme
    assert api(admin).post("/api/v1/field-policies/", https, format="json").status_code == 400


@pytest.mark.parametrize(
    "header", ["X-Api-Key\r\nX-Injected: 1", "X-Api-Key\n", "X Api Key", "X-Api-Key:", "Host", "", "\u00e9"]
)
def test_a_header_name_with_control_characters_is_a_400_at_save(api, admin, header):
    body = policy_body(auth_header=header, auth_secret_env="SOURCE_SECRET_TASKS")
    response = api(admin).post("/api/v1/field-policies/", body, format="json")
    assert response.status_code == 400
    assert "auth_header" in " ".join(response.json()["errors"]["canonical_source"])
    assert FieldPolicy.objects.count() == 0


def test_a_header_name_with_a_line_break_is_a_400_in_the_editor_too(admin):
    client = Client()
    client.force_login(admin)
    form = {
        "project_id": "",
        "predicate": "send_permission",
        "authorized_issuers": "",
        "canonical_ref_prefix": "",
        "connector": "http_json",
        "url_template": "https://iam.example.com/{subject_id}",
        "value_pointer": "/v",
        "revision_pointer": "/r",
        "timeout_seconds": "2",
        "auth_header": "X-Key\r\nX-Injected: 1",
        "auth_secret_env": "SOURCE_SECRET_IAM",
        "recheck_interval": "",
        "on_failure": "block_action",
        "risk": "high",
    }
    response = client.post("/policies/new/", form)
    assert response.status_code == 400
    assert "auth_header must be one header name" in response.content.decode()
    assert FieldPolicy.objects.count() == 0


def test_a_stored_header_that_would_split_the_request_is_refused_not_a_500(api, admin, source, monkeypatch):
    monkeypatch.setenv("SOURCE_SECRET_TASKS", "k")
    policy = make_policy(admin, source[0], auth_header="X-Key\r\nX-Injected: 1", auth_secret_env="SOURCE_SECRET_TASKS")
    data = try_source(api, admin, policy)
    assert data["outcome"] == "source_unavailable"
    assert source[1].hits == {}


def test_a_secret_with_a_line_break_is_refused_not_sent(api, admin, source, monkeypatch, bind_secret):
    bind_secret("SOURCE_SECRET_TASKS", source[0] + "/")
    monkeypatch.setenv("SOURCE_SECRET_TASKS", "k\r\nX-Injected: 1")
    policy = make_policy(admin, source[0], auth_header="X-Api-Key", auth_secret_env="SOURCE_SECRET_TASKS")
    data = try_source(api, admin, policy)
    assert data["outcome"] == "source_unavailable" and "X-Injected" not in data["detail"]
    assert "cannot be sent as a header" in data["detail"]  # refused for its line break, the binding held
    assert source[1].hits == {}


@pytest.mark.parametrize(
    ("template", "words"),
    [
        ("http://tasks.example.com/{subject_id}\r\nHost: evil", "control characters"),
        ("http://tasks.example.com/{subject_id} x", "control characters"),
        ("http://{subject_id}.example.com/x", "not in the host"),
        ("http://tasks.example.com:{project_id}/x", "not in the host"),
        ("http://tasks.example.com:99999/{subject_id}", "malformed host or port"),
    ],
)
def test_a_bad_url_template_is_a_400(api, admin, template, words):
    response = api(admin).post("/api/v1/field-policies/", policy_body(url_template=template), format="json")
    assert response.status_code == 400
    assert words in " ".join(response.json()["errors"]["canonical_source"])


@pytest.mark.parametrize(
    "template",
    [
        "https://tasks.example.com/{subject_id:>30000000}",
        "https://tasks.example.com/{subject_id:x^999}",
        "https://tasks.example.com/{subject_id!r}",
        "https://tasks.example.com/{subject_id!s:>5}",
        "https://tasks.example.com/{predicate:{subject_id}}",
    ],
)
def test_a_placeholder_with_a_format_spec_or_conversion_is_a_400(api, admin, template):
    """Issue 30, item 2: `{subject_id:>30000000}` passed (only the name was checked) and built a 30 MB URL."""
    response = api(admin).post("/api/v1/field-policies/", policy_body(url_template=template), format="json")
    assert response.status_code == 400, response.content
    assert "no format spec or conversion" in " ".join(response.json()["errors"]["canonical_source"])
    assert not FieldPolicy.objects.filter(predicate="submission_deadline").exists()


def test_a_stored_template_with_a_format_spec_is_refused_at_fetch_without_building_the_url(api, admin, source):
    """A policy saved before the rule (written past validation) is checked again before any URL is built."""
    base_url, _ = source
    policy = make_policy(admin, base_url)
    assert policy.canonical_source is not None
    policy.canonical_source["url_template"] = base_url + "/tasks/{subject_id:>30000000}"
    policy.save()
    answer = try_source(api, admin, policy)
    assert answer["outcome"] == "source_unavailable"
    assert "cannot be filled in" in answer["detail"]
    assert len(json.dumps(answer)) < 10_000


def test_a_url_longer_than_the_cap_is_refused_before_connecting(api, admin):
    """Many placeholders each filled with a long, fully quoted subject_id: refused before any request."""
    from memory_admin.memory.connectors.http_json import MAX_URL_LENGTH

    with serving(echo) as (base_url, seen):
        policy = make_policy(admin, base_url)
        assert policy.canonical_source is not None
        policy.canonical_source["url_template"] = base_url + "/" + "{subject_id}" * 150
        policy.save()
        response = api(admin).post(
            f"/api/v1/field-policies/{policy.pk}/test/",
            {"subject_id": "s" * 190, "project_id": "project-a"},
            format="json",
        )
    assert response.status_code == 200, response.content
    assert response.json()["outcome"] == "source_unavailable"
    assert str(MAX_URL_LENGTH) in response.json()["detail"]
    assert seen == []


# --- Where the server connects ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "base",
    [
        "http://127.0.0.1:{port}",
        "http://localhost:{port}",
        "http://[::ffff:127.0.0.1]:{port}",
        "http://0.0.0.0:{port}",
        "http://10.1.2.3",
        "http://192.168.0.10",
        "http://100.64.0.1",
        "http://169.254.169.254/latest/meta-data",
        "http://[fd00:ec2::254]",
    ],
)
def test_in_production_internal_addresses_are_refused_before_connecting(api, admin, source, production, base):
    port = source[0].rsplit(":", 1)[1]
    source[1].set(SUBJECT, value="2026-11-02", revision="r18")
    policy = make_policy(admin, base.format(port=port))
    data = try_source(api, admin, policy)
    assert data["outcome"] == "source_unavailable"
    assert REFUSED in data["detail"]
    assert source[1].hits == {}  # the stand-in on loopback was never reached


@pytest.mark.parametrize("base", ["http://127.0.0.1:9", "http://localhost:9", "http://169.254.169.254"])
def test_in_production_internal_addresses_are_refused_at_save(api, admin, production, base):
    response = api(admin).post(
        "/api/v1/field-policies/", policy_body(url_template=base + "/{subject_id}"), format="json"
    )
    assert response.status_code == 400
    assert "url_template" in " ".join(response.json()["errors"]["canonical_source"])


def test_make_runs_default_keeps_loopback_but_never_metadata(api, admin, source, settings):
    settings.SOURCE_ALLOW_PRIVATE_NETWORKS = True
    source[1].set(SUBJECT, value="2026-11-02", revision="r18")
    assert try_source(api, admin, make_policy(admin, source[0]))["observed_value"] == "2026-11-02"
    FieldPolicy.objects.all().delete()
    for base in ("http://169.254.169.254", "http://169.254.10.10", "http://[fe80::1]"):
        data = try_source(api, admin, make_policy(admin, base))
        assert data["outcome"] == "source_unavailable" and REFUSED in data["detail"]
        FieldPolicy.objects.all().delete()


def test_a_name_is_checked_after_it_resolves_and_fetched_at_the_address_checked(
    api, admin, source, production, monkeypatch
):
    """A public-looking name that resolves to loopback is refused; allowed by name, it is looked up once
    and the connection goes to the address that was checked (no second lookup to rebind)."""
    port = int(source[0].rsplit(":", 1)[1])
    real = socket.getaddrinfo
    lookups: list[str] = []

    def fake_dns(host: Any, *args: Any, **kwargs: Any) -> Any:
        if host == "tasks.example.test":
            lookups.append(host)
            if len(lookups) > 1:
                return real("169.254.169.254", port, type=socket.SOCK_STREAM)  # a rebinding answer
            return real("127.0.0.1", port, type=socket.SOCK_STREAM)
        return real(host, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", fake_dns)
    source[1].set(SUBJECT, value="2026-11-02", revision="r18")
    policy = make_policy(admin, f"http://tasks.example.test:{port}")
    refused = try_source(api, admin, policy)
    assert refused["outcome"] == "source_unavailable" and REFUSED in refused["detail"]
    assert source[1].hits == {}
    production.SOURCE_ALLOWED_HOSTS = ["tasks.example.test"]  # a bare host: ports 80 and 443 only
    assert try_source(api, admin, policy)["outcome"] == "source_unavailable" and source[1].hits == {}
    production.SOURCE_ALLOWED_HOSTS = [f"http://tasks.example.test:{port}"]  # the origin, with its port
    lookups.clear()
    allowed = try_source(api, admin, policy)
    assert allowed["observed_value"] == "2026-11-02"
    assert lookups == ["tasks.example.test"]


def test_the_operator_may_allow_a_network(api, admin, source, production):
    production.SOURCE_ALLOWED_NETWORKS = ["127.0.0.0/8"]
    source[1].set(SUBJECT, value="2026-11-02", revision="r18")
    assert try_source(api, admin, make_policy(admin, source[0]))["observed_value"] == "2026-11-02"


@pytest.mark.parametrize("target", ["http://localhost:{port}/tasks/project-a/{subject}", "http://169.254.169.254/"])
def test_a_redirect_is_not_followed(api, admin, source, production, target):
    """The first host is allowed by the operator; where it redirects to is never fetched."""
    port = source[0].rsplit(":", 1)[1]
    source[1].set(SUBJECT, value="2026-11-02", revision="r18")
    location = target.format(port=port, subject=SUBJECT)
    with serving(lambda h: send(h, 302, b"{}", Location=location)) as (base_url, seen):
        production.SOURCE_ALLOWED_HOSTS = [base_url]  # this origin (scheme, host and port) only
        data = try_source(api, admin, make_policy(admin, base_url))
    assert len(seen) == 1
    assert data["outcome"] == "source_unavailable" and "redirect" in data["detail"]
    assert source[1].hits == {}


@pytest.mark.parametrize("declared", [True, False])
def test_an_oversized_answer_is_cut_off(api, admin, settings, declared):
    settings.SOURCE_MAX_RESPONSE_BYTES = 2000
    big = json.dumps({"data": {"deadline": "x" * 50_000, "revision": "r1"}}).encode()
    with serving(lambda h: send(h, 200, big, length=declared)) as (base_url, _):
        data = try_source(api, admin, make_policy(admin, base_url))
    assert data["outcome"] == "source_ambiguous" and "more than 2000 bytes" in data["detail"]
    assert "observed_value" not in data


def test_errors_do_not_tell_an_open_port_from_a_closed_one(api, admin, settings):
    """Under `make run`'s loopback allowance: a closed port and a server that hangs up read the same."""
    settings.SOURCE_ALLOW_PRIVATE_NETWORKS = True
    probe = socket.socket()
    probe.bind(("127.0.0.1", 0))
    closed = f"http://127.0.0.1:{probe.getsockname()[1]}"
    probe.close()
    details = []
    with serving(lambda h: None) as (open_url, _):  # answers nothing and closes: "Remote end closed"
        for base in (closed, open_url):
            data = try_source(api, admin, make_policy(admin, base))
            assert data["outcome"] == "source_unavailable"
            details.append(data["detail"].replace(base, "URL"))
            FieldPolicy.objects.all().delete()
    assert details[0] == details[1] == "URL/tasks/project-a/task-proposal-017 could not be reached."


# --- Settings ----------------------------------------------------------------------------------------


def _settings_in_a_fresh_process(tmp_path: Path, **env: str) -> subprocess.CompletedProcess[str]:
    script = "from django.conf import settings; print(settings.SOURCE_ALLOW_PRIVATE_NETWORKS)"
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("SOURCE_", "DEBUG"))}
    return subprocess.run(
        [sys.executable, "-c", script],
        env={**clean, "DJANGO_SETTINGS_MODULE": "memory_admin.settings", "VAR_DIR": str(tmp_path), **env},
        cwd=BASE_DIR,
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.parametrize(
    ("env", "allowed"),
    [
        ({}, "True"),  # make run: DEBUG defaults on
        ({"DEBUG": "0", "SECRET_KEY": "k"}, "False"),  # production
        ({"DEBUG": "0", "SECRET_KEY": "k", "SOURCE_ALLOW_PRIVATE_NETWORKS": "1"}, "True"),
        ({"DEBUG": "1", "SOURCE_ALLOW_PRIVATE_NETWORKS": "0"}, "False"),
    ],
)
def test_the_loopback_allowance_is_decided_from_the_environment_at_startup(tmp_path, env, allowed):
    """Not from settings.DEBUG at request time, which the test runner turns off."""
    result = _settings_in_a_fresh_process(tmp_path, **env)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == allowed


@pytest.mark.parametrize(
    "env",
    [
        {"SOURCE_SECRET_ENV_ALLOWLIST": "*"},
        {"SOURCE_SECRET_ENV_ALLOWLIST": "SOURCE_SECRET_*,BAD NAME"},
        {"SOURCE_ALLOWED_NETWORKS": "10.0.0.0/33"},
        {"SOURCE_MAX_RESPONSE_BYTES": "0"},
        {"SOURCE_ALLOWED_HOSTS": "localhost/admin"},
        {"SOURCE_ALLOWED_HOSTS": "ftp://files.internal"},
        {"SOURCE_ALLOWED_HOSTS": "http://user@tasks.internal:8080"},
        {"SOURCE_SECRET_BINDINGS": "not json"},
        {"SOURCE_SECRET_BINDINGS": '{"SECRET_KEY": {"tenants": ["acme"], "urls": ["https://x.example/"]}}'},
        {"SOURCE_SECRET_BINDINGS": '{"SOURCE_SECRET_T": {"tenants": [], "urls": ["https://x.example/"]}}'},
        {"SOURCE_SECRET_BINDINGS": '{"SOURCE_SECRET_T": {"tenants": ["acme"], "urls": ["x.example/api"]}}'},
        {"SOURCE_SECRET_BINDINGS": '{"SOURCE_SECRET_T": {"tenants": ["acme"], "urls": ["https://x.example/a/../b"]}}'},
    ],
)
def test_malformed_source_settings_stop_the_server_at_startup(tmp_path, env):
    result = _settings_in_a_fresh_process(tmp_path, **env)
    assert result.returncode != 0
    assert "ImproperlyConfigured" in result.stderr and next(iter(env)) in result.stderr


@pytest.mark.skipif(
    "DEBUG" in os.environ or "SOURCE_ALLOW_PRIVATE_NETWORKS" in os.environ, reason="the run sets its own profile"
)
def test_under_pytest_debug_is_off_but_loopback_stays_allowed():
    assert django_settings.DEBUG is False
    assert django_settings.SOURCE_ALLOW_PRIVATE_NETWORKS is True
