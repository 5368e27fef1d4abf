"""The bench's ceiling view (bench/load.py) exists only when BENCH_CEILING_VIEW=1 enables it."""

from __future__ import annotations

import importlib
from collections.abc import Iterator

import pytest
from django.urls import clear_url_caches

import memory_admin.urls

URL = "/api/v1/bench/ceiling/"


@pytest.fixture
def urls_with(monkeypatch: pytest.MonkeyPatch) -> Iterator[object]:
    def load(value: str | None) -> None:
        if value is None:
            monkeypatch.delenv("BENCH_CEILING_VIEW", raising=False)
        else:
            monkeypatch.setenv("BENCH_CEILING_VIEW", value)
        importlib.reload(memory_admin.urls)
        clear_url_caches()

    yield load
    monkeypatch.delenv("BENCH_CEILING_VIEW", raising=False)
    importlib.reload(memory_admin.urls)
    clear_url_caches()


def test_the_ceiling_view_is_absent_by_default(api, agent, urls_with):
    urls_with(None)
    assert api(agent).get(URL).status_code == 404
    urls_with("0")
    assert api(agent).get(URL).status_code == 404


def test_the_ceiling_view_answers_with_the_api_authentication_when_enabled(api, agent, urls_with, client):
    urls_with("1")
    response = api(agent).get(URL)
    assert response.status_code == 200 and response.json()["status"] == "accepted"
    assert client.get(URL).status_code in (401, 403)  # no token: refused like any API view
