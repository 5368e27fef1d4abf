"""What a refused or failed request looks like at each door: JSON `{"code", "detail"}` under /api/, a page elsewhere.

DRF's exception handler shapes the errors raised inside API views; this module covers the rest, which
Django answers itself before or after a view runs: a URL that matches nothing (404), an unhandled
exception (500), a SuspiciousOperation (400), and characters in a URL that no field may hold.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable

from django.conf import settings
from django.core.exceptions import SuspiciousOperation
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseBadRequest, HttpResponseNotFound, JsonResponse
from django.template import loader
from django.urls import Resolver404
from django.views import defaults

API_PREFIX = "/api/"

# A path never legitimately holds a control character; query strings and form fields may carry tab,
# newline and carriage return (text typed into a search box), but never NUL, which PostgreSQL text
# cannot store and which used to surface as a 500 from whichever query first met it.
_PATH_FORBIDDEN = re.compile("[\x00-\x1f\x7f]")
_VALUE_FORBIDDEN = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")


def is_api(request: HttpRequest) -> bool:
    return request.path_info.startswith(API_PREFIX)


def api_error(code: str, detail: str, status: int) -> JsonResponse:
    return JsonResponse({"code": code, "detail": detail}, status=status)


def _holds_forbidden(pairs: Iterable[tuple[str, list[str]]]) -> bool:
    for key, values in pairs:
        if _VALUE_FORBIDDEN.search(key) or any(_VALUE_FORBIDDEN.search(v) for v in values):
            return True
    return False


class RejectControlCharactersMiddleware:
    """Refuse, before any view or query runs, a URL (path or query string) holding a control character.

    One check for every endpoint of both doors, so no view, filter or lookup has to remember it: the API
    answers a JSON 400 `invalid_characters`, the dashboard a 400 page. Form bodies posted to the
    dashboard are checked too (Django's form fields already refuse NUL; this covers raw `request.POST`
    reads). API bodies are JSON and checked by the API's parser.
    """

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        where = self._offending_part(request)
        if where is not None:
            detail = f"The request's {where} holds a control character (such as NUL) that no field may contain."
            if is_api(request):
                return api_error("invalid_characters", detail, 400)
            return HttpResponseBadRequest(loader.render_to_string("400.html", {"detail": detail}))
        return self.get_response(request)

    @staticmethod
    def _offending_part(request: HttpRequest) -> str | None:
        if _PATH_FORBIDDEN.search(request.path_info) or _PATH_FORBIDDEN.search(request.path):
            return "path"
        if _holds_forbidden(request.GET.lists()):
            return "query string"
        if any(_VALUE_FORBIDDEN.search(v) for v in request.COOKIES.values()):
            return "cookies"
        content_type = request.content_type or ""
        if (
            request.method == "POST"
            and not is_api(request)
            and content_type in {"application/x-www-form-urlencoded", "multipart/form-data"}
            and _holds_forbidden(request.POST.lists())
        ):
            return "form"
        return None


class LengthRequiredMiddleware:
    """Answer 411 to a request that frames its body with Transfer-Encoding (chunked) instead of Content-Length.

    Django reads a body by its Content-Length, and gunicorn's workers pass a chunked body on without one, so such a
    POST used to be read as empty (a 400 "field required", or MCP's -32700) while the client believed it had sent a
    body. Every client this product documents (the Python client, httpx, the MCP SDK, curl with --data) sends
    Content-Length; a body streamed with no length is refused here, by one rule, before any view reads it, with the
    fix in the answer. (A request that sends both headers is refused too: the two framings could disagree, which
    is how request smuggling starts.)
    """

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        if not request.META.get("HTTP_TRANSFER_ENCODING"):
            return self.get_response(request)
        detail = (
            "The request body is sent with Transfer-Encoding (chunked), which this server does not read; "
            "send it with a Content-Length header instead."
        )
        if is_api(request) or request.path_info.startswith("/mcp"):
            response: HttpResponse = JsonResponse(
                {"code": "length_required", "detail": detail, "next_step": "Resend the body with Content-Length."},
                status=411,
            )
        else:
            response = HttpResponse(loader.render_to_string("400.html", {"detail": detail}), status=411)
        # No "Connection: close" from here (a WSGI application may not set hop-by-hop headers): gunicorn's sync
        # workers close every connection after its answer, so the unread chunks are never taken for a request.
        return response


class ProductErrorPagesMiddleware:
    """Under DEBUG (`make run`), answer with the product's 400, 404 and 500 pages, never Django's technical ones.

    With DEBUG on, Django skips handler404/400/500: an unknown URL shows the whole URL configuration, a view's
    Http404 its internal message, a failure a traceback with settings. Those are developer pages, and `make run`
    is the first thing every user meets. A view's Http404 is answered here (with its message, when it is one
    written for people); an unknown URL, a SuspiciousOperation and an unhandled exception, which Django turns
    into a technical page before any middleware sees them, are recognised by that page's own wording and
    replaced. The failure is logged by Django as before. DEBUG_TECHNICAL_ERRORS=1 keeps Django's pages.
    """

    # Every technical page (404 and 500) says why it is shown; no page of the product says this.
    TECHNICAL_MARK = b"DEBUG = True</code>"

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    @staticmethod
    def _active() -> bool:
        return bool(settings.DEBUG) and not settings.DEBUG_TECHNICAL_ERRORS

    def __call__(self, request: HttpRequest) -> HttpResponse:
        response = self.get_response(request)
        if not self._active() or response.status_code not in (400, 404, 500) or response.streaming:
            return response
        if not response.get("Content-Type", "").startswith("text/html") or self.TECHNICAL_MARK not in response.content:
            return response
        if response.status_code == 404:
            return page_not_found(request, Resolver404())
        if response.status_code == 400:
            return bad_request(request, SuspiciousOperation())
        return server_error(request)

    def process_exception(self, request: HttpRequest, exception: Exception) -> HttpResponse | None:
        if self._active() and isinstance(exception, Http404):
            return page_not_found(request, exception)
        return None


# --- handler400/403/404/500 (set in memory_admin/urls.py) ----------------------------------------


def bad_request(request: HttpRequest, exception: Exception) -> HttpResponse:
    if is_api(request):
        return api_error("bad_request", "The request could not be understood.", 400)
    return defaults.bad_request(request, exception)


def permission_denied(request: HttpRequest, exception: Exception) -> HttpResponse:
    if is_api(request):
        return api_error("forbidden", "You may not do this.", 403)
    return defaults.permission_denied(request, exception)


def page_not_found(request: HttpRequest, exception: Exception) -> HttpResponse:
    if is_api(request):
        return api_error("not_found", "No such endpoint or object.", 404)
    # A view's Http404 says what is missing in people's words ("No such fact."); an unmatched URL (Resolver404)
    # carries only the patterns it tried, which are not shown.
    detail = ""
    if isinstance(exception, Http404) and not isinstance(exception, Resolver404) and exception.args:
        detail = exception.args[0] if isinstance(exception.args[0], str) else ""
    return HttpResponseNotFound(loader.render_to_string("404.html", {"detail": detail}, request=None))


def server_error(request: HttpRequest) -> HttpResponse:
    # Nothing about the failure reaches the client; it is logged by django.request. (A dependency that is down
    # is answered by service_unavailable instead: memory_admin.urls.server_error.)
    if is_api(request):
        return api_error("server_error", "The server failed to handle this request.", 500)
    return defaults.server_error(request)


def service_unavailable(request: HttpRequest, retry_after: int) -> HttpResponse:
    """503 with Retry-After: the cache server or the database cannot be reached right now."""
    detail = "A service this server depends on is unavailable for a moment; try again shortly."
    response: HttpResponse
    if is_api(request) or request.path_info.startswith("/mcp"):
        response = api_error("service_unavailable", detail, 503)
    else:
        response = HttpResponse(loader.render_to_string("503.html"), status=503)
    response["Retry-After"] = str(retry_after)
    return response
