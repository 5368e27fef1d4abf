"""The record shape every door reads and writes, defined once.

The API, the batch endpoint, `manage.py import`, the MCP tools and the dashboard parse a fact from the same
serializers (`facts`, `items`) and render records, facts and search hits with the same functions (`records`,
`derived`); the Python client's `fact_body` builds the same body. Doors import from here, never from each other
(the import-linter contract "Doors do not import each other" in pyproject.toml). Rules stay in the domain
modules: these parse and render only.
"""
