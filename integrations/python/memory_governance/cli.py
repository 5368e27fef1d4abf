"""`memory-governance verify FILE --key PEM`: check a signed deletion certificate or decision receipt offline.

No server and no Django: the document's signature is checked against the public key(s) given (PEM files, as
`GET /api/v1/trust/keys/` lists them: save a key's `public_key_pem` to a file, or save that whole answer and give
it with `--keys`). A decision receipt carries the value it served outside its signature, in `disclosure`, and a
commitment to it inside (`value_commitment`); the verifier checks that the disclosed value matches, so a change to
either is caught, and a receipt whose value was erased by a deletion (no `disclosure`) still verifies.

Exit status: 0 when the document is intact; 1 when it does not verify (the reason is printed); 2 for a file or
key that cannot be read.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from memory_governance.trust import SignatureInvalid, canonical_bytes, digest, load_public_key, verify_document

DISCLOSURE_FIELD = "disclosure"
KINDS = {
    "deletion_certificate": "deletion certificate",
    "decision_receipt": "decision receipt",
}


class CannotRead(Exception):
    """A file or key that is not what it should be (exit 2)."""


def value_commitment(value: Any, nonce: str) -> str:
    """The commitment a receipt signs in place of the value it served: SHA-256 of the canonical form of
    `{"nonce": nonce, "value": value}` (the nonce, random per receipt, keeps a short value from being guessed
    from its hash)."""
    return digest(canonical_bytes({"nonce": nonce, "value": value}))


def check_document(document: Any, public_keys: Sequence[Any]) -> str:
    """Verify a certificate or a receipt; a sentence saying what holds, or SignatureInvalid with the reason."""
    if not isinstance(document, dict):
        raise SignatureInvalid("the file does not hold a JSON object")
    kind = document.get("kind")
    if kind not in KINDS:
        raise SignatureInvalid(f"the document's kind is {kind!r}, not one of {', '.join(sorted(KINDS))}")
    signed = {key: value for key, value in document.items() if key != DISCLOSURE_FIELD}
    key_id = verify_document(signed, public_keys)
    what = KINDS[str(kind)]
    if kind != "decision_receipt":
        return f"intact: {what} {document.get('request_id', '')} signed by {key_id}"
    disclosure = document.get(DISCLOSURE_FIELD)
    name = document.get("receipt_id", "")
    if disclosure is None:
        erased = (
            " (the value it served was erased by a deletion; its commitment stays)"
            if document.get("value_commitment")
            else ""
        )
        return f"intact: {what} {name} signed by {key_id}{erased}"
    if not isinstance(disclosure, dict) or not isinstance(disclosure.get("nonce"), str):
        raise SignatureInvalid("the receipt's disclosure is not an object with a nonce")
    expected = document.get("value_commitment")
    if not isinstance(expected, str):
        raise SignatureInvalid("the receipt discloses a value but signs no commitment to it")
    try:
        actual = value_commitment(disclosure.get("value"), disclosure["nonce"])
    except ValueError as exc:
        raise SignatureInvalid(f"the disclosed value cannot be put in canonical form: {exc}") from None
    if actual != expected:
        raise SignatureInvalid("the disclosed value does not match the value_commitment the receipt signs")
    return f"intact: {what} {name} signed by {key_id}, and its disclosed value matches"


def _read_json(path: str, what: str) -> Any:
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise CannotRead(f"cannot read {what} {path}: {exc}") from None
    try:
        return json.loads(text)
    except ValueError as exc:
        raise CannotRead(f"{what} {path} is not JSON: {exc}") from None


def _keys(pem_paths: Sequence[str], keys_paths: Sequence[str]) -> list[Any]:
    keys = []
    for path in pem_paths:
        try:
            data = Path(path).read_bytes()
        except OSError as exc:
            raise CannotRead(f"cannot read the key {path}: {exc}") from None
        try:
            keys.append(load_public_key(data))
        except ValueError as exc:
            raise CannotRead(f"the key {path}: {exc}") from None
    for path in keys_paths:
        listing = _read_json(path, "the key list")
        entries = listing.get("keys") if isinstance(listing, dict) else None
        if not isinstance(entries, list):
            raise CannotRead(f"{path} is not a key list (an object with `keys`, as /api/v1/trust/keys/ answers)")
        for entry in entries:
            pem = entry.get("public_key_pem") if isinstance(entry, dict) else None
            if not isinstance(pem, str):
                raise CannotRead(f"{path}: a key without public_key_pem")
            try:
                keys.append(load_public_key(pem))
            except ValueError as exc:
                raise CannotRead(f"{path}: {exc}") from None
    if not keys:
        raise CannotRead("give the verifying key: --key public.pem (or --keys keys.json)")
    return keys


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="memory-governance", description="Offline tools for the memory governance service's signed documents."
    )
    commands = parser.add_subparsers(dest="command", required=True)
    verify = commands.add_parser(
        "verify", help="verify a deletion certificate or a decision receipt (JSON) against a public key"
    )
    verify.add_argument("file", help="the certificate or receipt, as downloaded (JSON)")
    verify.add_argument("--key", action="append", default=[], help="a public key as PEM (repeatable)")
    verify.add_argument("--keys", action="append", default=[], help="a saved /api/v1/trust/keys/ answer")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        keys = _keys(args.key, args.keys)
        document = _read_json(args.file, "the document")
    except CannotRead as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except ImportError:
        print(
            "error: verifying needs the `cryptography` package: pip install 'memory-governance-client[verify]'",
            file=sys.stderr,
        )
        return 2
    try:
        print(check_document(document, keys))
    except SignatureInvalid as exc:
        print(f"NOT VALID: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":  # python -m memory_governance.cli
    sys.exit(main())
