"""One adapter per store a deletion must reach, one module per store, behind one interface (base.py).

Adding a store is adding a module here whose class is decorated with `@register`: this package imports
every module it holds, so no list of stores exists anywhere.
"""

from __future__ import annotations

import importlib
import pkgutil

from deletion.stores.base import (
    NOTICE_REASON,
    PENDING_TARGETS,
    REDACTION,
    SCOPE_FIELDS,
    Found,
    Job,
    Scope,
    ScopeRecord,
    Store,
    Verification,
    get,
    job_for,
    register,
    registered,
    replayed,
    scope_records,
    unregister,
)

__all__ = [
    "NOTICE_REASON",
    "PENDING_TARGETS",
    "REDACTION",
    "SCOPE_FIELDS",
    "Found",
    "Job",
    "Scope",
    "ScopeRecord",
    "Store",
    "Verification",
    "get",
    "job_for",
    "register",
    "registered",
    "replayed",
    "scope_records",
    "unregister",
]


def _import_store_modules() -> None:
    # Like Django's autodiscover_modules: the registry learns the stores from the modules themselves.
    for module in pkgutil.iter_modules(__path__):
        if not module.name.startswith("_"):
            importlib.import_module(f"{__name__}.{module.name}")


_import_store_modules()
