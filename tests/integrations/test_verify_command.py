"""The client package declares `memory-governance` as a console script running `memory_governance.cli:main`, and
that entry point verifies without Django: what the script runs, called as the script would call it."""

from __future__ import annotations

import base64
import importlib
import json
import tomllib

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from tests.support import ROOT


def entry_point():
    project = tomllib.loads((ROOT / "integrations" / "python" / "pyproject.toml").read_text(encoding="utf-8"))
    module, _, name = project["project"]["scripts"]["memory-governance"].partition(":")
    assert "cryptography" in " ".join(project["project"]["optional-dependencies"]["verify"])
    return getattr(importlib.import_module(module), name)


def test_the_console_script_verifies_a_document_signed_with_the_key_given(tmp_path, capsys):
    from memory_governance.trust import canonical_bytes, key_id_for

    private = Ed25519PrivateKey.generate()
    document = {"kind": "deletion_certificate", "request_id": "del-1", "algorithm": "ed25519"}
    document["key_id"] = key_id_for(private.public_key())
    document["signature"] = base64.b64encode(private.sign(canonical_bytes(document))).decode("ascii")
    (tmp_path / "c.json").write_text(json.dumps(document), encoding="utf-8")
    (tmp_path / "k.pem").write_bytes(private.public_key().public_bytes(Encoding.PEM, PublicFormat.SubjectPublicKeyInfo))
    main = entry_point()
    assert main(["verify", str(tmp_path / "c.json"), "--key", str(tmp_path / "k.pem")]) == 0
    assert "intact" in capsys.readouterr().out
    (tmp_path / "c.json").write_text(json.dumps({**document, "request_id": "del-2"}), encoding="utf-8")
    assert main(["verify", str(tmp_path / "c.json"), "--key", str(tmp_path / "k.pem")]) == 1
    assert "NOT VALID" in capsys.readouterr().err
    assert main(["verify", str(tmp_path / "c.json"), "--key", str(tmp_path / "missing.pem")]) == 2
