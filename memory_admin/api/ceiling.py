"""A bench-only view: the API stack's own ceiling (bench/load.py), served only when BENCH_CEILING_VIEW=1.

The same authentication, permission and throttle classes as every API view (REST_FRAMEWORK defaults, the
`reads` scope), and a constant JSON answer: what the stack costs before any domain work. memory_admin/urls.py
adds it only when the environment variable is set; tests/ops/test_load_ceiling_view.py checks it is absent otherwise.
"""

from __future__ import annotations

from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

ANSWER = {"value": "2026-11-02T17:00+09:00", "status": "accepted", "freshness": "fresh", "action_allowed": True}


class CeilingView(APIView):
    def get(self, request: Request) -> Response:
        return Response(ANSWER)
