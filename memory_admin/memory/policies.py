"""Field policies: which policy governs a field, and whether a principal may update it."""

from __future__ import annotations

from collections.abc import Iterable
from functools import cache
from typing import Any

from django.db import IntegrityError, connection, transaction
from django.utils import timezone
from django.utils.duration import duration_iso_string

from memory_admin.accounts.models import Principal, Tenant
from memory_admin.lib import rows
from memory_admin.memory import audit, validation
from memory_admin.memory.connectors import Connector, connector_for, validate_source
from memory_admin.memory.errors import Forbidden, InvalidInput, InvalidState, IssuerNotAuthorized
from memory_admin.memory.models import FieldPolicy, MemoryRecord, Project


def policy_for(tenant: Tenant | int, project_key: str, predicate: str) -> FieldPolicy | None:
    """The project's own policy for the field, else the tenant-wide one, else None."""
    # A field has a handful of policies at most (one per project, one tenant-wide): fetch them and choose
    # here, a simpler query than ordering with NULLS LAST on every write. The statement is built once
    # (lib.rows), as `filter(...).select_related("project")` would send it: compiling that queryset on every
    # call cost several times the query on the read for acting (issue 16 §2).
    tenant_id = tenant if isinstance(tenant, int) else tenant.pk
    with connection.cursor() as cursor:
        cursor.execute(_policy_sql(), [tenant_id, predicate])
        found = cursor.fetchall()
    width = len(FieldPolicy._meta.concrete_fields)
    candidates = []
    for row in found:
        p = rows.load(FieldPolicy, row)
        project = rows.load(Project, row[width:]) if p.project_id is not None else None
        FieldPolicy.project.field.set_cached_value(p, project)
        candidates.append(p)
    return _choose(candidates, project_key, predicate)


@cache
def _policy_sql() -> str:
    policy, project = FieldPolicy._meta.db_table, Project._meta.db_table
    return (
        f"SELECT {rows.select_list(FieldPolicy, 'fp')}, {rows.select_list(Project, 'pr')} "
        f"FROM {policy} fp LEFT JOIN {project} pr ON pr.id = fp.project_id "
        "WHERE fp.tenant_id = %s AND fp.predicate = %s"
    )


def policies_for(tenant: Tenant | int, fields: Iterable[tuple[str, str]]) -> dict[tuple[str, str], FieldPolicy | None]:
    """`policy_for` of many (project key, predicate) fields in one query (a page listing many records)."""
    tenant_id = tenant if isinstance(tenant, int) else tenant.pk
    wanted = set(fields)
    candidates = list(
        FieldPolicy.objects.filter(tenant_id=tenant_id, predicate__in={p for _, p in wanted}).select_related("project")
    )
    return {(key, predicate): _choose(candidates, key, predicate) for key, predicate in wanted}


def _choose(candidates: list[FieldPolicy], project_key: str, predicate: str) -> FieldPolicy | None:
    """The one rule of which policy governs a field: the project's own, else the tenant-wide one."""
    mine = [p for p in candidates if p.predicate == predicate]
    own = next((p for p in mine if p.project is not None and p.project.key == project_key), None)
    return own or next((p for p in mine if p.project_id is None), None)


def locked_policy_for(
    tenant_id: int, project_key: str, predicate: str, lock_key: int
) -> tuple[FieldPolicy | None, int]:
    """`policy_for` for a write on PostgreSQL, in the same round trip as the fact key's lock and the id its new
    version will take: `pg_advisory_xact_lock(lock_key)` (actions.lock_fact) and `nextval` of the records' id
    sequence run once, in the one-row subquery every candidate policy is joined to (one row of NULLs when the
    field has none). The lock is taken before the statement returns: the rows the write reads next, in later
    statements, are read under it."""
    with connection.cursor() as cursor:
        cursor.execute(_locked_policy_sql(), [lock_key, tenant_id, predicate])
        found = cursor.fetchall()
    new_id = int(found[0][-1])
    candidates = []
    for row in found:
        p = rows.load(FieldPolicy, row)
        if p.pk is None:
            continue  # the field has no policy: the one row of NULLs
        # The project is known from the join (its key is all _choose reads); no query when it is read.
        project = Project(pk=p.project_id, tenant_id=tenant_id, key=row[-2]) if p.project_id is not None else None
        FieldPolicy.project.field.set_cached_value(p, project)
        candidates.append(p)
    return _choose(candidates, project_key, predicate), new_id


