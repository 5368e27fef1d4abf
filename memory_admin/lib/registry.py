"""The one way plug-ins are registered: a small, explicit, ordered registry (healthchecks' `TRANSPORTS`).

Each kind of plug-in (a deletion store, a canonical-source connector, a conformance target, a propagation
step) owns one `Registry`. Its built-ins are listed in one function beside it, one line per plug-in, in the
order every list built from the registry shows them (the deletion report, the policy form's choices, the
conformance table's columns, the order propagation visits dependants). That function runs the first time the
registry is read or written, so the built-ins always come first and keep their keys, and a module that
defines a plug-in never has to be imported for its side effect. Anything else registers into the same
registry: a higher layer in its `AppConfig.ready()`, a third-party package through its entry point.

A key registered twice is refused (`AlreadyRegistered`), and an unknown key is a `NotRegistered` that names
the keys there are. The registry is a read-only mapping for its readers (`in`, `[]`, `.get`, iteration in
order); it knows no plug-in and imports nothing from the project.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, ItemsView, Iterator, Mapping, ValuesView
from contextlib import contextmanager


class AlreadyRegistered(ValueError):
    """Two plug-ins of one kind claimed the same key."""


class NotRegistered(KeyError):
    """No plug-in of this kind has the key. A `KeyError`, so `in` and `.get` work as for a dict."""

    def __str__(self) -> str:
        # KeyError shows its argument's repr (quotes around the sentence); this is a sentence for a person.
        return str(self.args[0]) if self.args else ""


def describe(item: object) -> str:
    """Where a plug-in comes from, for an error message: its class or function's dotted path."""
    source = item if isinstance(item, type) or (callable(item) and hasattr(item, "__qualname__")) else type(item)
    return f"{getattr(source, '__module__', '?')}.{getattr(source, '__qualname__', repr(source))}"


class Registry[V](Mapping[str, V]):
    """Plug-ins of one kind by key, in the order they were registered.

    `kind` names the kind in messages ("deletion store"); `key` reads a plug-in's key (its `name`); `builtins`
    registers the built-ins, one `registry.register(...)` line each, and is called once, before the first
    read or write; `check` refuses an invalid plug-in by raising (its message is the reason); `describe`
    names a plug-in in the duplicate-key message.
    """

    def __init__(
        self,
        kind: str,
        *,
        key: Callable[[V], str],
        builtins: Callable[[Registry[V]], None] | None = None,
        check: Callable[[V], None] | None = None,
        describe: Callable[[V], str] = describe,
    ) -> None:
        self.kind = kind
        self._key = key
        self._builtins = builtins
        self._check = check
        self._describe = describe
        self._items: dict[str, V] = {}
        self._loaded = builtins is None
        # The built-ins are loaded once per process, possibly from several request threads at once; a
        # built-in's registration runs on the loading thread, inside the lock (hence re-entrant).
        self._lock = threading.RLock()

    def _load(self) -> None:
        if self._loaded:
            return
        with self._lock:
            if self._loaded or self._builtins is None:
                return
            self._loaded = True  # before the call: the built-ins register through `register`
            before = dict(self._items)
            try:
                self._builtins(self)
            except BaseException:
                self._items = before
                self._loaded = False
                raise

    # --- writing ------------------------------------------------------------------------------------

    def register(self, item: V) -> V:
        """Add `item` after every plug-in registered so far; returns it, so it works as a class decorator.
        A key already registered is refused, even for the same plug-in: one line registers one plug-in."""
        self._load()
        name = self._key(item)
        if not isinstance(name, str) or not name:
            raise ValueError(f"A {self.kind}'s key must be a non-empty string, not {name!r} ({self._describe(item)}).")
        if self._check is not None:
            self._check(item)
        with self._lock:
            held = self._items.get(name)
            if held is not None:
                raise AlreadyRegistered(
                    f"Two {self.kind}s have the key {name!r}: {self._describe(held)} is registered, "
                    f"{self._describe(item)} is refused."
                )
            self._items[name] = item
        return item

    def unregister(self, name: str) -> None:
        """Remove the plug-in with this key (nothing if there is none)."""
        self._load()
        with self._lock:
            self._items.pop(name, None)

    def replace(self, item: V) -> V:
        """Put `item` in the place of the registered plug-in with its key (a module imported again)."""
        self._load()
        name = self._key(item)
        if self._check is not None:
            self._check(item)
        with self._lock:
            if name not in self._items:
                raise self._unknown(name)
            self._items[name] = item
        return item

    @contextmanager
    def temporarily(self, item: V) -> Iterator[V]:
        """`item` registered for the duration of the block (in the place of a plug-in with its key, if there is
        one), and the registry as it was afterwards: for tests."""
        self._load()
        name = self._key(item)
        held = self._items.get(name)
        if held is None:
            self.register(item)
        else:
            self.replace(item)
        try:
            yield item
        finally:
            if held is None:
                self.unregister(name)
            else:
                self.replace(held)

    # --- reading ------------------------------------------------------------------------------------

    def __getitem__(self, name: str) -> V:
        self._load()
        try:
            return self._items[name]
        except (KeyError, TypeError):  # an unhashable key ({} from JSON) is unknown too, never a 500
            raise self._unknown(name) from None

    def __contains__(self, name: object) -> bool:
        self._load()
        try:
            return name in self._items
        except TypeError:
            return False

    def __iter__(self) -> Iterator[str]:
        self._load()
        return iter(list(self._items))

    def __len__(self) -> int:
        self._load()
        return len(self._items)

    # A snapshot, not Mapping's views (a lookup per item): propagation reads its steps on every write that ends
    # a belief, and a registration while a caller iterates must not disturb it.
    def values(self) -> ValuesView[V]:
        self._load()
        return dict(self._items).values()

    def items(self) -> ItemsView[str, V]:
        self._load()
        return dict(self._items).items()

    def __repr__(self) -> str:
        return f"<Registry of {self.kind}s: {', '.join(self._items) or 'none loaded'}>"

    def _unknown(self, name: object) -> NotRegistered:
        known = ", ".join(repr(k) for k in self._items) or "none"
        return NotRegistered(f"No {self.kind} {name!r} is registered; known: {known}.")
