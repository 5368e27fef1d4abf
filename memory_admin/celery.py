from __future__ import annotations

import os
from typing import Any

from celery import Celery
from celery.signals import before_task_publish, task_postrun, task_prerun

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "memory_admin.settings")

app = Celery("memory_admin")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()

# The tenant travels with the task (docs/deploying.md "Row-level security"): the one current when the task is sent goes
# in a message header, and the worker acts for it while the task body runs, then restores what it had before
# (an eager task runs inside its caller). A task sent with no tenant (the beat sweeps) runs with none and
# crosses tenants only through accounts.tenancy.for_each_tenant.
TENANT_HEADER = "memory_admin_tenant_id"
_open_scopes: dict[str, Any] = {}


@before_task_publish.connect(dispatch_uid="memory_admin.celery.carry_tenant")
def _carry_tenant(headers: dict[str, Any] | None = None, **kwargs: Any) -> None:
    from memory_admin.accounts.tenancy import current_tenant_id

    if headers is not None and TENANT_HEADER not in headers:
        headers[TENANT_HEADER] = current_tenant_id()


@task_prerun.connect(dispatch_uid="memory_admin.celery.enter_tenant")
def _enter_tenant(task_id: str | None = None, task: Any = None, **kwargs: Any) -> None:
    from memory_admin.accounts.tenancy import current_tenant_id, tenant_context

    request = getattr(task, "request", None)
    headers = getattr(request, "headers", None) or {}
    tenant_id = getattr(request, TENANT_HEADER, headers.get(TENANT_HEADER))
    if tenant_id is None and request is not None and request.is_eager:
        tenant_id = current_tenant_id()  # eager: run as the caller, who is mid-scope
    scope = tenant_context(tenant_id)
    scope.__enter__()
    _open_scopes[task_id or ""] = scope


@task_postrun.connect(dispatch_uid="memory_admin.celery.leave_tenant")
def _leave_tenant(task_id: str | None = None, **kwargs: Any) -> None:
    scope = _open_scopes.pop(task_id or "", None)
    if scope is not None:
        scope.__exit__(None, None, None)
