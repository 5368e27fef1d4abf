"""Row-level security in the bench (docs/deploying.md "Row-level security"): with BENCH_APP_ROLE=<role>, the figures are
taken as that non-owner role, under the tenant policies, with the bench tenant set — as the web app and the
workers run in production. Without it the bench connects as DATABASE_URL's role (the owner, a superuser under
`make bench`), which RLS does not restrict: the two runs give the cost of RLS."""

from __future__ import annotations

import os


def app_role() -> str:
    return os.environ.get("BENCH_APP_ROLE", "")


def as_app_role(tenant_id: int) -> str:
    """Reconnect as the app role with the bench tenant set for the rest of the process. Returns the role (''
    when BENCH_APP_ROLE is unset). The policies and the role's grants come from the bench's `migrate`, which
    names the role (bench/run.py, migrate), as an operator's does: the bench applies nothing of its own."""
    role = app_role()
    if not role:
        return ""
    from django.db import connection

    from memory_admin.accounts import tenancy

    if connection.settings_dict["USER"] != role:
        connection.close()
        connection.settings_dict.update(USER=role, PASSWORD=os.environ.get("BENCH_APP_PASSWORD", ""))
    tenancy.activate(tenant_id)
    return role
