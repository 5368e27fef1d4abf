"""One adapter per store a deletion must reach, one module per store, behind one interface (base.py).

`STORES` is the registry: the built-ins are listed in `_builtins` below, one line per store, in the order a
request runs them and its report lists them. Adding a store is adding its module here and one line there
(another app registers its own with `STORES.register(TheirStore())` in its `AppConfig.ready()`, after these).
The service, the tasks and the restore know no store by name: they read the registry.
"""

from __future__ import annotations

from deletion.models import StoreProgress
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
    job_for,
    scope_records,
)
from memory_admin.lib.registry import Registry

__all__ = [
    "NOTICE_REASON",
    "PENDING_TARGETS",
    "REDACTION",
    "SCOPE_FIELDS",
    "STORES",
    "Found",
    "Job",
    "Scope",
    "ScopeRecord",
    "Store",
    "Verification",
    "get",
    "job_for",
    "registered",
    "replayed",
    "scope_records",
]


def _builtins(stores: Registry[Store]) -> None:
    """The product's stores, in the order they run and are reported."""
    from deletion.stores import (
        backups,
        caches,
        contexts,
        disputes,
        embeddings,
        exports,
        keys,
        logs,
        receipts,
        records,
        scheduled_actions,
        summaries,
    )

    stores.register(records.RecordsStore())
    stores.register(logs.LogsStore())
    stores.register(embeddings.EmbeddingsStore())
    stores.register(summaries.SummariesStore())
    stores.register(scheduled_actions.ScheduledActionsStore())
    stores.register(caches.CachesStore())
    stores.register(exports.ExportsStore())
    stores.register(contexts.ContextsStore())
    stores.register(disputes.DisputesStore())
    stores.register(receipts.ReceiptsStore())
    stores.register(keys.KeysStore())
    stores.register(backups.BackupsStore())


def _check(store: Store) -> None:
    """A store's name is the store row's column: at most its length."""
    if not isinstance(store, Store):
        raise ValueError(f"{store!r} is not a deletion store (an instance of deletion.stores.Store).")
    max_length = StoreProgress._meta.get_field("store").max_length or 0
    if len(store.name) > max_length:
        raise ValueError(f"A store's name must have 1 to {max_length} characters, not {store.name!r}.")


STORES: Registry[Store] = Registry("deletion store", key=lambda store: store.name, builtins=_builtins, check=_check)


def registered() -> dict[str, Store]:
    """Every store by name, in the order they run and are reported."""
    return dict(STORES.items())


def get(name: str) -> Store:
    """The store with this name (`NotRegistered`, a LookupError, names the ones there are)."""
    return STORES[name]


def replayed() -> dict[str, Store]:
    """The stores a restore's replay purges again, in their order."""
    return {name: store for name, store in STORES.items() if store.replayed}
