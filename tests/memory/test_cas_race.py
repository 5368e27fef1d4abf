"""Many writers with the same expected_revision: exactly one wins, the rest get 409."""

from __future__ import annotations

import contextvars
import threading

import pytest
from django.db import connection

from memory_admin.memory.actions import assert_fact
from memory_admin.memory.errors import DisputeOpen, RevisionConflict
from memory_admin.memory.models import MemoryRecord
from tests.support import DEADLINE, at, deadline

WRITERS = 24


@pytest.mark.django_db(transaction=True)
def test_concurrent_writers_with_the_same_expected_revision_yield_one_winner(agent):
    """Every writer read revision 1 and sends a newer source revision (r101..r124).

    Exactly one becomes revision 2. A later writer whose source revision is newer than the winner's
    must get 409 (its expected_revision is stale); one whose revision is older than the winner's is a
    late import of an older revision and lands as history (rule 3 orders it before the CAS step).
    """
    assert_fact(agent, deadline("2026-10-30T17:00+09:00", "r17", at(10, 20)))
    barrier = threading.Barrier(WRITERS)
    outcomes: dict[int, str] = {}
    lock = threading.Lock()

    def write(i: int) -> None:
        try:
            barrier.wait()
            result = assert_fact(
                agent, deadline(f"2026-11-{i:02d}T17:00+09:00", f"r{100 + i}", at(10, 22), expected_revision=1)
            ).outcome.value
        except RevisionConflict:
            result = "conflict"
        except Exception as exc:  # anything else is a failure of the rule
            result = f"error: {exc!r}"
        finally:
            connection.close()
        with lock:
            outcomes[i] = result

    threads = [threading.Thread(target=contextvars.copy_context().run, args=(write, i + 1)) for i in range(WRITERS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    winners = [i for i, outcome in outcomes.items() if outcome == "created"]
    assert len(winners) == 1, outcomes
    winner = winners[0]
    for i, outcome in outcomes.items():
        if i > winner:
            assert outcome == "conflict", (i, winner, outcomes)
        elif i < winner:
            assert outcome in {"conflict", "history"}, (i, winner, outcomes)
    facts = MemoryRecord.objects.filter(subject_id=DEADLINE["subject_id"])
    head = facts.get(is_head=True)
    assert head.revision == 2 and head.source_revision == f"r{100 + winner}"  # no lost update
    assert facts.filter(status="accepted").count() == 1
    assert facts.filter(entered_current=True).count() == 2


@pytest.mark.django_db(transaction=True)
def test_concurrent_first_assertions_of_one_fact_store_one_current_record(agent):
    """Distinct equal-rank sources race to assert a new fact: one becomes current, the next one
    disagrees and opens a dispute, and every later writer is told the fact is disputed."""
    barrier = threading.Barrier(WRITERS)
    outcomes: list[str] = []
    lock = threading.Lock()

    def write(i: int) -> None:
        try:
            barrier.wait()
            result = assert_fact(agent, deadline(f"2026-11-{i:02d}", "r1", at(10, 20), ref=f"chat:{i}")).outcome.value
        except DisputeOpen:
            result = "dispute_open"
        except Exception as exc:
            result = f"error: {exc!r}"
        finally:
            connection.close()
        with lock:
            outcomes.append(result)

    threads = [threading.Thread(target=contextvars.copy_context().run, args=(write, i + 1)) for i in range(WRITERS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert sorted(set(outcomes)) == ["created", "dispute_open", "disputed"], outcomes
    assert outcomes.count("created") == 1
    assert outcomes.count("disputed") == 1
    facts = MemoryRecord.objects.filter(subject_id=DEADLINE["subject_id"])
    assert facts.count() == 2
    assert facts.filter(is_head=True).count() == 1
    assert facts.filter(status="disputed").count() == 2


@pytest.mark.postgres_only(reason="the exclusion constraint on one current belief per fact key and valid instant")
def test_the_database_refuses_two_accepted_records_for_one_valid_instant(agent):
    from django.db import IntegrityError, transaction

    first = assert_fact(agent, deadline("2026-10-30", "r17", at(10, 20))).record
    clash = MemoryRecord(
        tenant=first.tenant,
        project=first.project,
        subject_id=first.subject_id,
        predicate=first.predicate,
        value="2026-11-02",
        status="accepted",
        valid_from=at(10, 25),
        recorded_from=at(10, 25),
        revision=2,
        source_canonical_ref="x",
        source_revision="1",
        issuer=agent,
        entered_current=True,
    )
    with pytest.raises(IntegrityError), transaction.atomic():
        clash.save()
        with connection.cursor() as cursor:
            cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")
