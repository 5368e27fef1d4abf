"""Tokens with a lifecycle (issue 12, part 4): names, expiry, last use, revocation; the API, the Tokens page and
the commands; every change audited; a revoked or expired token answers 401 on its very next request."""

from __future__ import annotations

import hashlib
from datetime import timedelta
from io import StringIO

import pytest
from django.core.management import CommandError, call_command
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from rest_framework.test import APIClient

from memory_admin.accounts.models import LAST_USED_RESOLUTION, ApiToken, Principal
from memory_admin.accounts.services import issue_token
from memory_admin.memory import tokens
from memory_admin.memory.errors import Forbidden, InvalidInput, InvalidState, NotFound
from memory_admin.memory.models import AuditEvent


def bearer(raw: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
    return client


def signed_in(principal: Principal) -> Client:
    client = Client()
    client.force_login(principal)
    return client


def token_row(raw: str) -> ApiToken:
    token = ApiToken.objects.lookup(raw)
    assert token is not None
    return token


# --- Authentication: refused at once --------------------------------------------------------------------


def test_an_expired_token_answers_401_at_once(agent):
    raw = issue_token(agent, "ci", expires_at=timezone.now() + timedelta(hours=1))
    client = bearer(raw)
    assert client.get("/api/v1/records/").status_code == 200
    ApiToken.objects.filter(pk=token_row(raw).pk).update(expires_at=timezone.now() - timedelta(seconds=1))
    response = client.get("/api/v1/records/")
    assert response.status_code == 401
    assert response.json() == {"code": "authentication_failed", "detail": "Token expired."}


def test_a_token_revoked_through_the_api_answers_401_on_its_next_request(admin, agent, api):
    raw = issue_token(agent, "ci")
    client = bearer(raw)
    assert client.get("/api/v1/records/").status_code == 200
    revoked = api(admin).post(f"/api/v1/tokens/{token_row(raw).pk}/revoke/", {"reason": "leaked"}, format="json")
    assert revoked.status_code == 200 and revoked.json()["state"] == "revoked"
    response = client.get("/api/v1/records/")  # same process, no cache to wait for
    assert response.status_code == 401
    assert response.json() == {"code": "authentication_failed", "detail": "Token revoked."}


def test_an_unknown_token_and_a_deactivated_principal_are_refused(agent):
    assert bearer("mga_nothing-like-this").get("/api/v1/records/").json()["detail"] == "Unknown token."
    raw = issue_token(agent, "ci")
    Principal.objects.filter(pk=agent.pk).update(is_active=False)
    response = bearer(raw).get("/api/v1/records/")
    assert response.status_code == 401 and response.json()["code"] == "authentication_failed"


def test_lookup_loads_the_token_its_principal_and_tenant_as_the_orm_would_in_one_query(agent, db):
    """The lookup every API request makes is one statement built once (lib.rows): the token, its principal and
    the principal's tenant (none for a principal without one) hold what select_related would have loaded, and
    nothing more is read when they are used."""
    from django.forms.models import model_to_dict

    tenantless = Principal.objects.create(username="ops-without-tenant", name="ops")
    for principal in (agent, tenantless):
        raw = issue_token(principal, "ci")
        want = ApiToken.objects.select_related("principal", "principal__tenant").get(
            key_hash=hashlib.sha256(raw.encode()).hexdigest()
        )
        with CaptureQueriesContext(connection) as queries:
            got = ApiToken.objects.lookup(raw)
            assert got is not None
            tenant = got.principal.tenant
        assert len(queries.captured_queries) == 1
        assert model_to_dict(got) == model_to_dict(want) and got.pk == want.pk
        assert model_to_dict(got.principal) == model_to_dict(want.principal)
        assert (tenant and model_to_dict(tenant)) == (want.principal.tenant and model_to_dict(want.principal.tenant))
        assert got._state.adding is False and got.principal._state.adding is False
    assert ApiToken.objects.lookup("mga_" + "x" * 43) is None


def test_last_use_is_recorded_and_written_at_most_once_a_minute(agent, django_assert_num_queries):
    raw = issue_token(agent, "ci")
    assert token_row(raw).last_used_at is None
    client = bearer(raw)
    assert client.get("/api/v1/tokens/").status_code == 403  # any authenticated request counts as a use
    first = token_row(raw).last_used_at
    assert first is not None
    # Within the minute: the token is read, never written again.
    token = token_row(raw)
    with django_assert_num_queries(0):
        token.touch(first + timedelta(seconds=30))
    assert client.get("/api/v1/tokens/").status_code == 403
    assert token_row(raw).last_used_at == first
    # Past the minute: the next use moves it.
    ApiToken.objects.filter(pk=token.pk).update(last_used_at=first - LAST_USED_RESOLUTION - timedelta(seconds=1))
    assert client.get("/api/v1/tokens/").status_code == 403
    moved = token_row(raw).last_used_at
    assert moved is not None and moved >= first


def test_the_conditional_update_never_moves_a_fresh_last_use_written_by_another_request(agent):
    """Two requests that both read an old `last_used_at`: the second UPDATE finds the row fresh and writes nothing."""
    raw = issue_token(agent, "ci")
    stale_copy = token_row(raw)
    now = timezone.now()
    token_row(raw).touch(now)
    stale_copy.touch(now + timedelta(seconds=5))  # its own copy says "never used"; the row says "just now"
    assert token_row(raw).last_used_at == now


# --- The API --------------------------------------------------------------------------------------------


def test_an_admin_issues_lists_and_revokes_tokens_and_every_change_is_audited(admin, agent, api):
    client = api(admin)
    expires = (timezone.now() + timedelta(days=30)).replace(microsecond=0)
    made = client.post(
        "/api/v1/tokens/",
        {"principal": "agent-7", "name": "crm sync", "expires_at": expires.isoformat()},
        format="json",
    )
    assert made.status_code == 201, made.content
    body = made.json()
    assert body["token"].startswith(body["prefix"]) and body["state"] == "active"
    assert body["principal"] == "agent-7" and body["created_by"] == "ada" and body["name"] == "crm sync"
    assert made["Cache-Control"] == "no-store"
    # The new token works, and is stored hashed only.
    assert bearer(body["token"]).get("/api/v1/records/").status_code == 200
    assert not ApiToken.objects.filter(key_hash=body["token"]).exists()

    listed = client.get("/api/v1/tokens/")
    assert listed.status_code == 200
    assert body["token"] not in listed.content.decode()  # the secret is never listed
    row = next(r for r in listed.json()["results"] if r["id"] == body["id"])
    assert "token" not in row and row["prefix"] == body["prefix"] and row["last_used_at"] is not None

    revoked = client.post(f"/api/v1/tokens/{body['id']}/revoke/", {"reason": "rotated"}, format="json")
    assert revoked.status_code == 200
    assert revoked.json()["revoked_by"] == "ada" and revoked.json()["revoke_reason"] == "rotated"
    again = client.post(f"/api/v1/tokens/{body['id']}/revoke/", {}, format="json")
    assert again.status_code == 409 and again.json()["code"] == "invalid_state"

    events = AuditEvent.objects.filter(object_type="token", object_id=str(body["id"])).order_by("id")
    assert [(e.action, e.actor_name) for e in events] == [("token.issued", "ada"), ("token.revoked", "ada")]
    assert events[1].reason == "rotated" and (events[1].after or {}).get("state") == "revoked"
    for event in events:  # neither the secret nor its hash reaches the audit log
        assert body["token"] not in str(event.after) and token_row(body["token"]).key_hash not in str(event.after)


@pytest.mark.parametrize("who", ["owner", "agent", "compliance"])
def test_only_admins_use_the_tokens_api(who, request, admin, agent, api):
    principal = request.getfixturevalue(who)
    target = tokens.issue(agent, name="ci", actor=admin)[0]
    client = api(principal)
    assert client.get("/api/v1/tokens/").status_code == 403
    made = client.post("/api/v1/tokens/", {"principal": "agent-7", "name": "mine"}, format="json")
    assert made.status_code == 403 and made.json()["code"] == "forbidden"
    assert client.post(f"/api/v1/tokens/{target.pk}/revoke/", {}, format="json").status_code == 403
    assert token_row_by_pk(target.pk).revoked_at is None
    assert not ApiToken.objects.filter(name="mine").exists()


def token_row_by_pk(pk: int) -> ApiToken:
    return ApiToken.objects.get(pk=pk)


def test_an_outsider_admin_sees_none_of_the_tenants_tokens_and_gets_404_on_their_ids(outsider, admin, agent, api):
    target = tokens.issue(agent, name="ci", actor=admin)[0]
    client = api(outsider)
    listed = client.get("/api/v1/tokens/").json()["results"]
    assert target.pk not in {r["id"] for r in listed}
    assert all(r["principal"] == "oscar" for r in listed)
    response = client.post(f"/api/v1/tokens/{target.pk}/revoke/", {}, format="json")
    assert response.status_code == 404 and response.json()["code"] == "not_found"
    foreign = client.post("/api/v1/tokens/", {"principal": "agent-7", "name": "x"}, format="json")
    assert foreign.status_code == 404
    assert token_row_by_pk(target.pk).revoked_at is None


def test_issuing_refuses_bad_input_without_making_a_token(admin, owner, agent, api):
    client = api(admin)
    before = ApiToken.objects.count()
    past = (timezone.now() - timedelta(minutes=1)).isoformat()
    cases = [
        ({"principal": "agent-7", "name": ""}, "name"),
        ({"principal": "agent-7", "name": "   "}, "name"),
        ({"principal": "agent-7", "name": "x\x07y"}, "name"),  # a control character
        ({"principal": "agent-7", "name": "n" * 101}, "name"),
        ({"principal": "agent-7", "name": "ok", "expires_at": past}, "expires_at"),
        ({"principal": "agent-7", "name": "ok", "expires_at": "2026-12-01T10:00:00"}, "expires_at"),  # naive
        ({"principal": "agent-7", "name": "ok", "expires_at": "9999-01-01T00:00:00Z"}, "expires_at"),
        ({"principal": "olivia", "name": "ok"}, "principal"),  # a human: an admin may not act as an owner
    ]
    for payload, field in cases:
        response = client.post("/api/v1/tokens/", payload, format="json")
        assert response.status_code == 400, (payload, response.content)
        assert response.json()["code"] == "invalid" and field in response.json()["errors"], payload
    assert client.post("/api/v1/tokens/", {"principal": "nobody", "name": "ok"}, format="json").status_code == 404
    assert ApiToken.objects.count() == before
    assert not AuditEvent.objects.filter(action="token.issued").exists()


def test_a_forged_token_id_is_a_404(admin, api):
    client = api(admin)
    for forged in ("abc", "99999999999999999999999", "-1", "0"):
        response = client.post(f"/api/v1/tokens/{forged}/revoke/", {}, format="json")
        assert response.status_code == 404 and response.json()["code"] == "not_found", forged


def test_domain_functions_refuse_non_admins_and_foreign_ids(owner, admin, agent, outsider):
    token = tokens.issue(agent, name="ci", actor=admin)[0]
    with pytest.raises(Forbidden):
        tokens.issue_for_agent(owner, "agent-7", name="x")
    with pytest.raises(Forbidden):
        tokens.revoke_for(owner, token.pk)
    with pytest.raises(NotFound):
        tokens.revoke_for(outsider, token.pk)
    tokens.revoke_for(admin, token.pk, reason="done")
    with pytest.raises(InvalidState):
        tokens.revoke_for(admin, token.pk)
    with pytest.raises(InvalidInput):
        tokens.issue(agent, name="")


def test_the_lists_cost_as_many_queries_for_many_tokens_as_for_one(admin, agent, other_agent, api):
    client, page = api(admin), signed_in(admin)
    tokens.issue(agent, name="t0", actor=admin)
    assert client.get("/api/v1/tokens/").status_code == 200  # the first use writes last_used_at; not counted
    with CaptureQueriesContext(connection) as one_api:
        assert client.get("/api/v1/tokens/").status_code == 200
    with CaptureQueriesContext(connection) as one_page:
        assert page.get("/tokens/").status_code == 200
    for n in range(5):
        token = tokens.issue(other_agent if n % 2 else agent, name=f"t{n + 1}", actor=admin)[0]
        if n % 2:
            tokens.revoke(token, actor=admin)
    with CaptureQueriesContext(connection) as many_api:
        assert len(client.get("/api/v1/tokens/").json()["results"]) >= 6
    with CaptureQueriesContext(connection) as many_page:
        assert page.get("/tokens/").status_code == 200
    assert len(many_api) == len(one_api) and len(many_page) == len(one_page)


# --- The Tokens page -----------------------------------------------------------------------------------


def test_the_page_issues_a_token_shown_once_and_lists_only_its_prefix(admin, agent):
    client = signed_in(admin)
    page = client.get("/tokens/")
    assert page.status_code == 200 and 'href="/tokens/"' in page.content.decode()  # in the admin's nav
    issued = client.post("/tokens/new/", {"principal": "agent-7", "name": "crm sync", "expires_at": ""})
    assert issued.status_code == 200
    token = ApiToken.objects.get(name="crm sync")
    html = issued.content.decode()
    raw = html.split('data-testid="new-token">')[1].split("<")[0]
    assert raw.startswith(token.prefix) and token_row(raw).pk == token.pk
    assert issued["Cache-Control"] == "no-store"
    assert "sessionid" not in issued.cookies or raw not in issued.cookies["sessionid"].value
    assert "messages" not in issued.cookies  # the secret is in this response only
    listed = client.get("/tokens/").content.decode()
    assert token.prefix in listed and raw not in listed and "crm sync" in listed
    assert bearer(raw).get("/api/v1/records/").status_code == 200
    event = AuditEvent.objects.get(action="token.issued", object_id=str(token.pk))
    assert event.actor_name == "ada"


def test_the_page_refuses_bad_input_with_a_message_and_makes_nothing(admin, agent):
    client = signed_in(admin)
    past = (timezone.now() - timedelta(days=1)).strftime("%Y-%m-%d %H:%M")
    for form in (
        {"principal": "agent-7", "name": ""},
        {"principal": "agent-7", "name": "x", "expires_at": past},
        {"principal": "agent-7", "name": "x", "expires_at": "soon"},
        {"principal": "olivia", "name": "x"},
    ):
        response = client.post("/tokens/new/", form)
        assert response.status_code == 400, form
        assert 'class="error"' in response.content.decode(), form
    assert not ApiToken.objects.filter(principal=agent).exists()


def test_revoking_on_the_page_asks_for_confirmation_then_revokes(admin, agent):
    token, raw = tokens.issue(agent, name="ci", actor=admin)
    client = signed_in(admin)
    review = client.post(f"/tokens/{token.pk}/revoke/")
    assert review.status_code == 200 and 'name="confirm" value="yes"' in review.content.decode()
    assert token_row(raw).revoked_at is None
    done = client.post(f"/tokens/{token.pk}/revoke/", {"confirm": "yes", "reason": "rotated", "next": "/tokens/"})
    assert done.status_code == 302 and done["Location"] == "/tokens/"
    assert token_row(raw).revoked_by == admin and token_row(raw).revoke_reason == "rotated"
    assert bearer(raw).get("/api/v1/records/").json()["detail"] == "Token revoked."
    assert AuditEvent.objects.filter(action="token.revoked", object_id=str(token.pk), actor_name="ada").count() == 1
    assert "revoked" in client.get("/tokens/").content.decode()


@pytest.mark.parametrize("who", ["owner", "compliance", "agent"])
def test_the_page_is_for_admins_only(who, request, admin, agent):
    principal = request.getfixturevalue(who)
    token = tokens.issue(agent, name="ci", actor=admin)[0]
    client = signed_in(principal)
    assert client.get("/tokens/").status_code == 403
    assert client.post("/tokens/new/", {"principal": "agent-7", "name": "x"}).status_code == 403
    assert client.post(f"/tokens/{token.pk}/revoke/", {"confirm": "yes"}).status_code == 403
    assert 'href="/tokens/"' not in client.get("/").content.decode()
    assert token_row_by_pk(token.pk).revoked_at is None and not ApiToken.objects.filter(name="x").exists()


def test_an_outsider_gets_404_on_the_tenants_token_ids(outsider, admin, agent):
    token = tokens.issue(agent, name="ci", actor=admin)[0]
    client = signed_in(outsider)
    assert client.post(f"/tokens/{token.pk}/revoke/", {"confirm": "yes"}).status_code == 404
    assert client.post("/tokens/999999999999999999999/revoke/", {"confirm": "yes"}).status_code == 404
    assert "ci" not in [t.name for t in tokens.tokens_of(outsider)]
    assert token_row_by_pk(token.pk).revoked_at is None


# --- Commands ------------------------------------------------------------------------------------------


def test_create_principal_names_the_token_sets_its_expiry_and_audits_it(db):
    out = StringIO()
    call_command(
        "create_principal",
        *("--tenant", "initech", "--name", "bot-1", "--role", "agent"),
        *("--token-name", "nightly import", "--expires-in-days", "7"),
        stdout=out,
    )
    raw = out.getvalue().strip().splitlines()[-1]
    token = token_row(raw)
    assert token.name == "nightly import" and token.created_by is None
    assert token.expires_at is not None
    assert timedelta(days=6, hours=23) < token.expires_at - timezone.now() <= timedelta(days=7)
    assert bearer(raw).get("/api/v1/records/").status_code == 200
    event = AuditEvent.objects.get(action="token.issued", object_id=str(token.pk))
    assert event.actor_name == "system" and event.reason == "create_principal"
    with pytest.raises(CommandError):
        call_command(
            "create_principal",
            *("--tenant", "initech", "--name", "bot-1", "--role", "agent", "--expires-in-days", "0"),
            stdout=StringIO(),
        )


def test_revoke_token_by_prefix_or_id_is_audited_and_refuses_ambiguity(admin, agent, outsider):
    first, first_raw = tokens.issue(agent, name="one", actor=admin)
    second, _ = tokens.issue(agent, name="two", actor=admin)
    # Two tokens sharing their first 8 characters: a short prefix names neither.
    ApiToken.objects.filter(pk=second.pk).update(prefix=first.prefix[:8] + "QQQQ")
    with pytest.raises(CommandError, match="Several"):
        call_command("revoke_token", "--tenant", "acme", "--prefix", first.prefix[:8], stdout=StringIO())
    with pytest.raises(CommandError, match="at least 6"):
        call_command("revoke_token", "--tenant", "acme", "--prefix", "mga_", stdout=StringIO())
    assert not ApiToken.objects.filter(revoked_at__isnull=False).exists()

    out = StringIO()
    call_command("revoke_token", "--tenant", "acme", "--prefix", first.prefix, "--reason", "leaked", stdout=out)
    assert "Revoked" in out.getvalue()
    assert bearer(first_raw).get("/api/v1/records/").status_code == 401
    event = AuditEvent.objects.get(action="token.revoked", object_id=str(first.pk))
    assert event.actor_name == "system" and event.reason == "leaked"
    assert token_row_by_pk(second.pk).revoked_at is None

    with pytest.raises(CommandError, match="No token"):  # another tenant's slug does not reach acme's token
        call_command("revoke_token", "--tenant", "globex", "--id", str(second.pk), stdout=StringIO())
    with pytest.raises(CommandError, match="digits"):
        call_command("revoke_token", "--tenant", "acme", "--id", "x1", stdout=StringIO())
    call_command("revoke_token", "--tenant", "acme", "--id", str(second.pk), stdout=StringIO())
    assert token_row_by_pk(second.pk).revoked_at is not None
    with pytest.raises(CommandError, match="revoked already"):
        call_command("revoke_token", "--tenant", "acme", "--id", str(second.pk), stdout=StringIO())


def test_tokens_issued_before_names_existed_get_one_and_the_secret_stays_hashed(agent):
    raw = issue_token(agent)  # no name given: a name is made up, never blank
    token = token_row(raw)
    assert token.name == f"token-{token.pk}" and token.key_hash != raw and raw.startswith(token.prefix)
