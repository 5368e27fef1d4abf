"""One navigation list (dashboard/nav.py) that the menu and the pages' access checks both read (issue 33,
item 5): for each role, every link its menu shows answers 200 and every page its menu hides answers 403;
and every dashboard view belongs to a page group, so none is left without the group's check."""

from __future__ import annotations

import re

import pytest
from django.test import Client
from django.urls import URLPattern, URLResolver, get_resolver, reverse

from memory_admin.accounts.services import ensure_principal
from memory_admin.dashboard import nav

ROLES = ["owner", "admin", "compliance", "agent"]
MENU = re.compile(r'<nav aria-label="Main">(.*?)</nav>', re.S)

# What each role's menu holds, written out: the registry must keep saying this.
EXPECTED_HIDDEN = {
    "owner": {"policies", "lockouts", "tokens", "conformance"},
    "admin": set(),
    "compliance": {"expiry_requests", "lockouts", "tokens"},
    "agent": {"expiry_requests", "deletions", "policies", "lockouts", "tokens", "conformance"},
}


def _menu_links(html: str) -> set[str]:
    found = MENU.search(html)
    assert found, "no main menu on the page"
    return set(re.findall(r'href="([^"]+)"', found.group(1)))


@pytest.mark.parametrize("role", ROLES)
def test_each_role_opens_every_page_its_menu_shows_and_none_it_hides(role, db):
    person = ensure_principal("acme", f"nav-{role}", [role], password="pw-nav-person", validate=False)
    client = Client()
    client.force_login(person)
    shown = _menu_links(client.get(reverse("dashboard:overview")).content.decode())
    hidden = {entry.url_name for entry in nav.NAV} - {e.url_name for e in nav.visible_to(person)}
    assert hidden == EXPECTED_HIDDEN[role]
    for entry in nav.NAV:
        url = reverse(f"dashboard:{entry.url_name}")
        response = client.get(url)
        if url in shown:
            assert entry.url_name not in hidden
            assert response.status_code == 200, (role, url, response.status_code)
            # The page marks itself as the current one in the same menu.
            assert f'<a href="{url}" aria-current="page">' in response.content.decode(), (role, url)
        else:
            assert entry.url_name in hidden, (role, url)
            assert response.status_code == 403, (role, url, response.status_code)
            assert entry.refusal in response.content.decode()


def test_a_person_with_several_roles_sees_the_union(db):
    person = ensure_principal("acme", "nav-both", ["owner", "compliance"], password="pw-nav-person", validate=False)
    client = Client()
    client.force_login(person)
    shown = _menu_links(client.get("/").content.decode())
    assert reverse("dashboard:expiry_requests") in shown and reverse("dashboard:policies") in shown
    assert reverse("dashboard:tokens") not in shown


def test_signed_out_people_get_no_menu_and_are_sent_to_sign_in(db):
    client = Client()
    assert 'aria-label="Main"' not in client.get(reverse("dashboard:login")).content.decode()
    for entry in nav.NAV:
        response = client.get(reverse(f"dashboard:{entry.url_name}"))
        assert response.status_code == 302 and response["Location"].startswith(reverse("dashboard:login"))


def test_every_dashboard_view_belongs_to_a_page_group():
    """A view added without `@nav.page(ENTRY)` would have no group rule: each one carries its entry."""
    dashboard = next(p for p in get_resolver().url_patterns if getattr(p, "namespace", None) == "dashboard")
    assert isinstance(dashboard, URLResolver)
    missing = []
    for pattern in dashboard.url_patterns:
        assert isinstance(pattern, URLPattern)
        if pattern.name in ("login", "logout"):
            continue
        if not isinstance(getattr(pattern.callback, "nav_entry", None), nav.NavEntry):
            missing.append(pattern.name)
    assert missing == []
    # And every menu entry names a page that exists.
    names = {p.name for p in dashboard.url_patterns if isinstance(p, URLPattern)}
    assert {entry.url_name for entry in nav.NAV} <= names
