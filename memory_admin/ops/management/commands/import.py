"""`manage.py import FILE --tenant T --as PRINCIPAL`: bulk onboarding from a JSONL file.

Each line is one assertion in the body shape of `POST /api/v1/records/` (an export line works too: the record
format's extra fields are ignored). Lines are sent in batches to `memory.batch.assert_facts`, the function
behind `POST /api/v1/records/batch/`, so every rule of one assertion applies. Each line is read as bytes and parsed
by the API's guarded JSON reader (`lib.parsers.loads_guarded`: UTF-8, depth, NUL, duplicate keys). A bad line is
reported with its number and reason, never its values, and does not stop the others; with `--atomic` each batch
is all or nothing, and the import stops at the first batch that was not applied (the lines before it are in, none
after it). A batch the database refuses as a whole is retried line by line, so only the offending line is lost.
(The module is named `import`, a Python keyword: Django loads commands with import_module, which accepts it.)
"""

from __future__ import annotations

import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import DatabaseError
from tqdm import tqdm

from memory_admin.accounts.models import Principal
from memory_admin.accounts.tenancy import tenant_context
from memory_admin.lib.parsers import BadJSON, loads_guarded
from memory_admin.memory import planner_stats
from memory_admin.memory.actions import Assertion
from memory_admin.memory.batch import MAX_BATCH_ITEMS, ItemResult, assert_facts
from memory_admin.memory.errors import DomainError, InvalidInput
from memory_admin.shapes.items import ItemParser

DEFAULT_BATCH_SIZE = 500


class Command(BaseCommand):
    help = "Import facts from a JSONL file (one POST /records/ body per line), in batches, with a progress bar."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("file", help="the JSONL file ('-' reads standard input)")
        parser.add_argument("--tenant", required=True, help="tenant slug")
        parser.add_argument("--as", dest="principal", required=True, help="name of the principal asserting")
        parser.add_argument("--atomic", action="store_true", help="each batch all or nothing; stop at a failed one")
        parser.add_argument(
            "--batch-size", type=int, default=DEFAULT_BATCH_SIZE, help=f"lines per batch (1-{MAX_BATCH_ITEMS})"
        )
        parser.add_argument("--no-progress", action="store_true", help="no progress bar")

    def handle(
        self,
        *args: Any,
        file: str,
        tenant: str,
        principal: str,
        atomic: bool,
        batch_size: int,
        no_progress: bool,
        **_: Any,
    ) -> None:
        if not 1 <= batch_size <= MAX_BATCH_ITEMS:
            raise CommandError(f"--batch-size must be between 1 and {MAX_BATCH_ITEMS}.")
        who = Principal.objects.filter(tenant__slug=tenant, name=principal).select_related("tenant").first()
        if who is None:
            raise CommandError(f"No principal {principal!r} in tenant {tenant!r}.")
        if file != "-" and not Path(file).is_file():
            raise CommandError(f"No file {file!r}.")
        total = None if file == "-" else _count_lines(Path(file))
        counts: Counter[str] = Counter()
        failed_lines = 0
        # Row-level security: everything this command reads and writes is the tenant's (accounts.tenancy).
        with tenant_context(who.tenant_id), _open(file) as handle:
            bar = tqdm(total=total, unit="line", disable=no_progress, file=sys.stderr, dynamic_ncols=True)
            try:
                for batch in _batches(handle, batch_size):
                    line_numbers = [n for n, _ in batch]
                    applied, results = _apply(who, batch, atomic)
                    for n, item, refused in results:
                        counts[item.outcome] += 1
                        if refused and item.error is not None:
                            failed_lines += 1
                            self.stderr.write(f"line {n}: {_reason(item.error)}")
                    bar.update(len(batch))
                    if not applied:
                        bar.close()
                        self._summary(file, counts)
                        raise CommandError(
                            f"Stopped: the batch of lines {line_numbers[0]}-{line_numbers[-1]} was not applied "
                            f"(--atomic). Lines before {line_numbers[0]} are imported; fix and rerun from there."
                        )
            finally:
                bar.close()
        self._summary(file, counts)
        analyzed = planner_stats.refresh()  # the queued refreshes may not have run yet: now, before returning
        if analyzed:
            self.stdout.write(f"Planner statistics refreshed: {', '.join(analyzed)}")
        if failed_lines:
            raise CommandError(f"{failed_lines} line(s) were refused; see above.")

    def _summary(self, file: str, counts: Counter[str]) -> None:
        parts = ", ".join(f"{outcome}: {n}" for outcome, n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))
        self.stdout.write(f"Imported {file}: {sum(counts.values())} line(s) — {parts or 'nothing'}")


def _apply(
    who: Principal, batch: list[tuple[int, Assertion | DomainError]], atomic: bool
) -> tuple[bool, list[tuple[int, ItemResult, bool]]]:
    """One batch through `assert_facts`: whether it was applied, and (line number, result, refused) per line. A
    batch the database refuses as a whole (an error no check before it caught; its transaction rolled back) is
    retried line by line, unless --atomic, so the other lines are not lost with it. The error is named by its
    class only: its message may quote the lines' values."""
    try:
        result = assert_facts(who, [item for _, item in batch], atomic=atomic)
    except DatabaseError as exc:
        if atomic or len(batch) == 1:
            refused = InvalidInput({"line": [f"The database refused it ({type(exc).__name__})."]})
            return not atomic, [(n, ItemResult(index=i, error=refused), True) for i, (n, _) in enumerate(batch)]
        results = []
        for single in batch:
            results += _apply(who, [single], atomic=False)[1]
        return True, results
    refused_indexes = set(result.failed)
    return result.applied, [
        (n, item, item.index in refused_indexes) for (n, _), item in zip(batch, result.items, strict=True)
    ]


def _open(file: str) -> Any:
    if file == "-":
        return _Stdin()
    return open(file, "rb")  # bytes: each line is decoded by the guarded parser; closed by handle's with block


class _Stdin:
    def __enter__(self) -> IO[bytes]:
        return sys.stdin.buffer

    def __exit__(self, *exc: object) -> None:
        return None


def _count_lines(path: Path) -> int:
    with path.open("rb") as handle:
        return sum(1 for _ in handle)


def _batches(handle: IO[bytes], size: int) -> Iterator[list[tuple[int, Assertion | DomainError]]]:
    """(line number, parsed item) in batches of `size`; blank lines are skipped."""
    batch: list[tuple[int, Assertion | DomainError]] = []
    parse = ItemParser()
    for number, line in enumerate(handle, start=1):
        if not line.strip():
            continue
        batch.append((number, _parse_line(parse, line)))
        if len(batch) == size:
            yield batch
            batch = []
    if batch:
        yield batch


def _parse_line(parse: ItemParser, line: bytes) -> Assertion | DomainError:
    try:
        raw = loads_guarded(line)
    except BadJSON as exc:
        return InvalidInput({"line": [str(exc)]})
    return parse(raw)


def _reason(error: DomainError) -> str:
    text = f"{error.code} ({error.status}): {error.detail}"
    fields = error.extra.get("errors")
    if isinstance(fields, dict):
        text += " " + "; ".join(f"{name}: {' '.join(str(p) for p in problems)}" for name, problems in fields.items())
    return text
