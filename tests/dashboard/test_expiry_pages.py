"""Owners decide agents' expiry requests on the dashboard (issue 31): the inbox says who asks and that agents keep
using the fact meanwhile; approving expires it, declining needs a reason (said beside the field, nothing changed);
an agent or compliance person is refused. In Chromium at a phone's width, as the demo's owner."""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.test import Client as PageClient
from playwright.sync_api import Browser, expect

from memory_admin.accounts.models import Principal
from memory_admin.memory import expiry
from memory_admin.memory.models import ExpiryRequest, FieldPolicy, MemoryRecord
from tests.support.browser import PASSWORD

pytestmark = pytest.mark.django_db(transaction=True)


def _asked(reason: str = "The user says this deadline is wrong.") -> ExpiryRequest:
    record = MemoryRecord.objects.filter(status="accepted", subject_id="task-proposal-017").first()
    assert record is not None
    agent = Principal.objects.get(username="agent@demo")
    return expiry.request_expiry(agent, record.memory_id, reason).request


def _signed_in(username: str) -> PageClient:
    client = PageClient()
    client.force_login(Principal.objects.get(username=username))
    return client


def test_the_inbox_names_the_request_and_the_page_refuses_other_roles(demo: None) -> None:
    asked = _asked()
    overview = _signed_in("owner@demo").get("/")
    text = overview.content.decode()
    assert "asks to expire it: The user says this deadline is wrong." in text
    assert f"/expiry-requests/#{asked.public_id}" in text
    compliance = _signed_in("compliance@demo")
    assert compliance.get("/expiry-requests/").status_code == 403
    refused = compliance.post(f"/expiry-requests/{asked.public_id}/approve/")
    assert refused.status_code == 403
    assert ExpiryRequest.objects.get(pk=asked.pk).status == "pending"
    assert _signed_in("owner@demo").post(f"/expiry-requests/{asked.public_id}/reject/").status_code == 404


@pytest.mark.browser
def test_an_owner_declines_with_a_reason_then_approves_another(browser: Browser, live_server: Any, demo: None) -> None:
    asked = _asked()
    record = asked.record
    context = browser.new_context(base_url=live_server.url, viewport={"width": 390, "height": 900})
    context.route(re.compile(r"^(?!http://127\.0\.0\.1[:/])"), lambda route: route.abort())
    tab = context.new_page()
    try:
        tab.goto("/login/")
        tab.get_by_label("Login").fill("owner@demo")
        tab.get_by_label("Password").fill(PASSWORD)
        tab.get_by_role("button", name="Sign in").click()
        expect(tab).not_to_have_url(re.compile(r"/login/"))
        tab.get_by_role("link", name="Expiry requests").click()
        row = tab.locator(f"tr#{asked.public_id}")
        expect(row).to_contain_text("task-proposal-017 · submission_deadline")
        row.get_by_role("button", name="Decline").click()
        field = tab.locator(f"tr#{asked.public_id}").get_by_label("Reason to decline")
        expect(field).to_have_attribute("aria-invalid", "true")
        expect(tab.locator(f"#error-{asked.public_id}")).to_contain_text("Say why")
        assert ExpiryRequest.objects.get(pk=asked.pk).status == "pending"
        field.fill("The task system still says so.")
        tab.locator(f"tr#{asked.public_id}").get_by_role("button", name="Decline").click()
        expect(tab.get_by_role("status").or_(tab.locator(".messages"))).to_contain_text("Kept task-proposal-017")
        assert ExpiryRequest.objects.get(pk=asked.pk).status == "declined"

        again = _asked("Asked again after the call.")
        tab.reload()
        tab.locator(f"tr#{again.public_id}").get_by_role("button", name="Approve: expire it").click()
        expect(tab.locator("body")).to_contain_text("has expired and is kept as history")
        record.refresh_from_db()
        assert record.status == "expired" and ExpiryRequest.objects.get(pk=again.pk).status == "approved"
        expect(tab.locator("body")).to_contain_text("No agent is waiting for a decision.")
    finally:
        context.close()


def test_an_admin_lets_agents_expire_their_own_facts_of_a_field_on_the_policy_page(admin) -> None:
    from tests.support.pages import POLICY_FORM, signed_in

    client = signed_in(admin)
    assert client.post("/policies/new/", {**POLICY_FORM, "agents_expire_own": "on"}).status_code == 302
    policy = FieldPolicy.objects.get(predicate=POLICY_FORM["predicate"])
    assert policy.agents_expire_own is True
    page = client.get(f"/policies/{policy.pk}/").content.decode()
    assert 'name="agents_expire_own"' in page and "checked" in page.split('name="agents_expire_own"')[1][:40]
