"""Two indexes fewer for every record and audit event written (issue 16, writes): the tenant foreign keys'
own indexes (every index a query by tenant needs begins with tenant_id: record_tenant_*, audit_tenant_*),
and the `LIKE` companion of memory_id's unique index (no query matches memory ids by prefix)."""

import django.db.models.deletion
from django.db import migrations, models

from memory_admin.migration_helpers import without_like_indexes


class Migration(migrations.Migration):
    dependencies = [
        ("accounts", "0002_token_lifecycle"),
        ("memory", "0012_record_counts_by_statement"),
    ]

    operations = [
        migrations.AlterField(
            model_name="auditevent",
            name="tenant",
            field=models.ForeignKey(
                db_index=False, on_delete=django.db.models.deletion.PROTECT, related_name="+", to="accounts.tenant"
            ),
        ),
        migrations.AlterField(
            model_name="memoryrecord",
            name="tenant",
            field=models.ForeignKey(
                db_index=False, on_delete=django.db.models.deletion.PROTECT, related_name="+", to="accounts.tenant"
            ),
        ),
        without_like_indexes("memory_memoryrecord", ["memory_id"]),
    ]
