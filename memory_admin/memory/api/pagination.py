from __future__ import annotations

from rest_framework.pagination import CursorPagination


class NewestFirstCursorPagination(CursorPagination):
    """Cursor pages over the primary key: no COUNT(*), stable under concurrent inserts."""

    ordering = "-id"
    page_size = 50
    page_size_query_param = "page_size"
    max_page_size = 200


class OldestFirstCursorPagination(NewestFirstCursorPagination):
    ordering = "id"
