"""What row-level security covers beyond the tables with their own tenant_id (memory_admin/rls)."""

from __future__ import annotations

# Tables without a tenant_id in their models that hang off tenant tables (memory_admin/rls/policies.py,
# link_tables): migrate gives them the column, kept by a trigger from their parents.
LINK_TABLES = {
    "derived_summarybase",
    "derived_actionbase",
    "derived_contextitem",
    "deletion_storeprogress",
    "memory_dispute_candidates",
    "derived_cacheentry_records",
}
