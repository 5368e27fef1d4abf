"""Claiming due rechecks at 10M records (issue 16, part 4): a claims table and a covering due index.

Stamping `recheck_claimed_at` on 100k due records locked and rewrote 100k rows scattered over the table
(FOR UPDATE writes each row's lock into its heap page, then the stamp writes a new version, into every index
of the table once the page has no room left): measured on 2M rows, one claim of 100k wrote 2.5 GB of WAL
(1.2M records, 437k full-page images) and took 15 s, then 78 s and 172 s as the versions piled up. On PostgreSQL the sweep now records its
claims in `memory_recheckclaim` instead, one narrow row per claimed record appended to a small table
(rechecks.claim_due), and never writes the records themselves. SQLite keeps the stamp.

- `memory_recheckclaim`: record id (primary key: a record is claimed at most once; a landed recheck deletes
  its claim by it), tenant (row-level security, memory_admin/rls, applies to it like to every tenant table)
  and claim time. No other index: each claim adds one row and one key, and the table only ever holds the
  claims outstanding, so finding the expired ones reads it whole. No foreign key: a purged record's claim
  simply expires. UNLOGGED: a claim is a lease of minutes, not a record to keep, and appending 100k of them
  to the WAL doubled the claim's time (measured on 2M rows: 0.96 s → 0.5 s for 50k claims). A crash (or a
  failover to a replica) empties the table: records claimed before it may then be claimed once more while
  their rechecks are still queued, i.e. rechecked twice, which records two attempts and changes nothing else.
- TRUNCATE of the records (test flushes) truncates the claims.
- `record_due_for_recheck` becomes a covering index over exactly the due predicate's fixed part (accepted,
  not tombstoned, with a recheck date), ordered by (recheck_after, id) and carrying what the claim reads
  (tenant for row-level security, valid_to): the claim is an index-only scan. No update stops being HOT:
  tenant_id, valid_to (the exclusion constraint) and status were indexed already, and a deletion's tombstone
  sets status together with tombstoned_at.
"""

from __future__ import annotations

from django.db import migrations, models

from memory_admin.migration_helpers import on_postgres

FORWARD = [
    """
    CREATE UNLOGGED TABLE memory_recheckclaim (
        record_id bigint NOT NULL PRIMARY KEY,
        tenant_id bigint NOT NULL,
        claimed_at timestamptz NOT NULL
    )
    """,
    """
    CREATE FUNCTION memory_recheckclaim_truncated() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        -- TRUNCATE, not DELETE: row-level security would limit a DELETE to one tenant's rows.
        TRUNCATE memory_recheckclaim;
        RETURN NULL;
    END $$
    """,
    """
    CREATE TRIGGER memory_recheckclaim_truncate AFTER TRUNCATE ON memory_memoryrecord
    FOR EACH STATEMENT EXECUTE FUNCTION memory_recheckclaim_truncated()
    """,
]

BACKWARD = [
    "DROP TRIGGER IF EXISTS memory_recheckclaim_truncate ON memory_memoryrecord",
    "DROP FUNCTION IF EXISTS memory_recheckclaim_truncated()",
    "DROP TABLE IF EXISTS memory_recheckclaim",
]


class Migration(migrations.Migration):
    dependencies = [
        ("memory", "0009_record_counts"),
    ]

    operations = [
        migrations.RemoveIndex(model_name="memoryrecord", name="record_due_for_recheck"),
        migrations.AddIndex(
            model_name="memoryrecord",
            index=models.Index(
                condition=models.Q(
                    ("recheck_after__isnull", False), ("status", "accepted"), ("tombstoned_at__isnull", True)
                ),
                fields=["recheck_after", "id"],
                include=("tenant", "valid_to"),
                name="record_due_for_recheck",
            ),
        ),
        on_postgres(FORWARD, BACKWARD),
    ]
