"""Two indexes fewer for every tombstone written (issue 16, a deletion's 10,000 tombstones in one INSERT): the
`LIKE` companions of the memory_id and scope_hash indexes (both are looked up by equality only)."""

from django.db import migrations

from memory_admin.migration_helpers import without_like_indexes


class Migration(migrations.Migration):
    dependencies = [
        ("deletion", "0002_tombstone_ledger"),
    ]

    operations = [
        without_like_indexes("deletion_tombstone", ["memory_id", "scope_hash"]),
    ]
