"""Cache keys: one fact's cached answer is never served for another.

Keys were `fact:{tenant}:{project}:{subject}:{predicate}` cut to 250 characters, so tuples that differ
only in where a `:` falls shared a key, and so did long identifiers that differ after the cut — bob's
revoked `can_send` was answered "allowed" from alice's entry.
"""

from __future__ import annotations

import re

import pytest
from django.core.cache import cache

from deletion.stores import Scope
from deletion.stores.caches import CachesStore
from memory_admin.derived.caches import cache_key, cached_fact, fact_key, store
from memory_admin.derived.models import CacheEntry
from memory_admin.memory.actions import Assertion, assert_fact
from tests.support import at

LONG_PROJECT = "p" * 100
ALICE = "mailer-" + "m" * 150 + "-alice"
BOB = "mailer-" + "m" * 150 + "-bob"


def test_moving_a_separator_between_parts_changes_the_key():
    assert fact_key(1, "pc:s", "t", "q") != fact_key(1, "pc", "s:t", "q")
    assert fact_key(1, "p", "s:t", "q") != fact_key(1, "p", "s", "t:q")
    assert cache_key("fact", 1, "2") != cache_key("fact", 12) != cache_key("fact", "1", "2")
    assert cache_key("fact", 1, "a") != cache_key("fact", "1", "a")  # types are part of the encoding


def test_long_identifiers_that_differ_only_at_the_end_get_different_keys():
    alice, bob = fact_key(7, LONG_PROJECT, ALICE, "can_send"), fact_key(7, LONG_PROJECT, BOB, "can_send")
    assert alice != bob
    # The old scheme cut both to the same 250 characters.
    assert f"fact:7:{LONG_PROJECT}:{ALICE}:can_send"[:250] == f"fact:7:{LONG_PROJECT}:{BOB}:can_send"[:250]
    assert fact_key(7, "p", "s", "x" * 200 + "a") != fact_key(7, "p", "s", "x" * 200 + "b")


def test_keys_have_a_fixed_safe_shape():
    for key in (fact_key(1, "p", "s", "q"), fact_key(10**12, LONG_PROJECT, ALICE, "x" * 200), cache_key("ctx", "é 😀")):
        assert re.fullmatch(r"[a-z]+:v2:[0-9a-f]{64}", key), key
        assert len(key) <= CacheEntry._meta.get_field("key").max_length  # type: ignore[operator]


def test_a_key_part_must_be_a_string_or_an_integer():
    with pytest.raises(TypeError):
        cache_key("fact", 1, None)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        cache_key("fact", True)
    with pytest.raises(ValueError):
        cache_key("fact:1", "p")


def test_the_cache_refuses_a_key_joined_from_strings(agent):
    record = assert_fact(agent, permission(BOB, "revoked")).record
    joined = f"fact:{agent.tenant_id}:{LONG_PROJECT}:{BOB}:can_send"[:250]
    with pytest.raises(ValueError):
        store(agent.tenant_id, joined, {"value": "revoked"}, [record], ttl=60)
    assert not CacheEntry.objects.filter(key=joined).exists() and cache.get(joined) is None


def permission(subject: str, value: str, project: str = LONG_PROJECT, predicate: str = "can_send") -> Assertion:
    return Assertion(
        project_id=project,
        subject_id=subject,
        predicate=predicate,
        value=value,
        valid_from=at(10, 1),
        source_canonical_ref=f"acl:{subject}",
        source_revision="1",
    )


def current(client, project: str, subject: str, predicate: str):
    return client.get("/api/v1/facts/current/", {"project_id": project, "subject_id": subject, "predicate": predicate})


def test_bobs_revoked_permission_is_not_answered_from_alices_cached_entry(api, agent):
    assert_fact(agent, permission(ALICE, "allowed"))
    assert_fact(agent, permission(BOB, "revoked"))
    client = api(agent)
    assert current(client, LONG_PROJECT, ALICE, "can_send").json()["value"] == "allowed"  # fills alice's entry
    bob = current(client, LONG_PROJECT, BOB, "can_send").json()
    assert bob["value"] == "revoked" and bob["subject_id"] == BOB
    assert cache.get(fact_key(agent.tenant_id, LONG_PROJECT, BOB, "can_send"))["value"]["value"] == "revoked"


def test_facts_that_differ_only_by_where_a_colon_falls_keep_their_own_answers(api, agent):
    assert_fact(
        agent,
        Assertion(
            project_id="pc:s",
            subject_id="t",
            predicate="q",
            value="one",
            valid_from=at(10, 1),
            source_canonical_ref="a:1",
            source_revision="1",
        ),
    )
    assert_fact(
        agent,
        Assertion(
            project_id="pc",
            subject_id="s:t",
            predicate="q",
            value="two",
            valid_from=at(10, 1),
            source_canonical_ref="a:2",
            source_revision="1",
        ),
    )
    client = api(agent)
    assert current(client, "pc:s", "t", "q").json()["value"] == "one"
    assert current(client, "pc", "s:t", "q").json()["value"] == "two"
    assert current(client, "pc:s", "t", "q").json()["value"] == "one"  # both now served from the cache


def test_an_entry_whose_tuple_does_not_match_is_a_miss(agent):
    """Even if two tuples did share a key, the envelope names its tuple and a mismatch is recomputed."""
    record = assert_fact(agent, permission(BOB, "revoked")).record
    key = fact_key(agent.tenant_id, LONG_PROJECT, BOB, "can_send")
    alices = ["fact", agent.tenant_id, LONG_PROJECT, ALICE, "can_send"]
    cache.set(key, {"key": alices, "value": {"value": "allowed", "memory_id": "mem-alice"}}, 60)
    answer = cached_fact(agent.tenant_id, LONG_PROJECT, BOB, "can_send", lambda: ({"value": "revoked"}, record))
    assert answer == {"value": "revoked"}
    cache.set(key, {"value": "allowed"}, 60)  # the old format, without an envelope
    assert cached_fact(agent.tenant_id, LONG_PROJECT, BOB, "can_send", lambda: ({"value": "revoked"}, record)) == {
        "value": "revoked"
    }


def test_a_deletion_finds_the_fact_key(api, agent):
    record = assert_fact(agent, permission(BOB, "revoked")).record
    assert current(api(agent), LONG_PROJECT, BOB, "can_send").status_code == 200
    key = fact_key(agent.tenant_id, LONG_PROJECT, BOB, "can_send")
    assert cache.get(key) is not None
    scope = Scope(tenant_id=agent.tenant_id, project_id=record.project_id, project_key=LONG_PROJECT, records=[record])
    assert key in CachesStore().find(scope).targets["keys"]  # found by its manifest and by its fact key
    CacheEntry.objects.filter(key=key).delete()
    assert key in CachesStore().find(scope).targets["keys"]  # by the fact key alone
