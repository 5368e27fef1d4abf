"""A subject deletion keeps each deleted value out of the subject under any predicate and in any spelling that is
the same value (issue 30, item 4): its record tombstones get a keyed hash of the subject and the canonical value."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("deletion", "0004_tombstone_lifted_by_partial"),
    ]

    operations = [
        migrations.AddField(
            model_name="tombstone",
            name="subject_value_hash",
            field=models.CharField(blank=True, max_length=64, null=True),
        ),
        migrations.AddIndex(
            model_name="tombstone",
            index=models.Index(
                condition=models.Q(("subject_value_hash__isnull", False)),
                fields=["subject_value_hash"],
                name="tombstone_subject_value",
            ),
        ),
    ]
