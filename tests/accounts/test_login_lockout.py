"""Sign-in lockout (issue 12, part 2): too many failed sign-ins lock the login (from any address) and the
address (for any login); the page says so, the right password is refused while locked, another login is
not affected, and a tenant's admin (or the operator) unlocks."""

from __future__ import annotations

import json
import secrets
from typing import Any

import pytest
from django.core.management import call_command
from django.test import Client, RequestFactory

from memory_admin.accounts.lockout import lockout_response
from memory_admin.memory.models import AuditEvent

LOCKED_TEXT = "Too many failed sign-ins"


@pytest.fixture(autouse=True)
def _small_limits(settings):
    settings.AXES_FAILURE_LIMIT = 3
    settings.LOGIN_ADDRESS_FAILURE_LIMIT = 5


def _address() -> str:
    return f"198.18.{secrets.randbelow(250)}.{secrets.randbelow(250) + 1}"


def _sign_in(username: str, password: str, address: str, forwarded_for: str = "") -> tuple[Client, Any]:
    client = Client(REMOTE_ADDR=address)
    headers = {"X-Forwarded-For": forwarded_for} if forwarded_for else None
    response = client.post("/login/", {"username": username, "password": password}, headers=headers)
    return client, response


def _signed_in(client: Client) -> bool:
    return "_auth_user_id" in client.session


def _fail(username: str, address: str, times: int) -> Any:
    response = None
    for _ in range(times):
        _, response = _sign_in(username, "wrong-password", address)
    return response


def test_account_locked_after_n_failures_with_a_message_and_retry_after(owner):
    address = _address()
    assert _fail("olivia@acme", address, 2).status_code == 200  # "didn't match", not yet locked
    locked = _fail("olivia@acme", address, 1)
    assert locked.status_code == 429
    assert LOCKED_TEXT in locked.content.decode() and "15 minutes" in locked.content.decode()
    assert int(locked["Retry-After"]) == 15 * 60


def test_the_right_password_is_refused_while_locked_from_any_address(owner):
    _fail("olivia@acme", _address(), 3)
    client, response = _sign_in("olivia@acme", "pw-olivia", _address())  # another address: the login is locked
    assert response.status_code == 429 and LOCKED_TEXT in response.content.decode()
    assert not _signed_in(client)


def test_another_account_is_not_affected(owner, admin):
    address = _address()
    _fail("olivia@acme", address, 3)
    client, response = _sign_in("ada@acme", "pw-ada", address)  # same address, under its own limit
    assert response.status_code == 302 and _signed_in(client)


def test_an_address_is_locked_after_failures_on_many_logins(owner):
    address = _address()
    for n in range(5):  # five logins, one failure each: no login reaches 3, the address reaches 5
        _sign_in(f"nobody-{n}@acme", "wrong-password", address)
    client, response = _sign_in("olivia@acme", "pw-olivia", address)
    assert response.status_code == 429 and not _signed_in(client)
    client, response = _sign_in("olivia@acme", "pw-olivia", _address())  # from elsewhere she signs in
    assert response.status_code == 302 and _signed_in(client)


def test_a_forged_forwarded_for_header_does_not_dodge_the_address_lock(owner):
    address = _address()
    for n in range(5):
        _sign_in(f"nobody-{n}@acme", "wrong-password", address, forwarded_for=f"203.0.113.{n}")
    _, response = _sign_in("olivia@acme", "pw-olivia", address, forwarded_for="203.0.113.200")
    assert response.status_code == 429


def test_the_tenant_admin_sees_and_unlocks_the_account(owner, admin):
    _fail("olivia@acme", _address(), 3)
    client = Client()
    client.force_login(admin)
    page = client.get("/lockouts/")
    assert page.status_code == 200 and "olivia@acme" in page.content.decode() and "locked" in page.content.decode()
    response = client.post(f"/lockouts/{owner.pk}/unlock/")
    assert response.status_code == 302
    event = AuditEvent.objects.get(action="login.unlocked", object_id=str(owner.pk))
    assert event.actor == admin and event.before == {"login": "olivia@acme", "failures": 3, "locked": True}
    assert event.after == {"login": "olivia@acme", "failures": 0, "locked": False}
    signed, response = _sign_in("olivia@acme", "pw-olivia", _address())
    assert response.status_code == 302 and _signed_in(signed)


def test_only_admins_of_the_same_tenant_unlock(owner, compliance, outsider):
    _fail("olivia@acme", _address(), 3)
    other_tenant = Client()
    other_tenant.force_login(outsider)  # an admin, of globex
    assert other_tenant.post(f"/lockouts/{owner.pk}/unlock/").status_code == 404
    assert "olivia@acme" not in other_tenant.get("/lockouts/").content.decode()
    not_admin = Client()
    not_admin.force_login(compliance)
    assert not_admin.post(f"/lockouts/{owner.pk}/unlock/").status_code == 403
    assert not_admin.get("/lockouts/").status_code == 403
    _, response = _sign_in("olivia@acme", "pw-olivia", _address())
    assert response.status_code == 429  # still locked


def test_the_operator_unlocks_with_the_axes_commands(owner):
    address = _address()
    _fail("olivia@acme", address, 3)
    call_command("axes_reset_username", "olivia@acme")
    client, response = _sign_in("olivia@acme", "pw-olivia", address)
    assert response.status_code == 302 and _signed_in(client)


def test_the_django_admin_login_is_covered_too(owner):
    address = _address()
    for _ in range(3):
        Client(REMOTE_ADDR=address).post("/admin/login/", {"username": "olivia@acme", "password": "nope"})
    _, response = _sign_in("olivia@acme", "pw-olivia", _address())
    assert response.status_code == 429


def test_api_callers_get_the_json_error_shape(settings):
    request = RequestFactory().post("/api/v1/some-login/")
    response = lockout_response(request, None, {"username": "x"})
    assert response.status_code == 429 and int(response["Retry-After"]) == 15 * 60
    body = json.loads(response.content)
    assert body["code"] == "locked_out" and LOCKED_TEXT in body["detail"]