@cache
def _locked_policy_sql() -> str:
    policy, project, records = FieldPolicy._meta.db_table, Project._meta.db_table, MemoryRecord._meta.db_table
    return f"""
        SELECT {rows.select_list(FieldPolicy, "fp")}, pr.key AS project_key, once.new_id
        FROM (SELECT pg_advisory_xact_lock(%s) AS locked,
                     nextval(pg_get_serial_sequence('{records}', 'id')) AS new_id) AS once
        LEFT JOIN ({policy} fp LEFT JOIN {project} pr ON pr.id = fp.project_id)
          ON fp.tenant_id = %s AND fp.predicate = %s
    """


def source_connector(policy: FieldPolicy | None) -> Connector | None:
    """The connector of the field's canonical source (None: no policy, or a policy naming no source)."""
    return connector_for(policy.canonical_source, policy.tenant_id) if policy else None


def is_manual(policy: FieldPolicy | None) -> bool:
    """Whether a person verifies the field: its canonical source is one the server cannot fetch itself
    (the `manual` connector), so a person's verdict is the source. Its counterpart for "recheck now" is
    rechecks.can_fetch."""
    connector = source_connector(policy)
    return connector is not None and not connector.can_fetch


# Who may see and change field policies (the API's IsAdminRoleOrComplianceReading says the same, one floor
# down in accounts): admins change them; compliance staff read everything and change nothing.
def may_edit_policies(principal: Principal) -> bool:
    return principal.has_role("admin")


def may_read_policies(principal: Principal) -> bool:
    return principal.has_role("admin", "compliance")


# The tenant's system principal that writes values fetched from a field's canonical source.
CANONICAL_ISSUER = "canonical-source"


def is_canonical_issuer(principal: Principal) -> bool:
    """Whether `principal` is the tenant's system principal of the recheck engine (rechecks.canonical_issuer)."""
    return principal.name == CANONICAL_ISSUER and principal.kind == Principal.Kind.AGENT


def authorize_issuer(principal: Principal, policy: FieldPolicy | None) -> None:
    """Raise IssuerNotAuthorized unless `principal` may update the field governed by `policy`.

    Checked against the authenticated principal and its current roles, never against what a
    request claims about its authority. A policy with named issuers admits only those names; an
    empty list admits any principal with write access to the tenant's projects.
    """
    if not principal.can_write:
        raise IssuerNotAuthorized(f"Principal '{principal.name}' has no role that may write facts.")
    if is_canonical_issuer(principal):
        if policy is not None and policy.canonical_source:
            return  # the policy's own canonical source, read by the recheck engine
        raise IssuerNotAuthorized("This field names no canonical source for the recheck engine to write.")
    if policy is not None and policy.authorized_issuers and principal.name not in policy.authorized_issuers:
        raise IssuerNotAuthorized(
            f"Principal '{principal.name}' is not an authorized issuer of '{policy.predicate}'.",
            authorized_issuers=list(policy.authorized_issuers),
        )


def not_the_source(principal: Principal, policy: FieldPolicy | None) -> str:
    """Why `principal`'s report cannot count as read from the field's canonical source ("" when it can).

    The policy names who speaks for its source: the principals listed in `canonical_source.reporters`
    (any connector), and, for a field verified manually, a person allowed to issue it (the person is
    the source). The recheck engine itself needs no report: it fetches. Used by rechecks (whose report counts) and by
    ranking (whose write may claim the canonical source's rank).
    """
    connector = source_connector(policy)
    if policy is None:
        return "this field has no policy, so nothing names its canonical source."
    if connector is None:
        return "the field's policy names no canonical source."
    if principal.name in connector.reporters:
        return ""
    if is_manual(policy) and principal.kind == Principal.Kind.HUMAN:
        return ""
    who = f"'{principal.name}' is not one of the principals the policy names for its canonical source"
    return f"{who} (canonical_source.reporters)" + ("; the server fetches it itself." if connector.can_fetch else ".")


