from __future__ import annotations

from rest_framework.exceptions import NotFound
from rest_framework.pagination import Cursor, CursorPagination
from rest_framework.request import Request

_BIGINT_MAX = 2**63 - 1


class NewestFirstCursorPagination(CursorPagination):
    """Cursor pages over the primary key: no COUNT(*), stable under concurrent inserts."""

    ordering = "-id"
    page_size = 50
    page_size_query_param = "page_size"
    max_page_size = 200

    def decode_cursor(self, request: Request) -> Cursor | None:
        """DRF's decoding, plus a check that the position is a key: the client holds the cursor, so a
        forged one (`p=abc`, a number past bigint) is a 404 `not_found` here rather than a 500 from the query."""
        cursor: Cursor | None = super().decode_cursor(request)
        if cursor is None or cursor.position is None:
            return cursor
        position = str(cursor.position)  # a query-string value; the stubs type it int
        if not (position.isascii() and position.isdigit() and int(position) <= _BIGINT_MAX):
            raise NotFound(self.invalid_cursor_message)
        return cursor


class OldestFirstCursorPagination(NewestFirstCursorPagination):
    ordering = "id"
