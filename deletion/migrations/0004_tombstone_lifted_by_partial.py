"""One index entry fewer for every tombstone a deletion writes (issue 16): the index on `lifted_by` (the principal's
PROTECT check) holds only lifted tombstones, the only ones that name a principal."""

import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("accounts", "0002_token_lifecycle"),
        ("deletion", "0003_write_path_indexes"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.AlterField(
            model_name="tombstone",
            name="lifted_by",
            field=models.ForeignKey(
                db_index=False,
                null=True,
                on_delete=django.db.models.deletion.PROTECT,
                related_name="+",
                to=settings.AUTH_USER_MODEL,
            ),
        ),
        migrations.AddIndex(
            model_name="tombstone",
            index=models.Index(
                condition=models.Q(("lifted_by__isnull", False)), fields=["lifted_by"], name="tombstone_lifted_by"
            ),
        ),
    ]
