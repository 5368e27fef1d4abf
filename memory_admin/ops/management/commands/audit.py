"""`manage.py audit`: the audit chain's operator commands (docs/security.md, "Audit chain").

- `audit verify [--tenant SLUG] [--json]`: walk each tenant's hash chain and its signed checkpoints; exit 0 when
  every chain is intact, 1 naming each broken tenant's first event whose link, commitment or checkpoint does not
  hold (2 for a tenant that does not exist).
- `audit checkpoint [--tenant SLUG]`: sign a checkpoint at the end of each chain that grew since its last one.
- `audit rotate-key`: retire the embedded keyring's signing key (kept for verifying) and create a new one;
  refused when the key comes from the environment (TRUST_SIGNING_KEY), which is rotated there.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Iterator
from typing import Any

from django.core.exceptions import ImproperlyConfigured
from django.core.management.base import BaseCommand, CommandError, CommandParser

from memory_admin.accounts.models import Tenant
from memory_admin.accounts.tenancy import for_each_tenant, tenant_context
from memory_admin.lib import signing
from memory_admin.memory import audit_chain


class Command(BaseCommand):
    help = "The audit log's hash chain: verify it, sign a checkpoint now, or rotate the signing key."

    def add_arguments(self, parser: CommandParser) -> None:
        sub = parser.add_subparsers(dest="subcommand", required=True)
        verify = sub.add_parser("verify", help="check every tenant's chain (or one); exit 1 when one is broken")
        verify.add_argument("--tenant", help="tenant slug (default: every tenant)")
        verify.add_argument("--json", action="store_true", help="one JSON object per tenant, one per line")
        checkpoint = sub.add_parser("checkpoint", help="sign a checkpoint at the end of each chain now")
        checkpoint.add_argument("--tenant", help="tenant slug (default: every tenant)")
        sub.add_parser("rotate-key", help="retire the keyring file's signing key and create a new one")

    def handle(self, *args: Any, subcommand: str, **options: Any) -> None:
        if subcommand == "rotate-key":
            self._rotate()
        elif subcommand == "checkpoint":
            signed = sum(audit_chain.checkpoint_now(t) is not None for t, _ in self._tenants(options.get("tenant")))
            self.stdout.write(f"Signed {signed} checkpoint(s) with key {signing.signing_key().key_id}.")
        else:
            self._verify(options.get("tenant"), as_json=bool(options.get("json")))

    def _tenants(self, slug: str | None) -> Iterator[tuple[int, str]]:
        if slug is None:
            slugs = dict(Tenant.objects.values_list("pk", "slug"))
            for tenant_id in for_each_tenant("audit verify"):
                yield tenant_id, slugs.get(tenant_id, str(tenant_id))
            return
        found = Tenant.objects.filter(slug=slug).values_list("pk", flat=True).first()
        if found is None:
            raise CommandError(f"No tenant {slug!r}.", returncode=2)
        with tenant_context(found):
            yield found, slug

    def _verify(self, slug: str | None, *, as_json: bool) -> None:
        broken = 0
        started = time.perf_counter()
        total = 0
        for tenant_id, name in self._tenants(slug):
            report = audit_chain.verify_tenant(tenant_id)
            total += report.events
            if as_json:
                self.stdout.write(json.dumps({"tenant": name, **report.as_dict()}))
            elif report.broken is None:
                self.stdout.write(f"{name}: intact, {report.events} events, {report.checkpoints} signed checkpoint(s).")
            else:
                where = f"event {report.broken.event_id}" if report.broken.event_id is not None else "the chain's end"
                detail = f" ({report.broken.action}, {report.broken.at.isoformat()})" if report.broken.at else ""
                self.stdout.write(f"{name}: BROKEN at {where}{detail}: {report.broken.problem}.")
            broken += not report.intact
        if not as_json:
            self.stdout.write(f"Checked {total} events in {time.perf_counter() - started:.2f}s.")
        if broken:
            sys.exit(1)

    def _rotate(self) -> None:
        try:
            old, new = signing.rotate_file_keyring()
        except ImproperlyConfigured as exc:
            raise CommandError(
                f"Not rotated: {exc}. Set the new key in TRUST_SIGNING_KEY and list the old one in "
                'TRUST_RETIRED_KEYS (docs/security.md, "Signing keys").'
            ) from None
        self.stdout.write(
            f"Retired signing key {old} (still listed for verifying) and signing with {new} from now on; "
            f"keyring {signing.keyring_path()}."
        )
