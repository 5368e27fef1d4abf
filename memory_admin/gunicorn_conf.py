"""gunicorn's settings for the production profile (docs/deploying.md):

    gunicorn -c python:memory_admin.gunicorn_conf --bind 0.0.0.0:8000 memory_admin.wsgi

The access log names the method, the path, the status, the size and the time: never the query string
(`%(q)s`), the request line (`%(r)s`, which carries it) or the Referer (`%(f)s`, the previous page's full
URL), since a subject id or a search text sits there (docs/operations.md "What is logged"). Paths hold only ids the
product generated (memory ids, request ids). Workers: gunicorn reads WEB_CONCURRENCY; trusted proxies:
FORWARDED_ALLOW_IPS.
"""

from __future__ import annotations

accesslog = "-"
errorlog = "-"
access_log_format = '%(h)s %(t)s "%(m)s %(U)s %(H)s" %(s)s %(B)s %(L)s'
