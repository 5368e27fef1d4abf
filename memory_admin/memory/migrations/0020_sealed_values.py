"""Sealed values (issue 35, item 4): the columns that hold values and texts about them become lib.sealing's fields.
The database type is unchanged (no SQL): the fields seal on write and open on read; rows written before stay in clear
until `manage.py seal_values` seals them."""

from django.db import migrations

import memory_admin.lib.sealing


class Migration(migrations.Migration):
    dependencies = [
        ("memory", "0019_planner_statistics_function"),
    ]

    operations = [
        migrations.AlterField(
            model_name="auditevent",
            name="after",
            field=memory_admin.lib.sealing.SealedJSONField(
                blank=True, null=True, purpose="audit.snapshot", snapshot=True
            ),
        ),
        migrations.AlterField(
            model_name="auditevent",
            name="before",
            field=memory_admin.lib.sealing.SealedJSONField(
                blank=True, null=True, purpose="audit.snapshot", snapshot=True
            ),
        ),
        migrations.AlterField(
            model_name="auditevent",
            name="reason",
            field=memory_admin.lib.sealing.SealedTextField(blank=True, by_writer=True, purpose="audit.reason"),
        ),
        migrations.AlterField(
            model_name="dispute",
            name="resolution_reason",
            field=memory_admin.lib.sealing.SealedTextField(blank=True, purpose="dispute.resolution_reason"),
        ),
        migrations.AlterField(
            model_name="expiryrequest",
            name="decision_reason",
            field=memory_admin.lib.sealing.SealedTextField(blank=True, purpose="expiry.decision_reason"),
        ),
        migrations.AlterField(
            model_name="expiryrequest",
            name="reason",
            field=memory_admin.lib.sealing.SealedTextField(purpose="expiry.reason"),
        ),
        migrations.AlterField(
            model_name="memoryrecord",
            name="attention",
            field=memory_admin.lib.sealing.SealedTextField(blank=True, purpose="record.attention"),
        ),
        migrations.AlterField(
            model_name="memoryrecord",
            name="status_reason",
            field=memory_admin.lib.sealing.SealedTextField(blank=True, purpose="record.status_reason"),
        ),
        migrations.AlterField(
            model_name="memoryrecord",
            name="value",
            field=memory_admin.lib.sealing.SealedJSONField(purpose="record.value"),
        ),
        migrations.AlterField(
            model_name="recheckattempt",
            name="error",
            field=memory_admin.lib.sealing.SealedTextField(blank=True, purpose="recheck.error"),
        ),
        migrations.AlterField(
            model_name="recheckattempt",
            name="observed_value",
            field=memory_admin.lib.sealing.SealedJSONField(blank=True, null=True, purpose="recheck.observed_value"),
        ),
    ]
