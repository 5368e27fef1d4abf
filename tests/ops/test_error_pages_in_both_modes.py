"""The product's error pages under `make run` (DEBUG on) as in production (issue 34, item 2): an unknown URL, a
view's 404, a bad deletion URL and a failure never show Django's technical pages (the URL configuration, a
traceback), and the fact page takes the API's parameter names. DEBUG_TECHNICAL_ERRORS=1 gives the technical
pages back."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client
from django.test.utils import override_settings

from memory_admin.accounts.models import Principal
from tests.support import DEADLINE

TECHNICAL = ("DEBUG = True", "URLconf", "Traceback", "Resolver404", "Http404", "SECRET_KEY")

pytestmark = pytest.mark.django_db


def _product_page(response: Any, status: int, heading: str) -> str:
    assert response.status_code == status
    assert response["Content-Type"].startswith("text/html")
    text = response.content.decode()
    assert f"<h1>{heading}</h1>" in text
    for word in TECHNICAL:
        assert word not in text, word
    return text


@pytest.fixture
def signed_in(owner: Principal) -> Client:
    client = Client()
    client.force_login(owner)
    return client


@pytest.mark.parametrize("debug", [True, False], ids=["make-run", "production"])
def test_an_unknown_url_is_the_products_404(signed_in: Client, debug: bool) -> None:
    with override_settings(DEBUG=debug):
        for url in ("/no-such-page/", "/records/no/such/thing/"):
            text = _product_page(signed_in.get(url), 404, "Not found")
            assert "There is no such page, or it is not yours to see." in text, url
            assert '<a href="/">Back to the overview</a>' in text, url


@pytest.mark.parametrize("debug", [True, False], ids=["make-run", "production"])
def test_a_views_404_says_what_is_missing_in_peoples_words(signed_in: Client, debug: bool) -> None:
    with override_settings(DEBUG=debug):
        text = _product_page(signed_in.get("/facts/?project=project-a"), 404, "Not found")
        assert "Name a project, subject and predicate." in text
        text = _product_page(signed_in.get("/facts/?project=project-a&subject=nobody&predicate=x"), 404, "Not found")
        assert "No such fact." in text


@pytest.mark.parametrize("debug", [True, False], ids=["make-run", "production"])
def test_a_bad_deletion_url_is_the_products_404(compliance: Principal, debug: bool) -> None:
    client = Client()
    client.force_login(compliance)
    with override_settings(DEBUG=debug):
        for url in ("/deletions/del-0000000000000000/", "/deletions/del-0000000000000000/report/"):
            text = _product_page(client.get(url), 404, "Not found")
            assert "There is no such page, or it is not yours to see." in text, url
            assert "del-0000000000000000" not in text, url  # the page does not echo the id it could not find


def test_an_unknown_api_url_answers_json_under_debug_too(client: Client) -> None:
    with override_settings(DEBUG=True):
        response = client.get("/api/v1/no-such-endpoint/")
    assert response.status_code == 404
    assert response.json() == {"code": "not_found", "detail": "No such endpoint or object."}


@pytest.mark.urls("tests.ops.error_urls")
@pytest.mark.parametrize("debug", [True, False], ids=["make-run", "production"])
def test_a_failure_is_the_products_500(debug: bool) -> None:
    client = Client(raise_request_exception=False)
    with override_settings(DEBUG=debug):
        text = _product_page(client.get("/boom/"), 500, "Server error")
    assert "Something went wrong on our side." in text
    assert "RuntimeError" not in text  # the exception stays in the log, never on the page


@pytest.mark.urls("tests.ops.error_urls")
def test_developers_can_ask_for_the_technical_pages() -> None:
    client = Client(raise_request_exception=False)
    with override_settings(DEBUG=True, DEBUG_TECHNICAL_ERRORS=True):
        assert b"DEBUG = True" in client.get("/no-such-page/").content
        assert b"RuntimeError" in client.get("/boom/").content


def test_the_fact_page_takes_the_api_parameter_names(signed_in: Client, moved_deadline: Any) -> None:
    query = "project_id={project_id}&subject_id={subject_id}&predicate={predicate}".format(**DEADLINE)
    response = signed_in.get(f"/facts/?{query}")
    assert response.status_code == 200
    assert DEADLINE["subject_id"] in response.content.decode()
