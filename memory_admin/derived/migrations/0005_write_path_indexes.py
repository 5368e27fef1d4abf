"""Two indexes fewer for every log line written or hidden (issue 16, a deletion's hiding of 100k lines): the
tenant foreign key's own index (event_project_newest and event_session begin with tenant_id) and the `LIKE`
companion of public_id's unique index (no query matches event ids by prefix)."""

import django.db.models.deletion
from django.db import migrations, models

from memory_admin.migration_helpers import without_like_indexes


class Migration(migrations.Migration):
    dependencies = [
        ("accounts", "0002_token_lifecycle"),
        ("derived", "0004_event_subjects"),
    ]

    operations = [
        migrations.AlterField(
            model_name="event",
            name="tenant",
            field=models.ForeignKey(
                db_index=False, on_delete=django.db.models.deletion.PROTECT, related_name="+", to="accounts.tenant"
            ),
        ),
        without_like_indexes("derived_event", ["public_id"]),
    ]
