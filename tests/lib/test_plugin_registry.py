"""The one registry every kind of plug-in uses (`memory_admin.lib.registry.Registry`): built-ins first, in the order
listed, then whatever registers later; a key taken twice is refused and an unknown key is named with the keys there
are. No database: the registry knows no plug-in."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from memory_admin.lib.registry import AlreadyRegistered, NotRegistered, Registry


@dataclass(frozen=True)
class Plug:
    name: str
    version: int = 1


def builtins(registry: Registry[Plug]) -> None:
    registry.register(Plug("zeta"))
    registry.register(Plug("alpha"))


def make(**kwargs: object) -> Registry[Plug]:
    return Registry("widget", key=lambda plug: plug.name, builtins=builtins, **kwargs)  # type: ignore[arg-type]


def test_the_built_ins_come_first_in_the_order_listed_even_when_another_registers_before_any_read():
    registry = make()
    registry.register(Plug("beta"))
    assert list(registry) == ["zeta", "alpha", "beta"]
    assert [p.name for p in registry.values()] == ["zeta", "alpha", "beta"] and len(registry) == 3


def test_a_key_registered_twice_is_refused_and_the_first_kept():
    registry = make()
    with pytest.raises(AlreadyRegistered, match="Two widgets have the key 'alpha'") as refused:
        registry.register(Plug("alpha", version=2))
    assert "test_plugin_registry.Plug is refused" in str(refused.value)
    assert registry["alpha"].version == 1 and list(registry) == ["zeta", "alpha"]


def test_an_unknown_key_is_a_key_error_naming_the_keys_there_are():
    registry = make()
    with pytest.raises(NotRegistered) as unknown:
        registry["omega"]
    assert str(unknown.value) == "No widget 'omega' is registered; known: 'zeta', 'alpha'."
    assert isinstance(unknown.value, KeyError)
    assert "omega" not in registry and registry.get("omega") is None
    # A key of the wrong type (a JSON object given as a name) is unknown, not a TypeError.
    assert {} not in registry and registry.get({}) is None  # type: ignore[call-overload]


def test_a_check_refuses_a_plug_in_with_its_reason():
    def check(plug: Plug) -> None:
        if plug.version < 1:
            raise ValueError(f"{plug.name} has no version")

    registry = make(check=check)
    with pytest.raises(ValueError, match="gamma has no version"):
        registry.register(Plug("gamma", version=0))
    assert "gamma" not in registry
    with pytest.raises(ValueError, match="non-empty string"):
        registry.register(Plug(""))


def test_unregister_and_temporarily_leave_the_registry_as_it_was():
    registry = make()
    with registry.temporarily(Plug("alpha", version=9)):
        assert registry["alpha"].version == 9 and list(registry) == ["zeta", "alpha"]  # in its place
    assert registry["alpha"].version == 1
    with registry.temporarily(Plug("beta")):
        assert list(registry) == ["zeta", "alpha", "beta"]
    assert list(registry) == ["zeta", "alpha"]
    registry.unregister("zeta")
    registry.unregister("zeta")  # nothing to remove: no error
    assert list(registry) == ["alpha"]
    with pytest.raises(NotRegistered):
        registry.replace(Plug("zeta"))


def test_built_ins_that_fail_to_load_leave_nothing_half_registered():
    calls = []

    def flaky(registry: Registry[Plug]) -> None:
        calls.append(1)
        registry.register(Plug("one"))
        if len(calls) == 1:
            raise ImportError("a built-in's module failed")
        registry.register(Plug("two"))

    registry = Registry("widget", key=lambda plug: plug.name, builtins=flaky)
    with pytest.raises(ImportError):
        list(registry)
    assert list(registry) == ["one", "two"]  # tried again from the start, not "one" twice
    assert len(calls) == 2