def validate_canonical_source(source: Any, tenant_id: int | None) -> list[str]:
    """Problems with a tenant's `canonical_source` setting, as sentences for a person (empty when valid)."""
    return validate_source(source, tenant_id)


def save_field_policy(
    principal: Principal, data: dict[str, Any], *, instance: FieldPolicy | None = None
) -> FieldPolicy:
    """Create or update a field policy for the principal's tenant (admins only), audited."""
    if not may_edit_policies(principal):
        raise Forbidden("Only admins may change field policies.")
    source = data.get("canonical_source", instance.canonical_source if instance else None)
    problems = validate_canonical_source(source, principal.tenant_id)
    if problems:
        raise InvalidInput({"canonical_source": problems})
    _validate_policy_fields(data)
    with transaction.atomic():
        before = _policy_snapshot(instance) if instance else None
        policy = instance or FieldPolicy(tenant_id=principal.tenant_pk)
        if "project_id" in data:
            key = data.pop("project_id")
            policy.project = Project.objects.get_or_create(tenant_id=principal.tenant_pk, key=key)[0] if key else None
        for name, value in data.items():
            setattr(policy, name, value)
        policy.updated_at = timezone.now()
        try:
            with transaction.atomic():
                policy.save()
        except IntegrityError:
            # A conflict with what is stored (409), not a malformed body: the same body is fine in another tenant.
            raise InvalidState("A policy for this field and project already exists; edit that one.") from None
        audit.record_event(
            tenant=policy.tenant_id,
            actor=principal,
            action=audit.Action.POLICY_UPDATED if instance else audit.Action.POLICY_CREATED,
            object_type="field_policy",
            object_id=str(policy.pk),
            before=before,
            after=_policy_snapshot(policy),
        )
    return policy


def _validate_policy_fields(data: dict[str, Any]) -> None:
    """Identifiers in the shared character set; an interval and a retention period the product can add to
    a date (memory.validation)."""
    ids = {name: data[name] for name in ("project_id", "predicate") if data.get(name) is not None}
    validation.check_identifiers(**ids)
    errors = {}
    interval = data.get("recheck_interval")
    if interval is not None and (problems := validation.duration_problems(interval)):
        errors["recheck_interval"] = problems
    if problems := validation.retention_days_problems(data.get("retention_days")):
        errors["retention_days"] = problems
    if errors:
        raise InvalidInput(errors)


def delete_field_policy(principal: Principal, policy: FieldPolicy) -> None:
    if not may_edit_policies(principal):
        raise Forbidden("Only admins may change field policies.")
    with transaction.atomic():
        before = _policy_snapshot(policy)
        object_id = str(policy.pk)
        policy.delete()
        audit.record_event(
            tenant=principal.tenant_pk,
            actor=principal,
            action=audit.Action.POLICY_DELETED,
            object_type="field_policy",
            object_id=object_id,
            before=before,
        )


def _policy_snapshot(policy: FieldPolicy) -> dict[str, Any]:
    return {
        "project_id": policy.project.key if policy.project_id else None,  # type: ignore[union-attr]
        "predicate": policy.predicate,
        "authorized_issuers": list(policy.authorized_issuers),
        "canonical_ref_prefix": policy.canonical_ref_prefix,
        "canonical_source": policy.canonical_source,
        "recheck_interval": duration_iso_string(policy.recheck_interval) if policy.recheck_interval else None,
        "recheck_before_action": policy.recheck_before_action,
        "on_failure": policy.on_failure,
        "risk": policy.risk,
        "retention_days": policy.retention_days,
    }
