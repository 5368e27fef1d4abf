"""`make run`'s first run (issue 34, item 5): the story and a token first, in one process that says each step;
the synthetic volume afterwards, in resumable chunks, with its progress on the overview."""

from __future__ import annotations

import stat
from io import StringIO
from pathlib import Path

import pytest
from django.core.cache import cache
from django.core.management import call_command
from django.test import Client

from memory_admin.accounts.models import Principal, Tenant
from memory_admin.accounts.tenancy import tenant_context
from memory_admin.demo import TENANT, VOLUME_CHUNK, seed_volume, volume_progress, volume_progress_key
from memory_admin.memory.models import MemoryRecord

pytestmark = pytest.mark.django_db

SYNTHETIC = {"project__key__in": ["project-b", "project-c", "project-d"]}


def _synthetic() -> list[tuple[str, str, str, str]]:
    return sorted(
        MemoryRecord.objects.filter(**SYNTHETIC).values_list("subject_id", "predicate", "source_revision", "value")
    )


def test_prepare_demo_says_each_step_and_hands_the_token_over_in_a_private_file(tmp_path: Path) -> None:
    token_file = tmp_path / "token"
    out = StringIO()
    call_command("prepare_demo", "--token-file", str(token_file), stdout=out)
    said = out.getvalue()
    assert [f"[{n}/4]" in said for n in range(1, 5)] == [True] * 4
    assert stat.S_IMODE(token_file.stat().st_mode) == 0o600
    token = token_file.read_text().strip()
    # The story is there, the volume is not (it loads in the background), and the token is the agent's.
    assert MemoryRecord.objects.filter(memory_id="mem-deadline-002").exists()
    assert not MemoryRecord.objects.filter(**SYNTHETIC).exists()
    response = Client().get("/api/v1/records/?project_id=project-a", headers={"Authorization": f"Bearer {token}"})
    assert response.status_code == 200 and response.json()["results"]


def test_a_volume_load_that_stopped_resumes_to_what_one_load_writes() -> None:
    subjects = 2 * VOLUME_CHUNK + 7
    call_command("seed_demo", "--story-only", stdout=StringIO())
    tenant = Tenant.objects.get(slug=TENANT)
    with tenant_context(tenant.pk):
        whole = seed_volume(subjects=subjects)
    expected = _synthetic()
    assert whole == len(expected) > subjects

    # Start again from nothing, stop after the first chunk, then resume.
    MemoryRecord.objects.filter(**SYNTHETIC).delete()
    stopped: list[int] = []

    def stop_after_first(done: int, total: int) -> None:
        stopped.append(done)
        raise KeyboardInterrupt

    with tenant_context(tenant.pk), pytest.raises(KeyboardInterrupt):
        seed_volume(subjects=subjects, on_chunk=stop_after_first)
    assert stopped == [VOLUME_CHUNK]
    assert {s for s, *_ in _synthetic()} == {f"item-{i:05d}" for i in range(VOLUME_CHUNK)}
    with tenant_context(tenant.pk):
        resumed = seed_volume(subjects=subjects)
    assert _synthetic() == expected
    assert resumed == len(expected) - len([r for r in expected if int(r[0][5:]) < VOLUME_CHUNK])
    # Loading again writes nothing.
    with tenant_context(tenant.pk):
        assert seed_volume(subjects=subjects) == 0


def test_the_overview_shows_the_volume_loading_and_stops_when_it_is_done() -> None:
    call_command("seed_demo", "--story-only", stdout=StringIO())
    owner = Principal.objects.get(username=f"owner@{TENANT}")
    client = Client()
    client.force_login(owner)
    tenant_id = owner.tenant_pk
    cache.set(volume_progress_key(tenant_id), {"done": 100, "total": 1500})
    try:
        assert volume_progress(tenant_id) == {"done": 100, "total": 1500}
        page = client.get("/").content.decode()
        assert 'data-testid="demo-volume"' in page and "100 of 1500 synthetic subjects" in page
        cache.set(volume_progress_key(tenant_id), {"done": 1500, "total": 1500})
        assert volume_progress(tenant_id) is None
        assert 'data-testid="demo-volume"' not in client.get("/").content.decode()
    finally:
        cache.delete(volume_progress_key(tenant_id))


def test_seed_demo_refuses_a_negative_volume() -> None:
    from django.core.management.base import CommandError

    with pytest.raises(CommandError, match="--subjects"):
        call_command("seed_demo", "--subjects", "-1", stdout=StringIO())
