"""`POST /api/v1/records/batch/`: many assertions in one request (bulk onboarding), each with its own result.

Parse, call `memory.batch.assert_facts` (the same decision order as `POST /records/`, set-based), render. Each
item is parsed on its own: a malformed item is a 400 result of that item, never of the whole request. The
import command (`manage.py import`) parses its lines with the same `shapes.items.ItemParser`.
"""

from __future__ import annotations

from typing import Any, ClassVar

from drf_spectacular.utils import extend_schema
from rest_framework import serializers, status, viewsets
from rest_framework.request import Request
from rest_framework.response import Response

from memory_admin.accounts.models import principal_of
from memory_admin.lib.api_errors import ErrorSerializer
from memory_admin.memory.batch import MAX_BATCH_ITEMS, BatchResult, BatchTooLarge, assert_facts
from memory_admin.memory.errors import DomainError, InvalidInput
from memory_admin.memory.models import MemoryRecord
from memory_admin.memory.shapes import payload_columns, record_payload
from memory_admin.shapes.items import ItemParser
from memory_admin.shapes.records import AssertFactSerializer, AssertResultSerializer


class BatchRequestSerializer(serializers.Serializer):
    """Body of `POST /records/batch/`."""

    schema_properties: ClassVar[dict[str, Any]] = {"items": {"minItems": 1, "maxItems": MAX_BATCH_ITEMS}}

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
