"""The interface every canonical-source connector implements. A new connector is one file."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, Literal


class SourceUnavailable(Exception):
    """The source could not be reached or refused us (timeout, refused, 5xx, auth failure)."""


class SourceAmbiguous(Exception):
    """The source answered, but not with one readable value (nothing, several, contradictory)."""

    def __init__(self, message: str, candidates: list[Any] | None = None) -> None:
        super().__init__(message)
        self.candidates = candidates or []


class CannotFetch(Exception):
    """This connector has no way to fetch by itself (e.g. a person must verify)."""


@dataclass(frozen=True)
class Observation:
    """What the canonical source says now about one fact."""

    value: Any
    revision: str
    ref: str  # where it was read, e.g. the URL


@dataclass(frozen=True)
class SettingField:
    """One setting of a connector as a person fills it in; the dashboard's policy form is built from these,
    so a new connector needs no form code."""

    key: str
    label: str = ""
    kind: Literal["text", "seconds"] = "text"
    max_length: int = 200
    default: Any = None  # what a blank field gives (None: "" for text, None for seconds)
    optional: bool = False  # the optional settings of a connector are given together or not at all
    help: str = ""  # one sentence beside the field: what it is, in people's words
    example: str = ""  # a concrete value that works, shown beside the field ("For example: /data/deadline")


@dataclass(frozen=True)
class FactKey:
    project_id: str
    subject_id: str
    predicate: str


class Connector:
    """Reads one field's canonical source.

    `validate` returns problems with the settings as sentences for a person; `fetch` returns an
    Observation or raises SourceUnavailable, SourceAmbiguous or CannotFetch.
    """

    name: ClassVar[str]
    label: ClassVar[str] = ""  # how a person chooses it (the policy form)
    can_fetch: ClassVar[bool] = True
    # The settings besides `connector` and `reporters`, as a person fills them in (the policy form).
    settings_fields: ClassVar[tuple[SettingField, ...]] = ()
    # `reporters`, on every connector: names of the tenant's principals that speak for this source
    # (e.g. the task system's own agent); their verified reports count as read from the source.
    allowed_keys: ClassVar[frozenset[str]] = frozenset({"reporters"})

    def __init__(self, settings: dict[str, Any], tenant_id: int | None = None) -> None:
        self.settings = settings
        self.tenant_id = tenant_id  # the policy's tenant: where a secret may be sent depends on it

    @classmethod
    def validate(cls, settings: dict[str, Any], *, tenant_id: int | None = None) -> list[str]:
        unknown = set(settings) - cls.allowed_keys - {"connector"}
        problems = [f"Unknown settings for the {cls.name} connector: {', '.join(sorted(unknown))}."] if unknown else []
        reporters = settings.get("reporters", [])
        if (
            not isinstance(reporters, list)
            or len(reporters) > 50
            or not all(isinstance(r, str) and 0 < len(r) <= 150 for r in reporters)
        ):
            problems.append("reporters must be a list of principal names (at most 50).")
        return problems

    @property
    def reporters(self) -> list[str]:
        reporters = self.settings.get("reporters") or []
        return [r for r in reporters if isinstance(r, str)] if isinstance(reporters, list) else []

    @property
    def timeout(self) -> float:
        return float(self.settings.get("timeout_seconds", 10))

    def fetch(self, key: FactKey) -> Observation:
        raise CannotFetch(f"The {self.name} connector cannot fetch by itself.")
