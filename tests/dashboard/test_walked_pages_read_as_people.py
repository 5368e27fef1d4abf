"""What the three roles' walk in Chromium (tests/dashboard/browser/test_three_roles_walk.py) found, pinned on
Django's test client (issue 34, item 1): the token list and its revoke confirmation show no row number, status
code or ISO time; a deletion's preview, page and report show cache keys and the request's id only in copyable
fields; a dispute's date-like source revision reads as a date; the messages stay a list inside their status
region (axe: a list item outside a list)."""

from __future__ import annotations

import re
from datetime import timedelta
from io import StringIO

import pytest
from django.core.management import call_command
from django.test import Client
from django.utils import timezone

from deletion.models import DeletionRequest
from memory_admin.accounts.models import ApiToken, Principal
from memory_admin.memory import tokens
from tests.support import run_purge
from tests.support.ux_checks import assert_reads_as_people

COPYABLE = re.compile(r'<input class="copy-id" readonly value="([^"]+)"')
SATO = {"project_id": "project-a", "scope_kind": "subject_id", "scope_value": "person-sato", "reason": "Asked."}


@pytest.fixture
def story(db: None) -> None:
    call_command("seed_demo", "--subjects", "0", stdout=StringIO())


def client_for(username: str) -> Client:
    client = Client()
    client.force_login(Principal.objects.get(username=username))
    return client


def test_tokens_and_their_revocation_read_as_people(story: None) -> None:
    admin = Principal.objects.get(username="admin@demo")
    token, _raw = tokens.issue_for_agent(admin, "agent", name="planner")
    ApiToken.objects.filter(pk=token.pk).update(last_used_at=timezone.now() - timedelta(hours=3))
    client = client_for("admin@demo")
    listing = client.get("/tokens/").content.decode()
    assert_reads_as_people(listing, page="/tokens/")
    assert ">Id</th>" not in listing and f"<td>{token.pk}</td>" not in listing
    confirm = client.post(f"/tokens/{token.pk}/revoke/").content.decode()
    assert_reads_as_people(confirm, page="revoke")
    assert "(401)" not in confirm and "refused from now on" in confirm
    assert re.search(r"<dt>Last used</dt><dd><time datetime=", confirm)


def test_a_deletions_keys_and_id_are_copyable_not_read(story: None) -> None:
    client = client_for("compliance@demo")
    preview = client.post("/deletions/new/", SATO)
    page = preview.content.decode()
    assert_reads_as_people(page, page="preview")
    assert any(key.startswith("fact:") for key in COPYABLE.findall(page))  # the answer cache's keys
    client.post("/deletions/new/", {**SATO, "confirm": "yes", "preview_id": preview.context["preview_id"]})
    filed = DeletionRequest.objects.get()
    run_purge(filed)
    for url in (f"/deletions/{filed.public_id}/", f"/deletions/{filed.public_id}/report/"):
        shown = client.get(url).content.decode()
        assert_reads_as_people(shown, page=url)
        assert filed.public_id in COPYABLE.findall(shown)


def test_a_date_like_source_revision_reads_as_a_date(story: None) -> None:
    page = client_for("owner@demo").get("/disputes/").content.decode()
    assert_reads_as_people(page, page="/disputes/")
    assert "Mon 26 Oct 2026" in page  # price-feed-a's revision "2026-10-26"


def test_messages_are_a_list_inside_their_status_region(story: None) -> None:
    client = client_for("admin@demo")
    token, _raw = tokens.issue_for_agent(Principal.objects.get(username="admin@demo"), "agent", name="old")
    response = client.post(f"/tokens/{token.pk}/revoke/", {"confirm": "yes", "reason": "Unused."}, follow=True)
    page = response.content.decode()
    assert re.search(r'<div class="messages" role="status"><ul>\s*<li class="msg-success">Token ', page)
