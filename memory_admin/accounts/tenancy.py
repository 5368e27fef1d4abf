"""The tenant a unit of work acts for, as PostgreSQL's row-level security sees it.

Every tenant-owned table carries a policy `tenant_id = NULLIF(current_setting('app.tenant_id', true), '')::bigint`
under FORCE ROW LEVEL SECURITY (memory_admin/rls), and the web processes and workers connect as a role that
neither owns the tables nor bypasses RLS. So a query sees, and may write, only the rows of the tenant set
here; with no tenant set it sees nothing. On SQLite there is no such enforcement: the application's own
filters are the isolation (single-tenant trust, docs/deploying.md "Row-level security").

Who sets it:
- API requests: the bearer token's principal (accounts/auth.py); dashboard and session API requests: the
  signed-in principal (dashboard/middleware.py TenantContextMiddleware, which also restores the previous
  value when the request ends, whatever happened).
- Celery tasks: the tenant current when a task is published travels in a message header
  (`before_task_publish`), and is set before the task body runs and restored after it (`task_prerun` /
  `task_postrun`, memory_admin/celery.py).
- Management commands: `--tenant`, through `tenant_context`.
- Work that truly spans tenants (beat sweeps, the deletion reconciler): `for_each_tenant(purpose)`, which sets
  each tenant in turn and logs which sweep crossed which tenants. RLS is never switched off.

How (the choice, and why). `set_config('app.tenant_id', …, true)` is transaction-local, which would need a
transaction around every unit of work: requests and tasks here run in autocommit, with many short
transactions each (a CAS write, then its audit, then an enqueue after commit), and wrapping all of them
would change the product's locking and commit behaviour. So the value is set at session level
(`set_config(…, false)`) and its lifetime is bound to Python scopes instead:
1. A ContextVar holds the current tenant of this thread; it is the truth. `tenant_context` sets it and the
   session setting on entry and restores both on exit (in `finally`), so nesting works and nothing leaks
   past the scope, exceptions included.
2. A connection opened while a tenant is current (Django closes and reopens connections between requests
   and tasks, and after errors) gets the setting on connect (`connection_created`), so the database never
   lags the ContextVar.
3. If the restore cannot run because the transaction is aborted, the setting was changed inside that
   transaction and PostgreSQL's rollback puts back the value it had when the transaction (or savepoint)
   began, which is the outer scope's; if it fails outside a transaction, the connection is closed, so no
   session state can survive into the next unit of work on a persistent connection.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

from django.db import DatabaseError, connection
from django.db.backends.signals import connection_created

log = logging.getLogger(__name__)

SETTING = "app.tenant_id"
_current: ContextVar[int | None] = ContextVar("memory_admin_tenant_id", default=None)


def current_tenant_id() -> int | None:
    """The tenant this thread's work acts for, or None."""
    return _current.get()


def _enforced(conn: Any = connection) -> bool:
    return bool(conn.vendor == "postgresql")


def _apply(tenant_id: int | None) -> None:
    """Make the database session agree with the ContextVar (PostgreSQL only; a closed connection gets it on
    connect)."""
    if not _enforced() or connection.connection is None:
        return
    with connection.cursor() as cursor:
        cursor.execute("SELECT set_config(%s, %s, false)", [SETTING, "" if tenant_id is None else str(int(tenant_id))])


def _on_connect(sender: Any, connection: Any, **kwargs: Any) -> None:
    if not _enforced(connection):
        return
    tenant_id = _current.get()
    if tenant_id is not None:
        with connection.cursor() as cursor:
            cursor.execute("SELECT set_config(%s, %s, false)", [SETTING, str(int(tenant_id))])


connection_created.connect(_on_connect, dispatch_uid="memory_admin.accounts.tenancy")


def activate(tenant_id: int | None) -> None:
    """Set the tenant for the rest of the enclosing scope, without restoring anything itself. Only for a door
    that runs inside a scope which restores the previous value when it ends (the API's token authentication,
    inside TenantContextMiddleware's request scope)."""
    value = None if tenant_id is None else int(tenant_id)
    _current.set(value)
    _apply(value)


def _restore(previous: int | None) -> None:
    _current.set(previous)
    try:
        _apply(previous)
    except DatabaseError:
        if connection.in_atomic_block:
            # Aborted transaction: its rollback restores the value the outer scope had (module docstring, 3).
            return
        log.warning("Could not restore %s; closing the connection so no tenant survives on it", SETTING)
        connection.close()


@contextmanager
def tenant_context(tenant_id: int | None) -> Iterator[int | None]:
    """Act for `tenant_id` inside the block (None: for no tenant, so tenant tables show no rows on
    PostgreSQL); the previous tenant is restored on exit, exceptions included."""
    previous = _current.get()
    if tenant_id != previous:  # already so: no round trip to the database
        activate(tenant_id)
    try:
        yield tenant_id
    finally:
        if _current.get() != previous:  # what this scope, or an `activate` inside it, changed
            _restore(previous)


def for_each_tenant(purpose: str) -> Iterator[int]:
    """The one explicit path across tenants: yields each tenant's id with that tenant set, in id order, and
    logs which tenants the sweep `purpose` crossed. A consumer that stops early leaves no tenant set."""
    from memory_admin.accounts.models import Tenant  # tenants themselves are not tenant-owned rows

    tenant_ids = list(Tenant.objects.order_by("pk").values_list("pk", flat=True))
    crossed: list[int] = []
    try:
        for tenant_id in tenant_ids:
            with tenant_context(tenant_id):
                crossed.append(tenant_id)
                yield tenant_id
    finally:
        log.info("cross-tenant %s: crossed tenants %s", purpose, crossed)
