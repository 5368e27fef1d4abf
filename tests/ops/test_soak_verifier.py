"""The soak's verdict (bench/soak_verify.py) on synthetic ledgers: acknowledged writes against the rows found, reads
against their owners, 5xx against the outage windows, and the last line `make soak` prints. The soak itself is
too heavy for CI (`make soak`, docs/operations.md "Faults")."""

from __future__ import annotations

from bench.soak_verify import Failure, Outage, Read, Row, Verdict, Write, check_failures, check_reads, check_writes


def write(tenant: str, revision: str, memory_id: str, *, subject: str = "s-1", deleted: bool = False) -> Write:
    return Write(tenant, "soak", subject, "status", revision, memory_id, 1, deleted)


def row(tenant: str, revision: str, memory_id: str, *, subject: str = "s-1") -> Row:
    return Row(tenant, "soak", subject, "status", revision, memory_id, 1)


def test_every_acknowledged_write_found_once_is_clean() -> None:
    verdict = Verdict()
    writes = [write("acme", "1", "mem-a"), write("globex", "1", "mem-b"), write("acme", "1", "mem-a")]
    check_writes(writes, [row("acme", "1", "mem-a"), row("globex", "1", "mem-b"), row("acme", "2", "mem-c")], verdict)
    # The same write acknowledged twice (an idempotent repeat after a 5xx) counts once.
    assert verdict.acknowledged == 2
    assert (verdict.lost, verdict.duplicated, verdict.cross_tenant) == ([], [], [])
    assert verdict.clean


def test_a_missing_write_is_lost_and_one_stored_twice_is_duplicated() -> None:
    verdict = Verdict()
    writes = [write("acme", "1", "mem-a"), write("acme", "2", "mem-b")]
    check_writes(writes, [row("acme", "2", "mem-b"), row("acme", "2", "mem-c"), row("acme", "3", "mem-d")], verdict)
    assert verdict.lost == [writes[0]]
    assert verdict.duplicated == [("acme", "soak", "s-1", "status", "2")]
    assert not verdict.clean


def test_a_write_answered_with_another_tenants_record_is_cross_tenant() -> None:
    verdict = Verdict()
    check_writes([write("acme", "1", "mem-a")], [row("globex", "9", "mem-a")], verdict)
    assert verdict.cross_tenant == ["write mem-a of acme stored under globex"]
    assert verdict.lost == [Write("acme", "soak", "s-1", "status", "1", "mem-a", 1)]


def test_a_read_of_another_tenants_record_is_cross_tenant_and_a_purged_one_is_not_placed() -> None:
    verdict = Verdict()
    rows = [row("acme", "1", "mem-a"), row("globex", "1", "mem-b")]
    reads = [Read("acme", "mem-a", "search"), Read("acme", "mem-b", "facts/current"), Read("globex", "mem-gone", "x")]
    check_reads(reads, rows, verdict)
    assert verdict.cross_tenant == ["acme read mem-b of globex (facts/current)"]


def test_a_deleted_subjects_write_must_be_gone() -> None:
    verdict = Verdict()
    writes = [
        write("acme", "1", "mem-a", subject="del-1", deleted=True),
        write("acme", "2", "mem-b", subject="del-2", deleted=True),
    ]
    check_writes(writes, [row("acme", "2", "mem-b", subject="del-2")], verdict)
    assert verdict.acknowledged == 2 and verdict.lost == []
    assert verdict.not_purged == [writes[1]]
    assert not verdict.clean


def test_5xx_are_counted_against_the_window_that_holds_them() -> None:
    outages = [Outage("redis", start=100.0, recovered=104.0, grace=10.0), Outage("web", start=150.0, recovered=None)]
    failures = [
        Failure(99.9, 503, "/a"),  # before the first window
        Failure(100.0, 503, "/a"),  # its start
        Failure(114.0, 502, "/b"),  # recovered + grace, the window's last instant
        Failure(114.1, 503, "/b"),  # just after it
        Failure(400.0, 0, "/c"),  # a service never back: its window never ends
    ]
    verdict = Verdict()
    check_failures(failures, outages, verdict)
    assert verdict.per_outage == {"redis": 2, "web": 1}
    assert [f.at for f in verdict.outside] == [99.9, 114.1]


def test_the_last_line_has_the_real_numbers() -> None:
    verdict = Verdict(acknowledged=7, deletions=3, confirmed=2)
    verdict.outside = [Failure(1.0, 500, "/x")]
    assert verdict.last_line() == (
        "soak: acknowledged 7, lost 0, duplicated 0, cross-tenant 0, 5xx outside outages 1, deletions confirmed 2/3"
    )
    assert not verdict.clean
    assert Verdict(acknowledged=7, deletions=3, confirmed=3).clean
