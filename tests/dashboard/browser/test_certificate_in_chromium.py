"""The signed deletion certificate in a real browser: compliance downloads it from the deletion page once the
purge is confirmed, it verifies, and the printable report shows its key and signature."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from playwright.sync_api import Page, expect

from deletion import service
from deletion.models import DeletionRequest
from memory_admin.accounts.models import Principal
from memory_admin.lib import signing
from tests.support import run_purge
from tests.support.browser import sign_in

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_compliance_downloads_a_certificate_that_verifies(page: Page, tmp_path: Path) -> None:
    officer = Principal.objects.get(username="compliance@demo")
    filed = service.request_deletion(
        officer, project_id="project-a", scope={"memory_ids": ["mem-sato-room"]}, reason="The person asked."
    )
    assert isinstance(filed, DeletionRequest)
    run_purge(filed)
    sign_in(page, "compliance@demo")
    page.goto(f"/deletions/{filed.public_id}/")
    link = page.get_by_test_id("certificate")
    expect(link).to_have_text("Download certificate")
    with page.expect_download() as download:
        link.click()
    saved = tmp_path / "certificate.json"
    download.value.save_as(saved)
    certificate = json.loads(saved.read_text(encoding="utf-8"))
    assert certificate["request_id"] == filed.public_id and signing.verify(certificate)

    page.goto(f"/deletions/{filed.public_id}/report/")
    shown = page.get_by_test_id("certificate-signature")
    expect(shown).to_contain_text(certificate["key_id"])
    expect(shown).to_contain_text(certificate["signature"])
