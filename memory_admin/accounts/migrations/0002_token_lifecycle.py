"""Tokens with a lifecycle (issue 12): a required name, an optional expiry, the last use, who issued and who
revoked them (with a reason), and a longer display prefix for new tokens."""

from __future__ import annotations

from typing import Any

import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models


def name_unnamed_tokens(apps: Any, schema_editor: Any) -> None:
    """Tokens issued before names existed get "token-<id>", so every token has a name a person can use."""
    ApiToken = apps.get_model("accounts", "ApiToken")
    for token in ApiToken.objects.filter(name="").only("pk"):
        ApiToken.objects.filter(pk=token.pk).update(name=f"token-{token.pk}")


class Migration(migrations.Migration):
    dependencies = [
        ("accounts", "0001_initial"),
    ]

    operations = [
        migrations.RenameField(model_name="apitoken", old_name="label", new_name="name"),
        migrations.RunPython(name_unnamed_tokens, migrations.RunPython.noop),
        migrations.AlterField(model_name="apitoken", name="name", field=models.CharField(max_length=100)),
        migrations.AlterField(model_name="apitoken", name="prefix", field=models.CharField(max_length=16)),
        migrations.AddField(
            model_name="apitoken",
            name="created_by",
            field=models.ForeignKey(
                blank=True,
                help_text="null: a command",
                null=True,
                on_delete=django.db.models.deletion.SET_NULL,
                related_name="+",
                to=settings.AUTH_USER_MODEL,
            ),
        ),
        migrations.AddField(
            model_name="apitoken", name="expires_at", field=models.DateTimeField(blank=True, null=True)
        ),
        migrations.AddField(
            model_name="apitoken", name="last_used_at", field=models.DateTimeField(blank=True, null=True)
        ),
        migrations.AddField(
            model_name="apitoken",
            name="revoked_by",
            field=models.ForeignKey(
                blank=True,
                null=True,
                on_delete=django.db.models.deletion.SET_NULL,
                related_name="+",
                to=settings.AUTH_USER_MODEL,
            ),
        ),
        migrations.AddField(
            model_name="apitoken", name="revoke_reason", field=models.CharField(blank=True, max_length=2000)
        ),
    ]
