"""Dashboard forms: they parse and validate input; the rules stay in the domain modules."""

from __future__ import annotations

import re
from datetime import UTC, date, datetime, timedelta, tzinfo
from typing import Any, cast

from django import forms
from django.utils import timezone

from memory_admin.dashboard import wording
from memory_admin.memory import validation
from memory_admin.memory.audit import Action
from memory_admin.memory.connectors import CONNECTORS, SettingField
from memory_admin.memory.errors import InvalidInput
from memory_admin.memory.filters import Door, RecordFilter
from memory_admin.memory.models import MemoryRecord
from memory_admin.memory.reads import FRESHNESS_LABELS

DURATION_UNITS: dict[str, tuple[str, timedelta]] = {
    "minutes": ("minutes", timedelta(minutes=1)),
    "hours": ("hours", timedelta(hours=1)),
    "days": ("days", timedelta(days=1)),
    "weeks": ("weeks", timedelta(weeks=1)),
}


class DurationInUnitsWidget(forms.MultiWidget):
    """A duration as people give it: a whole number and a unit (6 hours, 1 day, 2 weeks), not ISO 8601."""

    def __init__(self, attrs: dict[str, Any] | None = None) -> None:
        super().__init__(
            {
                "amount": forms.NumberInput(attrs={"min": 1, "step": 1, "inputmode": "numeric", "class": "amount"}),
                "unit": forms.Select(
                    attrs={"aria-label": "Unit", "class": "unit"},
                    choices=[(k, words) for k, (words, _) in DURATION_UNITS.items()],
                ),
            },
            attrs,
        )

    def decompress(self, value: Any) -> list[Any]:
        if isinstance(value, str):
            value = validation.parse_iso_duration(value) if value.startswith("P") else None
        if not isinstance(value, timedelta) or value <= timedelta(0):
            return [None, "days"]
        # The largest unit that states it exactly: 36 hours stays 36 hours, 14 days is 2 weeks.
        for unit, (_, size) in reversed(DURATION_UNITS.items()):
            if value % size == timedelta(0):
                return [value // size, unit]
        return [round(value / DURATION_UNITS["minutes"][1]), "minutes"]

    def value_from_datadict(self, data: Any, files: Any, name: str) -> Any:
        # A form posted by a script may still send one ISO 8601 value under the field's own name.
        if f"{name}_amount" not in data and name in data:
            return data.get(name)
        return super().value_from_datadict(data, files, name)

    def id_for_label(self, id_: str) -> str:
        # The field's label names the number (Django leaves a MultiWidget's label unattached); the unit's select
        # carries its own name, "Unit".
        return f"{id_}_0" if id_ else id_


class DurationInUnitsField(forms.Field):
    """A recheck interval: a number and a unit from the page (or one ISO 8601 duration from a script), at most
    validation.MAX_DURATION; blank means none."""

    widget = DurationInUnitsWidget

    def to_python(self, value: Any) -> timedelta | None:
        if isinstance(value, list | tuple):
            amount, unit = (str(v).strip() if v is not None else "" for v in [*value, "", ""][:2])
            if not amount:
                return None
            if unit not in DURATION_UNITS:
                raise forms.ValidationError("Choose minutes, hours, days or weeks.")
            if not amount.isdigit() or int(amount) < 1:
                raise forms.ValidationError("Give a whole number of at least 1.")
            if len(amount) > 9:
                raise forms.ValidationError(validation.DURATION_MESSAGE)
            parsed: timedelta | None = int(amount) * DURATION_UNITS[unit][1]
        else:
            text = str(value or "").strip()
            if not text:
                return None
            parsed = validation.parse_iso_duration(text) if text.startswith("P") else None
            if parsed is None or parsed.total_seconds() <= 0:
                raise forms.ValidationError("Give a number and a unit, such as 6 hours or 1 day.")
        if problems := validation.duration_problems(parsed):
            raise forms.ValidationError(problems)
        return parsed


_MONTHS = ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec")
_MONTH_NAMES = (
    "january", "february", "march", "april", "may", "june",
    "july", "august", "september", "october", "november", "december",
)  # fmt: skip
_WEEKDAYS = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
# "Mon 2 Nov 2026", "2 Nov 2026", "Monday, 2 November 2026, 17:00", "2 Nov 2026 17:00 JST": the app's own way of
# writing a date (wording.people_date, people_datetime), with an optional weekday, time and zone name.
_PEOPLE_MOMENT = re.compile(
    r"^(?:(?P<weekday>[a-z]+)\.?,?\s+)?(?P<day>\d{1,2})\s+(?P<month>[a-z]+)\.?,?\s+(?P<year>\d{4})"
    r"(?:,?\s+(?:at\s+)?(?P<hour>\d{1,2}):(?P<minute>\d{2})(?:\s+(?P<zone>[a-z][a-z0-9+-]{1,9}))?)?$",
    re.IGNORECASE,
)
# No ISO example in the message: the page shows it, and people read dates in the app's format (ISO still works).
MOMENT_MESSAGE = "Enter a date and time such as 2 Nov 2026 17:00, or a date alone such as 2 Nov 2026."
RANGE_MESSAGE = "Give a date from the year 1000 up to the year 8999."


def _named(word: str, names: tuple[str, ...]) -> int | None:
    """The index of the name `word` abbreviates ("nov", "Nov.", "November", "sept"), or None."""
    word = word.lower().rstrip(".")
    if len(word) < 3:
        return None
    found = [i for i, name in enumerate(names) if name.startswith(word) or (word == "sept" and name == "september")]
    return found[0] if len(found) == 1 else None


def parse_moment(text: str, zone: tzinfo) -> datetime:
    """The dashboard's one parser of a date or time a person types (the as-of control, the audit log's "From").

    Takes the app's own format ("Mon 2 Nov 2026", "2 Nov 2026, 17:00", the weekday, time and zone name optional)
    and ISO 8601 ("2026-11-02", "2026-11-02T17:00", with an offset or not). A date alone means its start; a
    time without an offset is in `zone` (the tenant's). Raises ValueError with a sentence for the page."""
    text = " ".join(text.split())
    if not text:
        raise ValueError(MOMENT_MESSAGE)
    if text[:4].isdigit():  # ISO 8601
        iso = text + "T00:00" if len(text) == 10 else text
        try:
            parsed = datetime.fromisoformat(iso.replace("Z", "+00:00"))
        except ValueError:
            raise ValueError(MOMENT_MESSAGE) from None
        if timezone.is_naive(parsed):
            parsed = timezone.make_aware(parsed, zone)
    else:
        parsed = _parse_people_moment(text, zone)
    if problems := validation.datetime_problems(parsed):
        raise ValueError(RANGE_MESSAGE if validation.RANGE_MESSAGE in problems else " ".join(problems))
    return parsed


def _parse_people_moment(text: str, zone: tzinfo) -> datetime:
    found = _PEOPLE_MOMENT.match(text)
    if not found:
        raise ValueError(MOMENT_MESSAGE)
    month = _named(found["month"], _MONTH_NAMES)
    if month is None:
        raise ValueError(f"“{found['month']}” is not a month; write it as Jan, Feb … Dec. {MOMENT_MESSAGE}")
    hour, minute = int(found["hour"] or 0), int(found["minute"] or 0)
    if hour > 23 or minute > 59:
        raise ValueError(f"{found['hour']}:{found['minute']} is not a time of day; write it from 00:00 to 23:59.")
    try:
        day = date(int(found["year"]), month + 1, int(found["day"]))
        naive = datetime(day.year, day.month, day.day, hour, minute)
    except ValueError:
        raise ValueError(
            f"{found['day']} {_MONTHS[month].capitalize()} {found['year']} is not a date on the calendar."
        ) from None
    if found["weekday"]:
        weekday = _named(found["weekday"], _WEEKDAYS)
        if weekday is None:
            raise ValueError(MOMENT_MESSAGE)
        if weekday != day.weekday():
            raise ValueError(
                f"{day.day} {day:%b %Y} is a {_WEEKDAYS[day.weekday()].capitalize()}, "
                f"not a {_WEEKDAYS[weekday].capitalize()}: check the date."
            )
    moment = timezone.make_aware(naive, zone)
    if named := found["zone"]:
        if named.upper() in ("UTC", "GMT", "Z"):
            return naive.replace(tzinfo=UTC)
        if named.upper() != (moment.tzname() or "").upper():
            raise ValueError(
                f"Times here are in {moment.tzname()}: leave out “{named}” or write the time in {moment.tzname()}."
            )
    return moment


class LocalDateTimeField(forms.CharField):
    """A date or time typed in the page, read by `parse_moment`: the app's format or ISO, local times in the
    tenant's time zone."""

    default_error_messages = {"invalid": MOMENT_MESSAGE}

    def to_python(self, value: Any) -> datetime | None:  # type: ignore[override]
        text = (super().to_python(value) or "").strip()
        if not text:
            return None
        if len(text) > 80:  # no date is written longer; a pasted paragraph is refused before it is read
            raise forms.ValidationError(MOMENT_MESSAGE, code="invalid")
        try:
            return parse_moment(text, timezone.get_current_timezone())
        except ValueError as exc:
            raise forms.ValidationError(str(exc), code="invalid") from None


class IdentifierField(forms.CharField):
    """A project id, subject id or predicate typed in a page: trimmed (as a form trims what a person typed),
    normalised to NFKC, then held to the domain's rule (memory.validation), as the API's field does."""

    default_validators = [validation.IdentifierValidator()]

    def to_python(self, value: Any) -> str:
        return cast(str, validation.normalize_identifier(super().to_python(value)))


Status = MemoryRecord.Status
STATUS_VIEWS = [
    ("accepted", "Current"),
    ("superseded", "Superseded (history)"),
    ("disputed", "Disputed"),
    ("excluded", "Excluded"),
    ("expired", "Expired"),
    ("all", "All statuses"),
]
PAGE_STATUSES = tuple(value for value, _ in STATUS_VIEWS if value != "all")
# The filter's parameter names as the page's fields (the API's long names go to the short fields).
PAGE_FIELD = {"project_id": "project", "subject_id": "subject"}


class ShownChoiceField(forms.ChoiceField):
    """A select the page renders; the value is checked by the record filter (memory.filters), not here."""

    def validate(self, value: Any) -> None:
        pass


class RecordFilterForm(forms.Form):
    """The records page's controls. The filter itself (project, subject, predicate, status, as-of times,
    freshness, source, search) is parsed by memory.filters.RecordFilter, the same object the API's record list
    parses into, so the page also takes the API's names (project_id, subject_id, valid_at, known_at);
    a problem is shown beside the form. This form adds the paging fields and renders the controls."""

    q = forms.CharField(required=False, label="Search subject, predicate or value")
    project = forms.CharField(required=False)
    subject = forms.CharField(required=False)
    predicate = forms.CharField(required=False)
    # Named for screen readers even where the page shows the select without a visible label.
    status = ShownChoiceField(required=False, choices=STATUS_VIEWS, widget=forms.Select(attrs={"aria-label": "Status"}))
    freshness = ShownChoiceField(
        required=False,
        choices=[("", "Any freshness")] + [(key, label.capitalize()) for key, label in FRESHNESS_LABELS.items()],
        widget=forms.Select(attrs={"aria-label": "Freshness"}),
    )
    source = forms.CharField(required=False, label="Source starts with")
    valid_at = forms.CharField(required=False)
    known_at = forms.CharField(required=False)
    after = forms.IntegerField(required=False, min_value=1, widget=forms.HiddenInput)
    size = forms.IntegerField(required=False, min_value=1, max_value=200, widget=forms.HiddenInput)

    def __init__(self, data: Any = None, **kwargs: Any) -> None:
        if data is not None:
            # The API's names fill the page's controls (the filter reads both; the page links use the short ones).
            data = data.copy()
            for short, long in (("project", "project_id"), ("subject", "subject_id")):
                if not data.get(short) and data.get(long):
                    data[short] = data[long]
        super().__init__(data, **kwargs)
        self.record_filter = RecordFilter()

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean() or {}
        params: dict[str, Any] = {name: self.data.get(name) for name in self.data}  # the last of repeated ones
        if params.get("status") == "all":
            params.pop("status")  # every status
        elif not params.get("status") and not (params.get("valid_at") or params.get("known_at")):
            params["status"] = Status.ACCEPTED  # the page's default view; an as-of question asks about history
        try:
            self.record_filter = RecordFilter.from_params(params, Door.PAGE, statuses=PAGE_STATUSES)
        except InvalidInput as exc:
            for name, problems in exc.extra["errors"].items():
                self.add_error(
                    PAGE_FIELD.get(name, name) if PAGE_FIELD.get(name, name) in self.fields else None, problems
                )
        return cleaned

    @property
    def status_view(self) -> str:
        """The status the table shows: the one asked, "all", or the default "accepted"."""
        asked = self.data.get("status") or ""
        if asked in PAGE_STATUSES or asked == "all":
            return asked
        return "all" if self.data.get("valid_at") or self.data.get("known_at") else Status.ACCEPTED


class AsOfForm(forms.Form):
    """The fact page's as-of question: a valid time and a record time, typed in the app's format or ISO."""

    valid_at = LocalDateTimeField(required=False, label="Valid at")
    known_at = LocalDateTimeField(required=False, label="Known at")

    def shown(self) -> dict[str, str]:
        """What each control shows back: what was read, in the app's format ("Mon 2 Nov 2026, 17:00"), or what
        was typed when it could not be read (with the message beside it)."""
        zone = timezone.get_current_timezone()
        errors = self.errors  # cleans a bound form once; an unbound one has no errors and nothing cleaned
        cleaned: dict[str, Any] = getattr(self, "cleaned_data", {})
        shown = {}
        for name in self.fields:
            moment = cleaned.get(name) if name not in errors else None
            typed = str(self.data.get(name) or "").strip() if self.is_bound else ""
            shown[name] = wording.people_moment(moment, zone) if moment else typed
        return shown


class ReasonForm(forms.Form):
    reason = forms.CharField(max_length=2000, strip=True, error_messages={"required": "Give a reason; it is audited."})


class BulkForm(forms.Form):
    operation = forms.ChoiceField(choices=[("exclude", "Exclude from context"), ("expire", "Expire, keep as history")])
    reason = forms.CharField(required=False, max_length=2000, strip=True)
    confirm = forms.BooleanField(required=False)


class ResolveForm(forms.Form):
    winner = forms.CharField(required=False, max_length=64)
    reason = forms.CharField(max_length=2000, strip=True, error_messages={"required": "Give a reason; it is audited."})


EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


class AuditCursorField(forms.CharField):
    """The audit page's keyset cursor: the last row's time (microseconds since the epoch) and id.

    The log is ordered by the time events happened, then id; a bare id would skip or repeat rows
    whenever insertion order and event time differ (events written with the domain's `now`).
    """

    default_error_messages = {"invalid": "This page link is not valid any more; start again from the first page."}

    def to_python(self, value: Any) -> tuple[datetime, int] | None:  # type: ignore[override]
        text = (super().to_python(value) or "").strip()
        if not text:
            return None
        micros, _, pk = text.partition(".")
        try:
            moment = EPOCH + timedelta(microseconds=int(micros))  # exact, unlike a float timestamp
            row = int(pk)
        except (ValueError, OverflowError, OSError):
            raise forms.ValidationError(self.error_messages["invalid"], code="invalid") from None
        if row < 1:
            raise forms.ValidationError(self.error_messages["invalid"], code="invalid")
        return moment, row

    @staticmethod
    def encode(moment: datetime, row: int) -> str:
        return f"{(moment - EPOCH) // timedelta(microseconds=1)}.{row}"


# What each audit action is about, in words, for the audit log's action filter ("Dispute: resolved").
_ACTION_SUBJECTS = {"login": "Sign-in", "mcp": "MCP", "policy": "Field policy"}


def action_choice_label(action: str) -> str:
    """An audit action as the filter offers it, in words, never the code: what happened, preceded by what it is
    about when the words do not say ("Record: superseded", "Deletion approved")."""
    about = action.split(".", 1)[0]
    words = wording.action_words(action).replace("mcp ", "MCP ")
    if about in words.lower() or "sign-in" in words:
        return words[0].upper() + words[1:]
    return f"{_ACTION_SUBJECTS.get(about, about.capitalize())}: {words}"


class AuditFilterForm(forms.Form):
    actor = forms.CharField(required=False, max_length=150)
    # The choices come from the one vocabulary every writer uses (memory.audit.Action); the code is the option's
    # value (the URL keeps it), its label is in words.
    action = forms.ChoiceField(
        required=False,
        choices=[
            ("", "Any action"),
            *sorted(((a, action_choice_label(a)) for a in Action.values), key=lambda choice: choice[1]),
        ],
        widget=forms.Select(attrs={"aria-label": "Action"}),
    )
    object = forms.CharField(required=False, max_length=64, label="Object id")
    since = LocalDateTimeField(required=False, label="From")
    until = LocalDateTimeField(required=False, label="To")
    after = AuditCursorField(required=False, max_length=40, widget=forms.HiddenInput)


class PolicyForm(forms.Form):
    """A field policy as an admin edits it; `to_policy_data` gives what save_field_policy takes."""

    project_id = IdentifierField(required=False, max_length=100, label="Project (blank: every project)")
    predicate = IdentifierField(max_length=200)
    authorized_issuers = forms.CharField(
        required=False, max_length=2000, label="Authorized issuers (names, comma-separated; blank: any writer)"
    )
    canonical_ref_prefix = forms.CharField(
        required=False,
        max_length=500,
        label="Canonical reference prefix",
        help_text="What a source's reference starts with when it speaks for this field. For example: task-system:",
    )
    # The connector's choices and its settings' fields (inserted after it) come from the connector registry.
    connector = forms.ChoiceField(required=False)
    reporters = forms.CharField(
        required=False,
        max_length=2000,
        label="Reporters: principals that speak for this source (names, comma-separated; their reports verify)",
        help_text="For example: tasks-sync-agent",
    )
    recheck_interval = DurationInUnitsField(required=False, label="Recheck every (blank: never)")
    recheck_before_action = forms.BooleanField(required=False)
    on_failure = forms.ChoiceField(
        choices=[("answer_with_caveat", "Answer with a caveat"), ("block_action", "Block actions")]
    )
    risk = forms.ChoiceField(choices=[("low", "Low"), ("high", "High")])
    retention_days = forms.IntegerField(required=False, min_value=1, max_value=validation.MAX_RETENTION_DAYS)
    agents_expire_own = forms.BooleanField(
        required=False,
        label="Agents may expire facts they asserted themselves (not on a high-risk field; otherwise an agent's "
        "delete is a request an owner approves)",
    )

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        connector = self.fields["connector"]
        assert isinstance(connector, forms.ChoiceField)
        connector.choices = [("", "No canonical source"), *((name, c.label or name) for name, c in CONNECTORS.items())]
        fields = {}
        for name, field in self.fields.items():
            fields[name] = field
            if name == "connector":
                fields.update({f.key: _setting_form_field(f) for f in _setting_fields().values()})
        self.fields = fields

    # --- Fields for the selected connector only --------------------------------------------------------

    def chosen_connector(self) -> str:
        """The connector the form shows settings for: as posted, else as the form started."""
        value = self.data.get("connector") if self.is_bound else self.initial.get("connector")
        return str(value) if value in CONNECTORS else ""

    def general_fields(self) -> list[forms.BoundField]:
        keys = set(_setting_fields())
        return [self[name] for name in self.fields if name not in keys and name not in ("connector", "reporters")]

    def source_fields(self) -> list[tuple[forms.BoundField, list[str], bool]]:
        """Each connector setting with the connectors that use it, and whether the chosen one does (the
        others are rendered hidden: the page works without JavaScript, v-policy.js toggles them live)."""
        chosen = self.chosen_connector()
        users: dict[str, list[str]] = {}
        for connector in CONNECTORS.values():
            for f in connector.settings_fields:
                users.setdefault(f.key, []).append(connector.name)
        return [(self[key], names, chosen in names) for key, names in users.items()]

    def attach_source_problems(self, problems: list[str]) -> None:
        """Problems with the canonical source, each beside the setting it names (else for the whole form)."""
        keys = [*_setting_fields(), "reporters", "connector"]
        for problem in problems:
            named = [(problem.find(k), k) for k in keys if re.search(rf"\b{re.escape(k)}\b", problem)]
            self.add_error(min(named)[1] if named else None, problem)

    def describe_errors(self) -> None:
        """Point each field with an error at its message (the template renders it as `<id>_error`)."""
        for name, field in self.fields.items():
            if name in self.errors:
                field.widget.attrs["aria-invalid"] = "true"
                field.widget.attrs["aria-describedby"] = f"{self[name].auto_id}_error"

    @classmethod
    def initial_for_new(cls) -> dict[str, Any]:
        return {f.key: f.default for f in _setting_fields().values() if f.default is not None}

    def clean_reporters(self) -> list[str]:
        names = [n.strip() for n in self.cleaned_data["reporters"].split(",") if n.strip()]
        if names and not self.cleaned_data.get("connector"):
            raise forms.ValidationError("Reporters speak for a canonical source: choose one first.")
        return names

    def to_policy_data(self) -> dict[str, Any]:
        data = self.cleaned_data
        source: dict[str, Any] | None = None
        connector = CONNECTORS.get(data["connector"]) if data["connector"] else None
        if connector is not None:
            source = {"connector": connector.name}
            optional: dict[str, Any] = {}
            for f in connector.settings_fields:
                value = data.get(f.key)
                if value is None or value == "":
                    value = f.default if f.default is not None else ("" if f.kind == "text" else None)
                (optional if f.optional else source)[f.key] = value
            if any(v not in (None, "") for v in optional.values()):
                source.update(optional)  # given together, so the connector can say what is missing
        if source is not None and data["reporters"]:
            source["reporters"] = data["reporters"]
        return {
            "project_id": data["project_id"].strip() or None,
            "predicate": data["predicate"].strip(),
            "authorized_issuers": [n.strip() for n in data["authorized_issuers"].split(",") if n.strip()],
            "canonical_ref_prefix": data["canonical_ref_prefix"].strip(),
            "canonical_source": source,
            "recheck_interval": data["recheck_interval"],
            "recheck_before_action": data["recheck_before_action"],
            "on_failure": data["on_failure"],
            "risk": data["risk"],
            "retention_days": data["retention_days"],
            "agents_expire_own": data["agents_expire_own"],
        }

    @classmethod
    def initial_for(cls, policy: Any) -> dict[str, Any]:
        source = policy.canonical_source or {}
        return {
            "project_id": policy.project.key if policy.project_id else "",
            "predicate": policy.predicate,
            "authorized_issuers": ", ".join(policy.authorized_issuers),
            "canonical_ref_prefix": policy.canonical_ref_prefix,
            "connector": source.get("connector", ""),
            **{f.key: source.get(f.key, "" if f.kind == "text" else None) for f in _setting_fields().values()},
            "reporters": ", ".join(source.get("reporters") or []),
            "recheck_interval": policy.recheck_interval,
            "recheck_before_action": policy.recheck_before_action,
            "on_failure": policy.on_failure,
            "risk": policy.risk,
            "retention_days": policy.retention_days,
            "agents_expire_own": policy.agents_expire_own,
        }


def _setting_fields() -> dict[str, SettingField]:
    """Every connector's settings by key, in registry order (connectors sharing a key share its field)."""
    fields: dict[str, SettingField] = {}
    for connector in CONNECTORS.values():
        for f in connector.settings_fields:
            fields.setdefault(f.key, f)
    return fields


def _setting_form_field(setting: SettingField) -> forms.Field:
    label = setting.label or None
    blank = f"Blank: {setting.default}." if setting.default is not None else ""
    example = f"For example: {setting.example}" if setting.example else ""
    help_text = " ".join(part for part in (setting.help, blank, example) if part)
    if setting.kind == "seconds":
        return forms.FloatField(required=False, min_value=0.1, max_value=60, label=label, help_text=help_text)
    return forms.CharField(required=False, max_length=setting.max_length, label=label, help_text=help_text)


class SettingsTestForm(forms.Form):
    """ "Test these settings" on the policy form, before saving: which subject to fetch (prefixed `try`, so
    its names never meet the policy's own `project_id`)."""

    use_required_attribute = False  # it sits inside the policy form: "Save" must not need a test subject

    subject_id = IdentifierField(max_length=200, label="Subject to fetch")
    project_id = IdentifierField(required=False, max_length=100, label="Project (blank: the policy's)")


class SourceTestForm(forms.Form):
    subject_id = IdentifierField(max_length=200)
    project_id = IdentifierField(required=False, max_length=100)


class ManualVerifyForm(forms.Form):
    verdict = forms.ChoiceField(
        choices=[("still_true", "Still true"), ("changed", "Changed to…"), ("cannot_tell", "Cannot tell")]
    )
    new_value = forms.CharField(required=False, max_length=2000)
    source_revision = forms.CharField(required=False, max_length=100)
    note = forms.CharField(required=False, max_length=2000)
