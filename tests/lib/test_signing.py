"""Signed documents: the server signs with its keyring, the client package's verifier checks, any changed byte
fails, a retired key still verifies what it signed, and a malformed key in the environment is refused."""

from __future__ import annotations

import json

import pytest
from django.core.exceptions import ImproperlyConfigured
from memory_governance.trust import SignatureInvalid, canonical_bytes, load_public_key, verify_document

from memory_admin.lib import signing


@pytest.fixture
def keyring(tmp_path, settings, monkeypatch):
    monkeypatch.delenv("TRUST_SIGNING_KEY", raising=False)
    settings.VAR_DIR = tmp_path
    signing.reset_cache()
    yield tmp_path / "trust" / "keyring.json"
    signing.reset_cache()


def test_a_signed_document_verifies_offline_with_the_published_key_and_fails_on_any_change(keyring):
    signed = signing.sign_document({"kind": "test", "count": 3, "name": "Åsa · 東京"})
    assert keyring.stat().st_mode & 0o777 == 0o600
    public = [load_public_key(key.public_key_pem()) for key in signing.verifying_keys()]
    assert verify_document(signed, public) == signed["key_id"]

    for field, value in (("count", 4), ("name", "Asa · 東京"), ("extra", "x")):
        tampered = dict(signed, **{field: value})
        with pytest.raises(SignatureInvalid, match="does not match"):
            verify_document(tampered, public)
    with pytest.raises(SignatureInvalid, match="not among the keys"):
        verify_document(dict(signed, key_id="ed25519:0000000000000000"), public)
    with pytest.raises(SignatureInvalid, match="no signature"):
        verify_document({k: v for k, v in signed.items() if k != "signature"}, public)


def test_the_canonical_form_is_sorted_compact_utf8_and_refuses_floats():
    assert canonical_bytes({"b": 1, "a": "é", "signature": "x"}) == '{"a":"é","b":1}'.encode()
    with pytest.raises(ValueError, match="floating-point"):
        canonical_bytes({"a": 1.5})


def test_after_a_rotation_old_documents_still_verify_and_new_ones_use_the_new_key(keyring):
    before = signing.sign_document({"n": 1})
    old_id, new_id = signing.rotate_file_keyring()
    after = signing.sign_document({"n": 2})
    assert (before["key_id"], after["key_id"]) == (old_id, new_id) and old_id != new_id
    assert signing.verify(before) == old_id
    assert signing.verify(after) == new_id
    listed = [key.as_dict() for key in signing.verifying_keys()]
    assert [key["key_id"] for key in listed] == [new_id, old_id]
    assert listed[1]["valid_to"] is not None and listed[0]["valid_to"] is None
    assert json.loads(keyring.read_text())["retired"][0]["valid_to"] == listed[1]["valid_to"]


@pytest.mark.parametrize(
    ("variable", "value", "message"),
    [
        ("TRUST_SIGNING_KEY", "not a pem", "not an unencrypted PEM private key"),
        ("TRUST_RETIRED_KEYS", "{", "not JSON"),
        ("TRUST_RETIRED_KEYS", '[{"valid_to": "2026-01-01"}]', "needs public_key_pem"),
        ("TRUST_SIGNING_KEY_VALID_FROM", "yesterday", "not an ISO 8601 time"),
    ],
)
def test_a_malformed_key_setting_is_refused_with_its_name(keyring, monkeypatch, variable, value, message):
    monkeypatch.setenv("TRUST_SIGNING_KEY", signing._pem(signing.Ed25519PrivateKey.generate()))
    monkeypatch.setenv(variable, value)
    signing.reset_cache()
    with pytest.raises(ImproperlyConfigured, match=message):
        signing.signing_key()


def test_a_key_from_the_environment_signs_and_cannot_be_rotated_from_the_command(keyring, monkeypatch):
    private = signing.Ed25519PrivateKey.generate()
    monkeypatch.setenv("TRUST_SIGNING_KEY", signing._pem(private).replace("\n", "\\n"))
    signing.reset_cache()
    signed = signing.sign_document({"n": 1})
    assert signing.verify(signed) == signing.key_id_for(private.public_key())
    assert not keyring.exists()
    with pytest.raises(ImproperlyConfigured, match="rotate it in the environment"):
        signing.rotate_file_keyring()
