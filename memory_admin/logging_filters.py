"""Keeps memory content out of the product's own logs (docs/operations.md "What is logged").

A log file is an unmanaged copy: nothing deletes a subject from it. So the records the web server and
the workers write carry route paths, status codes, the ids the product generated and exception types,
never query strings (a subject id or a search text sits there), request bodies, task arguments or
results, or exception messages (a database error quotes the row it refused).
"""

from __future__ import annotations

import logging
import re
import socket
import traceback
from typing import Any

# `?` up to the next space or quote: the query string of a request line (`"GET /facts/?subject=x HTTP/1.1"`),
# of a path in a message (`Not Found: /x?y`) or of a URL.
_QUERY = re.compile(r"\?[^\s\"']*")
QUERY_MARK = "?…"
WITHHELD = "<message not logged: it may quote memory content; LOG_EXCEPTION_MESSAGES=1 logs it>"
# Celery's context keys that hold task arguments, keyword arguments and return values.
_TASK_VALUE_KEYS = ("args", "kwargs", "return_value")


def strip_query(text: str) -> str:
    return _QUERY.sub(QUERY_MARK, text)


def _type_name(exc: BaseException) -> str:
    kind = type(exc)
    return kind.__qualname__ if kind.__module__ == "builtins" else f"{kind.__module__}.{kind.__qualname__}"


def content_free_traceback(exc: BaseException) -> str:
    """The traceback's frames (file, line, function, source line) and each exception's type, without its
    message; chained causes first, as Python prints them."""
    chain: list[BaseException] = []
    current: BaseException | None = exc
    while current is not None and current not in chain:
        chain.append(current)
        current = current.__cause__ or (None if current.__suppress_context__ else current.__context__)
    parts = [
        "Traceback (most recent call last):\n"
        + "".join(traceback.format_tb(item.__traceback__))
        + f"{_type_name(item)}: {WITHHELD}"
        for item in reversed(chain)
    ]
    return "\n\nwhich led to\n\n".join(parts)


class ContentFreeRecords(logging.Filter):
    """Rewrites a record in place (it never drops one): attached to the loggers of the request line
    (django.server), of failed requests (django.request, django.security) and of Celery's task events."""

    def __init__(self, name: str = "", exception_messages: bool = False) -> None:
        super().__init__(name)
        self.exception_messages = exception_messages

    def filter(self, record: logging.LogRecord) -> bool:
        # The message is rendered once here so no handler or formatter sees the query string again.
        message = record.getMessage() if not isinstance(record.args, dict) else None
        if message is not None:
            record.msg, record.args = strip_query(message), ()
        if isinstance(record.args, dict):  # Celery: "Task %(name)s[%(id)s] received" with a context dict
            record.args = self._without_values(record.args)
            data = getattr(record, "data", None)
            if isinstance(data, dict):
                record.data = self._without_values(data)
        # django.request attaches the HttpRequest: a handler that renders it (Django's AdminEmailHandler
        # does) would copy the query, the POST body and the headers.
        if hasattr(record, "request") and not _is_socket(record.request):
            record.request = None
        if record.exc_info and record.exc_info[1] is not None and not self.exception_messages:
            record.exc_text = content_free_traceback(record.exc_info[1])
            # No handler gets the exception object either: the text above is all it may write.
            record.exc_info = None
        return True

    def _without_values(self, context: dict[str, Any]) -> dict[str, Any]:
        cleaned = dict(context)
        for key in _TASK_VALUE_KEYS:
            if key in cleaned:
                cleaned[key] = "<not logged>"
        if self.exception_messages:
            return cleaned
        exc = cleaned.get("exc")
        if isinstance(exc, BaseException):
            cleaned["exc"] = f"{_type_name(exc)}: {WITHHELD}"
        elif isinstance(exc, str):
            # Celery passes the exception's repr, `ValueError('…')`: its type is the leading name.
            kind = re.match(r"[\w.]+", exc)
            cleaned["exc"] = f"{kind.group(0)}: {WITHHELD}" if kind else WITHHELD
        if "traceback" in cleaned:
            cleaned["traceback"] = "<not logged>"
        return cleaned


def _is_socket(value: Any) -> bool:
    """runserver's django.server records carry the connection's socket, which holds no content."""
    return isinstance(value, socket.socket)


class ContentFreeFormatter(logging.Formatter):
    """The same rules for any record reaching the root handler, applied to the text only: the record is
    left as it was for the other handlers (a test's log capture keeps the exception object)."""

    def __init__(self, *args: Any, exception_messages: bool = False, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.exception_messages = exception_messages

    def formatMessage(self, record: logging.LogRecord) -> str:
        record.message = strip_query(record.message)
        return super().formatMessage(record)

    def formatException(self, ei: Any) -> str:
        if self.exception_messages or ei[1] is None:
            return super().formatException(ei)
        return content_free_traceback(ei[1])

    def format(self, record: logging.LogRecord) -> str:
        # logging.Formatter caches the traceback text on the record; this one's must not leak into the
        # cache other handlers read, nor theirs into this output.
        cached = record.exc_text
        if record.exc_info:
            record.exc_text = None
        try:
            return super().format(record)
        finally:
            record.exc_text = cached
