"""Row-level security in the bench (README "Row-level security"): with BENCH_APP_ROLE=<role>, the figures are
taken as that non-owner role, under the tenant policies, with the bench tenant set — as the web app and the
workers run in production. Without it the bench connects as DATABASE_URL's role (the owner, a superuser under
`make bench`), which RLS does not restrict: the two runs give the cost of RLS."""

from __future__ import annotations

import os


def app_role() -> str:
    return os.environ.get("BENCH_APP_ROLE", "")


def as_app_role(tenant_id: int) -> str:
    """Grant the app role its DML (as the owner, still connected), then reconnect as the app role with the
    bench tenant set for the rest of the process. Returns the role ('' when BENCH_APP_ROLE is unset)."""
    role = app_role()
    if not role:
        return ""
    from django.db import connection

    from memory_admin.accounts import tenancy
    from memory_admin.rls.policies import apply_policies, grant_app_role

    if connection.settings_dict["USER"] != role:
        apply_policies(connection)
        grant_app_role(connection, role)
        connection.close()
        connection.settings_dict.update(USER=role, PASSWORD=os.environ.get("BENCH_APP_PASSWORD", ""))
    tenancy.activate(tenant_id)
    return role
