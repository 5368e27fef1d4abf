"""Sealed source refs (issue 35, item 4): a record's `source_canonical_ref` and a recheck attempt's `source_ref`
become lib.sealing's text fields (a ref may name the person: "crm:contacts/alice@example.com"), and the record keeps
the ref's system ("crm") in clear in `source_system`, for the records list's source filter (memory.filters).

The existing rows are done here, per tenant (row-level security shows the owner a tenant's rows only while it acts
for it): `source_system` is backfilled from each ref, and each ref in clear is sealed under its fact's data key —
when sealing is on (`SEALING`, lib.sealing.enabled); with it off the refs stay in clear until `manage.py
seal_values` seals them, as migration 0020 left the values written before it. Both backends. The clear versions of
the rewritten rows stay as dead tuples until `VACUUM FULL` of the two tables (docs/deletion.md). Backwards, the refs
are opened again into clear text."""

from typing import Any

from django.db import migrations, models

import memory_admin.lib.sealing

BATCH = 1000

RECORDS = "memory_memoryrecord"
ATTEMPTS = "memory_recheckattempt"


def _tenants(apps: Any, schema_editor: Any) -> list[int]:
    Tenant = apps.get_model("accounts", "Tenant")
    return list(Tenant.objects.using(schema_editor.connection.alias).order_by("pk").values_list("pk", flat=True))


def _each_tenant(apps: Any, schema_editor: Any, work: Any) -> None:
    """`work(cursor, tenant_id)` for every tenant, acting for it on PostgreSQL (row-level security)."""
    conn = schema_editor.connection
    postgres = conn.vendor == "postgresql"
    with conn.cursor() as cursor:
        acting_for = ""
        if postgres:
            cursor.execute("SELECT current_setting('app.tenant_id', true)")
            acting_for = cursor.fetchone()[0] or ""
        for tenant_id in _tenants(apps, schema_editor):
            if postgres:
                cursor.execute("SELECT set_config('app.tenant_id', %s, false)", [str(tenant_id)])
            work(cursor, tenant_id)
        if postgres:
            cursor.execute("SELECT set_config('app.tenant_id', %s, false)", [acting_for])


def _chunks(cursor: Any, select: str, tenant_id: int) -> Any:
    """The rows of `select` (first column the id; parameters tenant id and last id), BATCH at a time."""
    last = 0
    while True:
        cursor.execute(select, [tenant_id, last, BATCH])
        chunk = cursor.fetchall()
        if not chunk:
            return
        last = chunk[-1][0]
        yield chunk


RECORD_ROWS = (
    f"SELECT id, project_id, subject_id, predicate, source_canonical_ref FROM {RECORDS} "
    "WHERE tenant_id = %s AND id > %s ORDER BY id LIMIT %s"
)
ATTEMPT_ROWS = (
    f"SELECT a.id, r.project_id, r.subject_id, r.predicate, a.source_ref FROM {ATTEMPTS} a "
    f"JOIN {RECORDS} r ON r.id = a.record_id WHERE a.tenant_id = %s AND a.id > %s AND a.source_ref <> '' "
    "ORDER BY a.id LIMIT %s"
)


def seal_refs(apps: Any, schema_editor: Any) -> None:
    from memory_admin.lib import sealing

    seal = sealing.enabled()

    def sealed(tenant_id: int, project_id: int, subject_id: str, predicate: str, ref: str, purpose: str) -> str:
        if not seal or not ref or sealing.is_sealed(ref):
            return ref
        return sealing.seal_text(ref, sealing.Fact(tenant_id, project_id, subject_id, predicate), purpose)

    def work(cursor: Any, tenant_id: int) -> None:
        for chunk in _chunks(cursor, RECORD_ROWS, tenant_id):
            params = [
                [sealing.system_of(ref), sealed(tenant_id, p, s, pr, ref, "record.source_ref"), pk]
                for pk, p, s, pr, ref in chunk
            ]
            cursor.executemany(
                f"UPDATE {RECORDS} SET source_system = %s, source_canonical_ref = %s WHERE id = %s", params
            )
        if not seal:
            return
        for chunk in _chunks(cursor, ATTEMPT_ROWS, tenant_id):
            params = [[sealed(tenant_id, p, s, pr, ref, "recheck.source_ref"), pk] for pk, p, s, pr, ref in chunk]
            cursor.executemany(f"UPDATE {ATTEMPTS} SET source_ref = %s WHERE id = %s", params)

    _each_tenant(apps, schema_editor, work)


def open_refs(apps: Any, schema_editor: Any) -> None:
    from memory_admin.lib import sealing

    def work(cursor: Any, tenant_id: int) -> None:
        for table, select, column, purpose in (
            (RECORDS, RECORD_ROWS, "source_canonical_ref", "record.source_ref"),
            (ATTEMPTS, ATTEMPT_ROWS, "source_ref", "recheck.source_ref"),
        ):
            for chunk in _chunks(cursor, select, tenant_id):
                params = [
                    [sealing.open_text(ref, purpose)[:500], pk] for pk, *_, ref in chunk if sealing.is_sealed(ref)
                ]
                if params:
                    cursor.executemany(f"UPDATE {table} SET {column} = %s WHERE id = %s", params)

    _each_tenant(apps, schema_editor, work)


class Migration(migrations.Migration):
    dependencies = [
        ("accounts", "0002_token_lifecycle"),
        ("memory", "0020_sealed_values"),
    ]

    operations = [
        migrations.AddField(
            model_name="memoryrecord",
            name="source_system",
            field=memory_admin.lib.sealing.SystemOfField(
                blank=True, default="", max_length=64, of="source_canonical_ref"
            ),
        ),
        migrations.AlterField(
            model_name="memoryrecord",
            name="source_canonical_ref",
            field=memory_admin.lib.sealing.SealedTextField(purpose="record.source_ref"),
        ),
        migrations.AlterField(
            model_name="recheckattempt",
            name="source_ref",
            field=memory_admin.lib.sealing.SealedTextField(blank=True, purpose="recheck.source_ref"),
        ),
        migrations.RunPython(seal_refs, open_refs),
        migrations.AddIndex(
            model_name="memoryrecord",
            index=models.Index(fields=["tenant", "source_system", "-id"], name="record_tenant_source_newest"),
        ),
    ]
