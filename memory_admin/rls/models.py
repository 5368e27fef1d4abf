"""No models: this module exists so that Django sends this app its `post_migrate` signal.

Django emits `post_migrate` once per app config that has a models module (`emit_post_migrate_signal`), on
`migrate` (whichever app is named, `--run-syncdb` included), on `flush`, and on the test database's creation.
Without this file the app's handler (apps.py) never ran, and a database migrated by the documented command
had no tenant policy and no grant for the app role. tests/accounts/test_migrate_applies_rls.py proves the command
alone is enough.
"""
