"""Issue 34, item 3: the policy form's connector settings each carry a concrete example beside them, and "Test
these settings" fetches from a real canonical source on loopback with the settings as typed, without JavaScript
(a second submit button re-rendering the form) and with htmx (only the result swapped). It shows the value and
revision it would read, or why it could not: a pointer that finds nothing, a source that does not answer, an
address the outbound rules refuse, a secret variable that is not set. Testing never saves anything."""

from __future__ import annotations

import re
import socket
from typing import Any

import pytest
from django.test import Client

from memory_admin.memory.models import AuditEvent, FieldPolicy
from tests.support import DEADLINE
from tests.support.ux_checks import assert_reads_as_people

FORM: dict[str, Any] = {
    "project_id": "project-a",
    "predicate": "submission_deadline",
    "authorized_issuers": "",
    "canonical_ref_prefix": "task-system:",
    "connector": "http_json",
    "value_pointer": "/data/deadline",
    "revision_pointer": "/data/revision",
    "timeout_seconds": "2",
    "recheck_interval_amount": "1",
    "recheck_interval_unit": "days",
    "on_failure": "block_action",
    "risk": "high",
    "retention_days": "",
    "try-subject_id": DEADLINE["subject_id"],
    "action": "test",
}


@pytest.fixture
def client(admin) -> Client:
    client = Client()
    client.force_login(admin)
    return client


@pytest.fixture
def good(source) -> dict[str, Any]:
    base_url, script = source
    script.set(DEADLINE["subject_id"], value="2026-11-05T17:00+09:00", revision="r19")
    return {**FORM, "url_template": base_url + "/tasks/{project_id}/{subject_id}"}


def _result(html: str) -> str:
    found = re.search(r'<div id="settings-test"[^>]*>(.*?)</div>\s*</div>', html, flags=re.S)
    assert found, "the page has no settings test result"
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", found.group(1)))


def _nothing_saved() -> None:
    assert FieldPolicy.objects.count() == 0
    assert not AuditEvent.objects.filter(action__startswith="policy").exists()


def test_each_connector_setting_shows_a_concrete_example(client):
    page = client.post("/policies/new/", {**FORM, "action": "show"}).content.decode()
    for example in ("/data/deadline", "/data/revision", "{subject_id}", "X-Api-Key", "SOURCE_SECRET_TASKS"):
        assert re.search(rf'<span class="help">[^<]*For example: [^<]*{re.escape(example)}', page), example
    assert_reads_as_people(page)


def test_good_settings_show_the_value_and_revision_they_would_read_without_javascript(client, good):
    response = client.post("/policies/new/", good)
    assert response.status_code == 200
    page = response.content.decode()
    result = _result(page)
    assert "The source says" in result and "5 Nov 2026" in result and "r19" in result
    # The whole form comes back with the settings as typed, ready to save.
    assert f'value="{good["url_template"]}"' in page and 'data-testid="save-policy"' in page
    assert_reads_as_people(page)
    _nothing_saved()


def test_with_htmx_only_the_result_comes_back(client, good):
    response = client.post("/policies/new/", good, headers={"HX-Request": "true"})
    assert response.status_code == 200
    html = response.content.decode()
    assert html.lstrip().startswith('<div id="settings-test"') and "<form" not in html
    assert "r19" in _result(html)
    _nothing_saved()


def test_the_test_button_posts_with_htmx_to_the_same_form(client):
    page = client.get("/policies/new/").content.decode()
    button = re.search(r'<button[^>]*data-testid="test-settings"[^>]*>', page, flags=re.S)
    assert button and 'hx-post="/policies/new/"' in button.group(0) and 'hx-target="#settings-test"' in button.group(0)
    assert 'name="action" value="test"' in button.group(0)  # the same button submits the form without JavaScript


@pytest.mark.parametrize("htmx", [False, True], ids=["plain", "htmx"])
def test_a_pointer_that_finds_nothing_says_so(client, good, htmx):
    headers = {"HX-Request": "true"} if htmx else {}
    html = client.post("/policies/new/", {**good, "value_pointer": "/data/due"}, headers=headers).content.decode()
    result = _result(html)
    assert "ambiguous" in result and "nothing at /data/due (the value pointer)" in result
    assert "The source says" not in result
    _nothing_saved()


def test_a_revision_pointer_that_finds_nothing_says_so(client, good):
    html = client.post("/policies/new/", {**good, "revision_pointer": "/meta/etag"}).content.decode()
    assert "no single source revision at /meta/etag (the revision pointer)" in _result(html)
    _nothing_saved()


def test_a_source_that_does_not_answer_is_unreachable(client):
    with socket.socket() as probe:  # a loopback port nobody listens on once this closes
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    settings = {**FORM, "url_template": f"http://127.0.0.1:{port}/tasks/{{subject_id}}"}
    result = _result(client.post("/policies/new/", settings).content.decode())
    assert "could not be reached" in result
    _nothing_saved()


def test_an_address_the_outbound_rules_refuse_is_not_fetched(client, settings):
    settings.SOURCE_ALLOW_PRIVATE_NETWORKS = False  # the production profile
    for url in ("http://169.254.169.254/latest/{subject_id}", "http://127.0.0.1:9/tasks/{subject_id}"):
        response = client.post("/policies/new/", {**FORM, "url_template": url})
        assert response.status_code == 400
        page = response.content.decode()
        result = _result(page)
        assert "not tested" in result and "internal address this server does not fetch" in result
        assert re.search(r'id="id_url_template_error">[^<]*internal address', page)  # beside the field too
        assert "The source says" not in result
    _nothing_saved()


def test_a_missing_secret_variable_is_named(client, good, bind_secret, monkeypatch):
    monkeypatch.delenv("SOURCE_SECRET_TASKS", raising=False)
    bind_secret("SOURCE_SECRET_TASKS", good["url_template"].split("{", 1)[0])
    settings = {**good, "auth_header": "X-Api-Key", "auth_secret_env": "SOURCE_SECRET_TASKS"}
    result = _result(client.post("/policies/new/", settings).content.decode())
    assert "could not be reached" in result and "SOURCE_SECRET_TASKS is not set" in result
    _nothing_saved()


def test_a_subject_is_needed_to_test(client, good):
    response = client.post("/policies/new/", {**good, "try-subject_id": ""}, headers={"HX-Request": "true"})
    assert response.status_code == 200  # htmx swaps only 2xx: the result says what is missing
    result = _result(response.content.decode())
    assert "not tested" in result and "Subject to fetch" in result
    _nothing_saved()
