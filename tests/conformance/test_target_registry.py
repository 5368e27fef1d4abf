"""Conformance targets are one registry (`memory_admin.conformance.targets.TARGETS`): the built-ins in the order the
table shows them, then a target registered with one line (`register`, what a plug-in's module calls), which the
command runs and the page lists; a second target with a name already registered is refused. Entry points register
into the same registry (tests/conformance/test_plugin_targets.py)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from django.core.management import call_command
from django.test import Client

from memory_admin.conformance.targets import (
    TARGETS,
    Reading,
    Session,
    Target,
    TargetError,
    get_target,
    register,
    target_names,
    unregister,
)
from memory_admin.conformance.targets.langmem_inmemory import LangMemTarget
from memory_admin.lib.registry import AlreadyRegistered

BUILT_IN = ["this", "langgraph-inmemory", "langmem", "vector-ttl"]


class Amnesiac(Session):
    def read_fact(self, by: str, subject: str, predicate: str, **kwargs: Any) -> Reading:
        return Reading(stop="not_found", action_allowed=False)

    def read_summary(self, by: str, summary: str) -> Reading:
        return Reading(stop="not_found", usable=False)

    def read_plan(self, by: str, plan: str) -> Reading:
        return Reading(stop="not_found", usable=False)

    def open_notices(self, by: str, load: str) -> list[str]:
        return []

    def acknowledge(self, by: str, load: str) -> None:
        pass


class AmnesiacTarget(Target):
    name = "amnesiac"
    label = "Amnesiac (test-only)"

    @contextmanager
    def session(self, case: Any, source: Any, source_url: str) -> Iterator[Session]:
        yield Amnesiac()


@pytest.fixture
def amnesiac() -> Iterator[type[Target]]:
    register(AmnesiacTarget)
    try:
        yield AmnesiacTarget
    finally:
        unregister("amnesiac")
    assert "amnesiac" not in target_names()


def test_the_built_ins_are_listed_in_the_tables_order():
    assert list(TARGETS)[: len(BUILT_IN)] == BUILT_IN
    assert target_names()[: len(BUILT_IN)] == BUILT_IN


@pytest.mark.django_db
def test_a_registered_target_is_run_by_the_command_and_listed_by_the_page(amnesiac, admin, capsys):
    assert target_names() == [*BUILT_IN, "amnesiac"]
    assert isinstance(get_target("amnesiac"), AmnesiacTarget)
    call_command("conformance", "--target", "amnesiac", "--variants", "0", "--case", "two-facts-one-person")
    assert (
        "amnesiac (Amnesiac (test-only), from tests.conformance.test_target_registry): FAILS" in capsys.readouterr().out
    )
    client = Client()
    client.force_login(admin)
    html = client.get("/conformance/").content.decode()
    assert "this, langgraph-inmemory, langmem, vector-ttl, amnesiac" in html


def test_a_target_with_a_name_already_registered_is_refused():
    class Impostor(AmnesiacTarget):
        name = "langmem"

    with pytest.raises(TargetError, match="the name 'langmem' is taken by the built-in target"):
        register(Impostor)
    with pytest.raises(AlreadyRegistered, match="Two conformance targets have the key 'langmem'"):
        TARGETS.register(Impostor)
    assert TARGETS["langmem"] is LangMemTarget
    assert list(TARGETS)[: len(BUILT_IN)] == BUILT_IN
