"""`POST /api/v1/records/batch/`: many assertions in one request (bulk onboarding), each with its own result.

Parse, call `memory.batch.assert_facts` (the same decision order as `POST /records/`, set-based), render. Each
item is parsed on its own: a malformed item is a 400 result of that item, never of the whole request. The
import command (`manage.py import`) parses its lines with `ItemParser` too.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any, cast

from django.utils import timezone
from drf_spectacular.utils import extend_schema
from rest_framework import serializers, status, viewsets
from rest_framework.request import Request
from rest_framework.response import Response

from memory_admin.accounts.models import principal_of
from memory_admin.api.serializers import REVISION_MAX, AssertFactSerializer, AssertResultSerializer
from memory_admin.lib.api_errors import ErrorSerializer
from memory_admin.memory import validation
from memory_admin.memory.actions import Assertion
from memory_admin.memory.batch import MAX_BATCH_ITEMS, BatchResult, BatchTooLarge, assert_facts
from memory_admin.memory.errors import DomainError, InvalidInput
from memory_admin.memory.models import MemoryRecord
from memory_admin.memory.shapes import payload_columns, record_payload


class ItemParser:
    """Parses items in the body shape of `POST /records/` into assertions, each item on its own: an Assertion, or
    the 400 that item gets (fields named).

    One serializer validates every item (as DRF's ListSerializer does with its child): making a serializer
    deep-copies its declared fields, which for a thousand items cost several times the validation itself.
    """

    def __init__(self) -> None:
        self._body = AssertFactSerializer()
        # The source's length limits, as its serializer declares them (the shortcut checks the same).
        source = cast(serializers.Serializer, self._body.fields["source"])
        self._text_limits = tuple(
            cast(int, cast(serializers.CharField, source.fields[name]).max_length)
            for name in ("canonical_ref", "revision")
        )

    def __call__(self, raw: Any) -> Assertion | DomainError:
        if not isinstance(raw, dict):
            return InvalidInput({"non_field_errors": ["Each item is an object in the shape of POST /records/."]})
        plain = _plain_assertion(raw, self._text_limits)
        if plain is not None:
            return plain
        try:
            data = self._body.run_validation(raw)
        except serializers.ValidationError as exc:
            problems = exc.detail if isinstance(exc.detail, dict) else {"non_field_errors": exc.detail}
            return InvalidInput({str(name): [str(e) for e in _flat(errors)] for name, errors in problems.items()})
        return assertion_of(data)


def _plain_assertion(raw: dict[str, Any], text_limits: tuple[int, ...]) -> Assertion | None:
    """The assertion of an item every field of which the serializer would take exactly as given (the common
    case of an import), or None: then the serializer decides, with its messages. Only a shortcut: it accepts
    nothing the serializer refuses and yields what `assertion_of` would (tests/test_batch_set_based.py compares
    the two on awkward items). Anything unusual (event ids, derived_from, whitespace to trim, a number as text,
    a datetime object) goes to the serializer."""
    source = raw.get("source")
    if type(source) is not dict or not source.keys() <= {"canonical_ref", "revision"}:
        return None
    if "derived_from" in raw:
        return None
    ids = [raw.get(name) for name in _IDENTIFIERS]
    for value, max_length in zip(ids, _IDENTIFIER_LIMITS, strict=True):
        if type(value) is not str or len(value) > max_length or not validation.IDENTIFIER_RE.match(value):
            return None
    ref, revision = source.get("canonical_ref"), source.get("revision")
    for text, max_length in zip((ref, revision), text_limits, strict=True):
        # isprintable: no NUL, surrogate or other character DRF's CharField refuses; no whitespace to trim.
        if (
            type(text) is not str
            or not text
            or len(text) > max_length
            or not text.isprintable()
            or text != text.strip()
        ):
            return None
    value = raw.get("value")
    if value is None:
        return None
    try:
        json.dumps(value)
    except (TypeError, ValueError):
        return None
    valid_from = _plain_datetime(raw.get("valid_from"))
    valid_to = raw.get("valid_to")
    valid_to = None if valid_to is None else _plain_datetime(valid_to)
    expected = raw.get("expected_revision")
    if valid_from is None or (raw.get("valid_to") is not None and valid_to is None):
        return None
    if expected is not None and (type(expected) is not int or not 0 <= expected <= REVISION_MAX):
        return None
    project_id, subject_id, predicate = cast(list[str], ids)
    return Assertion(
        project_id=project_id,
        subject_id=subject_id,
        predicate=predicate,
        value=value,
        valid_from=valid_from,
        valid_to=valid_to,
        source_canonical_ref=cast(str, ref),
        source_revision=cast(str, revision),
        expected_revision=expected,
        derived_from=[],
        event_ids=None,
    )


_IDENTIFIERS = ("project_id", "subject_id", "predicate")
_IDENTIFIER_LIMITS = tuple(validation.IDENTIFIER_MAX_LENGTH[name] for name in _IDENTIFIERS)


def _plain_datetime(value: Any) -> datetime | None:
    """`AwareDateTimeField`'s reading of an ISO 8601 string it accepts, or None."""
    if type(value) is not str:
        return None
    try:
        parsed = datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
    except ValueError:
        return None
    if timezone.is_naive(parsed) or validation.datetime_problems(parsed):
        return None
    return parsed


def _flat(problems: Any) -> list[Any]:
    if isinstance(problems, dict):
        return [f"{key}: {e}" for key, value in problems.items() for e in _flat(value)]
    if isinstance(problems, list):
        return [e for item in problems for e in _flat(item)]
    return [problems]


def assertion_of(data: dict[str, Any]) -> Assertion:
    """An Assertion from a validated `AssertFactSerializer` body."""
    return Assertion(
        project_id=data["project_id"],
        subject_id=data["subject_id"],
        predicate=data["predicate"],
        value=data["value"],
        valid_from=data.get("valid_from") or timezone.now(),  # the API's one default: from the time of the request
        valid_to=data.get("valid_to"),
        source_canonical_ref=data["source"]["canonical_ref"],
        source_revision=data["source"]["revision"],
        expected_revision=data.get("expected_revision"),
        derived_from=[dict(d) for d in data.get("derived_from", [])],
        event_ids=data["source"].get("event_ids"),
    )


class BatchRequestSerializer(serializers.Serializer):
    """Body of `POST /records/batch/`."""

    items = serializers.ListField(
        child=AssertFactSerializer(),
        help_text=f"Up to {MAX_BATCH_ITEMS} assertions, each in the body shape of POST /records/.",
    )
    atomic = serializers.BooleanField(
        default=False,
        help_text="All or nothing: if any item fails, nothing is written (422 batch_not_applied, failing items named).",
    )


class BatchItemSerializer(serializers.Serializer):
    """One item's result: what `POST /records/` would have answered for it, with its status code."""

    index = serializers.IntegerField()
    status = serializers.IntegerField(help_text="201, 200 or 202 as POST /records/; or the error's status.")
    outcome = serializers.CharField(help_text="created, history, unchanged, disputed; or the error's code.")
    record = AssertResultSerializer(required=False, help_text="The record written or repeated (on success).")
    error = ErrorSerializer(required=False, help_text="Why the item was refused (on failure).")


class BatchResultSerializer(serializers.Serializer):
    """Answer of `POST /records/batch/`: a result per item, in order, and the count of each outcome."""

    atomic = serializers.BooleanField()
    applied = serializers.BooleanField()
    counts = serializers.DictField(child=serializers.IntegerField())
    results = BatchItemSerializer(many=True)


class BatchNotAppliedSerializer(ErrorSerializer):
    """422 `batch_not_applied`: an atomic batch in which an item failed; nothing was written."""

    failed = serializers.ListField(child=serializers.IntegerField())
    results = BatchItemSerializer(many=True)


def render(outcome: BatchResult) -> dict[str, Any]:
    """The answer's body (the import command prints from the same result)."""
    ids = [r.result.record.pk for r in outcome.items if r.result is not None]
    # Only what the record format renders, relations as columns (memory.shapes.payload_columns): a thousand
    # records with their project, issuer, successor and superseded rows as model instances cost more to render
    # than the batch cost to apply.
    records = {r.pk: r for r in payload_columns(MemoryRecord.objects.filter(pk__in=ids))}
    results = []
    # One serializer renders every record (making one per item deep-copies its fields each time).
    record_output = AssertResultSerializer()
    for item in outcome.items:
        entry: dict[str, Any] = {"index": item.index, "status": item.status, "outcome": item.outcome}
        if item.result is not None:
            entry["record"] = record_output.to_representation((records[item.result.record.pk], item.result))
        else:
            assert item.error is not None
            entry["error"] = _error_payload(item.error)
        results.append(entry)
    return {"atomic": outcome.atomic, "applied": outcome.applied, "counts": outcome.counts(), "results": results}


def _error_payload(error: DomainError) -> dict[str, Any]:
    payload = error.as_payload()
    current = payload.get("current")
    if isinstance(current, MemoryRecord):  # a 409 revision_conflict carries the current record, as POST /records/
        payload["current"] = record_payload(current)
    return {key: value for key, value in payload.items() if not key.startswith("_")}


class BatchViewSet(viewsets.GenericViewSet):
    """Bulk onboarding; throttled as one write (scope `writes`)."""

    serializer_class = BatchRequestSerializer

    @extend_schema(
        request=BatchRequestSerializer,
        responses={
            200: BatchResultSerializer,
            400: ErrorSerializer,
            413: ErrorSerializer,
            422: BatchNotAppliedSerializer,
        },
        description=(
            f"Assert up to {MAX_BATCH_ITEMS} facts with the rules of POST /records/ (decision order, "
            "compare-and-swap, audit, tombstones, propagation). Each item gets its own result in order; one "
            "failure does not roll back the others unless `atomic` is true (then 422 and nothing is written). "
            "More items: 413 batch_too_large."
        ),
    )
    def create(self, request: Request) -> Response:
        data = request.data
        if not isinstance(data, dict) or not isinstance(data.get("items"), list):
            raise InvalidInput({"items": [f"Send {{'items': [...]}} with up to {MAX_BATCH_ITEMS} assertions."]})
        raw_items = data["items"]
        if len(raw_items) > MAX_BATCH_ITEMS:
            raise BatchTooLarge(
                f"At most {MAX_BATCH_ITEMS} assertions per batch; this one has {len(raw_items)}. Split it.",
                limit=MAX_BATCH_ITEMS,
            )
        if not raw_items:
            raise InvalidInput({"items": ["Send at least one assertion."]})
        atomic = data.get("atomic", False)
        if not isinstance(atomic, bool):
            raise InvalidInput({"atomic": ["Must be true or false."]})
        parse = ItemParser()
        outcome = assert_facts(principal_of(request), [parse(raw) for raw in raw_items], atomic=atomic)
        body = render(outcome)
        if not outcome.applied:
            failed = outcome.failed
            shown = ", ".join(str(i) for i in failed[:20]) + (", ..." if len(failed) > 20 else "")
            return Response(
                {
                    "code": "batch_not_applied",
                    "detail": f"Nothing was written: the batch is atomic and item(s) {shown} failed.",
                    "failed": failed,
                    "results": body["results"],
                },
                status=status.HTTP_422_UNPROCESSABLE_ENTITY,
            )
        return Response(body, status=status.HTTP_200_OK)
