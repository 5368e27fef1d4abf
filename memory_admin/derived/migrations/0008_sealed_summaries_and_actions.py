"""Sealed values (issue 35, item 4): the columns that hold values and texts about them become lib.sealing's fields.
The database type is unchanged (no SQL): the fields seal on write and open on read; rows written before stay in clear
until `manage.py seal_values` seals them."""

from django.db import migrations

import memory_admin.lib.sealing


class Migration(migrations.Migration):
    dependencies = [
        ("derived", "0007_pending_vectors"),
    ]

    operations = [
        migrations.AlterField(
            model_name="scheduledaction",
            name="payload",
            field=memory_admin.lib.sealing.SealedJSONField(blank=True, default=dict, purpose="action.payload"),
        ),
        migrations.AlterField(
            model_name="summary",
            name="text",
            field=memory_admin.lib.sealing.SealedTextField(purpose="summary.text"),
        ),
    ]
