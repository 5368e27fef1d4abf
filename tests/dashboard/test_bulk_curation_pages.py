"""Bulk expire and exclude on the records page: the selection bar names the verb and the count, the confirmation
names what stops reaching agents, and the change is all or nothing (a record that does not exist or changed since
the confirmation changes nothing, and the message says which)."""

from __future__ import annotations

import re

import pytest
from django.test import Client

from memory_admin.memory.actions import Assertion, assert_fact, expire_record
from memory_admin.memory.models import AuditEvent, MemoryRecord
from tests.support import at
from tests.support.ux_checks import assert_reads_as_people


def signed_in(principal) -> Client:
    client = Client()
    client.force_login(principal)
    return client


@pytest.fixture
def rooms(agent) -> list[str]:
    """Three current records of project-r, by memory_id."""
    ids = []
    for i, room in enumerate(("Room 4B", "Room 2A", "Room 9C")):
        result = assert_fact(
            agent,
            Assertion(
                project_id="project-r",
                subject_id=f"person-{i}",
                predicate="meeting_room",
                value=room,
                valid_from=at(10, 1),
                source_canonical_ref="calendar",
                source_revision="1",
            ),
        )
        ids.append(result.record.memory_id)
    return ids


def _statuses(ids: list[str]) -> list[str]:
    by_id = dict(MemoryRecord.objects.filter(memory_id__in=ids).values_list("memory_id", "status"))
    return [by_id[i] for i in ids]


def test_the_bar_names_the_verb_and_the_count(owner, rooms):
    client = signed_in(owner)
    page = client.get("/records/?project=project-r").content.decode()
    assert "Review…" not in page
    assert re.search(
        r'<button type="submit" name="operation" value="expire"[^>]*>Expire selected records</button>', page
    )
    assert re.search(
        r'<button type="submit" name="operation" value="exclude"[^>]*>Exclude selected records</button>', page
    )
    # Without JavaScript, "Select all on this page" ticks every row server-side and the buttons count them.
    every = client.get("/records/?project=project-r&select=all").content.decode()
    assert ">Expire 3 records</button>" in every and ">Exclude 3 records</button>" in every
    assert "3 selected" in every


def test_the_confirmation_names_what_stops_reaching_agents(owner, rooms):
    response = signed_in(owner).post(
        "/records/bulk/", {"ids": rooms[:2], "operation": "expire", "next": "/records/?project=project-r"}
    )
    assert response.status_code == 200
    page = response.content.decode()
    assert '<h1 id="bulk-title">Expire 2 records</h1>' in page
    assert "<strong>person-0 · meeting_room</strong>: Room 4B" in page
    assert "<strong>person-1 · meeting_room</strong>: Room 2A" in page
    assert "person-2" not in page
    assert "Agents stop getting these values for answering and acting." in page
    assert "as-of questions about the time they held still see them" in page
    assert ">Expire 2 records</button>" in page
    assert_reads_as_people(page, page="the bulk confirmation")
    assert _statuses(rooms) == ["accepted"] * 3  # nothing changes before the confirmation

    exclude = signed_in(owner).post("/records/bulk/", {"ids": rooms[:1], "operation": "exclude"}).content.decode()
    assert '<h1 id="bulk-title">Exclude 1 record</h1>' in exclude
    assert "never handed to an agent again" in exclude


def test_confirming_expires_every_selected_record_through_the_domain(owner, rooms):
    response = signed_in(owner).post(
        "/records/bulk/",
        {
            "ids": rooms[:2],
            "operation": "expire",
            "reason": "The rooms were given back.",
            "confirm": "on",
            "seen-" + rooms[0]: "accepted",
            "seen-" + rooms[1]: "accepted",
            "next": "/records/?project=project-r",
        },
        follow=True,
    )
    page = response.content.decode()
    assert "Expired 2 records (person-0 · meeting_room, person-1 · meeting_room): agents no longer get these" in page
    assert _statuses(rooms) == ["expired", "expired", "accepted"]
    events = AuditEvent.objects.filter(action="record.expired", object_id__in=rooms)
    assert sorted(events.values_list("object_id", "reason")) == sorted(
        (i, "The rooms were given back.") for i in rooms[:2]
    )


def test_a_record_that_does_not_exist_changes_nothing(owner, rooms):
    response = signed_in(owner).post(
        "/records/bulk/",
        {"ids": [*rooms, "mem-no-such-record"], "operation": "exclude", "reason": "x", "confirm": "on"},
        follow=True,
    )
    assert "1 record of the selection no longer exists. Nothing was changed" in response.content.decode()
    assert _statuses(rooms) == ["accepted"] * 3
    assert not AuditEvent.objects.filter(action="record.excluded").exists()


def test_a_record_changed_since_the_confirmation_changes_nothing(owner, rooms):
    expire_record(owner, rooms[1], "Someone else was quicker")
    response = signed_in(owner).post(
        "/records/bulk/",
        {
            "ids": rooms,
            "operation": "exclude",
            "reason": "x",
            "confirm": "on",
            **{f"seen-{i}": "accepted" for i in rooms},
        },
        follow=True,
    )
    assert "Nothing was changed: person-1 · meeting_room is now expired." in response.content.decode()
    assert _statuses(rooms) == ["accepted", "expired", "accepted"]
    assert not AuditEvent.objects.filter(action="record.excluded").exists()


def test_a_record_that_cannot_take_the_operation_changes_nothing(owner, rooms):
    expire_record(owner, rooms[2], "Ended")
    review = signed_in(owner).post("/records/bulk/", {"ids": rooms, "operation": "expire"}, follow=True)
    page = review.content.decode()
    assert "Nothing was changed: person-2 · meeting_room is expired, and only an accepted record can expire." in page
    assert _statuses(rooms) == ["accepted", "accepted", "expired"]


def test_an_empty_or_oversized_selection_says_so(owner, rooms):
    client = signed_in(owner)
    empty = client.post("/records/bulk/", {"operation": "expire"}, follow=True).content.decode()
    assert "Select at least one record first. Nothing was changed." in empty
    many = client.post(
        "/records/bulk/", {"ids": [f"mem-{i}" for i in range(201)], "operation": "expire"}, follow=True
    ).content.decode()
    assert "Select at most 200 records at once. Nothing was changed." in many
    odd = client.post("/records/bulk/", {"ids": rooms, "operation": "delete"}, follow=True).content.decode()
    assert "Choose Expire or Exclude" in odd
    assert _statuses(rooms) == ["accepted"] * 3


def test_a_confirmation_without_a_reason_asks_again(owner, rooms):
    response = signed_in(owner).post(
        "/records/bulk/", {"ids": rooms[:2], "operation": "expire", "reason": " ", "confirm": "on"}
    )
    assert response.status_code == 400
    page = response.content.decode()
    assert "Give a reason; it is audited. Nothing was changed." in page
    assert "Expire 2 records" in page
    assert _statuses(rooms) == ["accepted"] * 3
