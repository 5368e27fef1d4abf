"""Sign-in lockout (django-axes): failures counted per account and per address, and the answer a locked-out
sign-in gets.

Axes keeps one row per (login, address, user agent) with its failure count. Its stock handler compares one
limit with the larger of the two counts; here the account and the address have their own limits
(`AXES_FAILURE_LIMIT`, `LOGIN_ADDRESS_FAILURE_LIMIT`: an office behind one address should not be locked
out by five typos), so `get_failures` reports "at the limit" when the address is over its own limit.
Unknown logins count too, so a lockout says nothing about whether an account exists.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from axes.attempts import get_cool_off_threshold
from axes.handlers.database import AxesDatabaseHandler
from axes.helpers import get_client_username, get_cool_off
from axes.models import AccessAttempt
from django.conf import settings
from django.contrib.auth.forms import AuthenticationForm
from django.db.models import Sum
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import render
from django.utils import timezone


def _failures(attempts: Any) -> int:
    return int(attempts.aggregate(total=Sum("failures_since_start"))["total"] or 0)


class LockoutHandler(AxesDatabaseHandler):
    def get_failures(self, request: Any, credentials: dict[str, Any] | None = None) -> int:
        recent = AccessAttempt.objects.filter(attempt_time__gte=get_cool_off_threshold(request))
        username = get_client_username(request, credentials)
        by_account = _failures(recent.filter(username=username)) if username else 0
        by_address = _failures(recent.filter(ip_address=request.axes_ip_address))
        if by_address >= settings.LOGIN_ADDRESS_FAILURE_LIMIT:
            return max(by_account, int(settings.AXES_FAILURE_LIMIT))
        return by_account


def lockout_minutes() -> int:
    cool_off = get_cool_off()
    return max(1, round(cool_off.total_seconds() / 60)) if cool_off else 0


def lockout_message() -> str:
    return (
        "Too many failed sign-ins for this login or from your address. Signing in is locked for "
        f"{lockout_minutes()} minutes; an admin of your organisation can unlock your account sooner."
    )


def lockout_response(
    request: HttpRequest, original_response: HttpResponse | None = None, credentials: dict[str, Any] | None = None
) -> HttpResponse:
    """429 with Retry-After: the sign-in page with the lockout message, or JSON in the API's error shape for
    an API or script caller (no API path signs in with a password today; this keeps the shape if one does)."""
    message = lockout_message()
    wants_json = request.path.startswith("/api/") or request.headers.get("x-requested-with") == "XMLHttpRequest"
    response: HttpResponse
    if wants_json:
        response = JsonResponse({"code": "locked_out", "detail": message}, status=429)
    else:
        context = {
            "form": AuthenticationForm(request),
            "locked_out": True,
            "lockout_message": message,
            "next": request.POST.get("next", "") if request.method == "POST" else request.GET.get("next", ""),
        }
        response = render(request, "registration/login.html", context, status=429)
    response["Retry-After"] = str(lockout_minutes() * 60)
    return response


def failures_by_login(usernames: Iterable[str]) -> dict[str, int]:
    """Recent failures (within the lockout period) per login, for the logins given."""
    cool_off = get_cool_off()
    recent = AccessAttempt.objects.filter(username__in=list(usernames))
    if cool_off is not None:
        recent = recent.filter(attempt_time__gte=timezone.now() - cool_off)
    counts: dict[str, int] = {}
    for row in recent.values("username").annotate(total=Sum("failures_since_start")):
        counts[row["username"]] = int(row["total"] or 0)
    return counts


def is_locked(failures: int) -> bool:
    return failures >= int(settings.AXES_FAILURE_LIMIT)


def clear_login(username: str) -> int:
    """Forget the failures counted for one login (from every address); returns the rows removed."""
    count, _ = AccessAttempt.objects.filter(username=username).delete()
    return int(count)
