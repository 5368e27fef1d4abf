"""`this`: the product itself, in a fresh throwaway tenant.

The tenant, its principals, tokens and field policies are made through the domain functions; the facts are
asserted through `assert_fact` with the case's fixed clock (the API stamps record time with the real clock);
everything an agent does after that — summaries, plans, loaded contexts, a deletion request, and every probe —
goes over the HTTP API with the principal's token. The whole case runs in one transaction that is rolled back
at the end, so nothing of the throwaway tenant is kept (the audit log's trigger forbids deleting its events).
"""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta
from typing import Any

import httpx
from django.db import transaction
from django.utils import timezone

from memory_admin.accounts.models import Role, Tenant
from memory_admin.accounts.services import create_token, ensure_principal
from memory_admin.accounts.tenancy import tenant_context
from memory_admin.conformance import http
from memory_admin.conformance.cases import Case
from memory_admin.conformance.source import SourceScript, http_json_settings
from memory_admin.conformance.targets import Reading, Session, Target, iter_steps
from memory_admin.memory import actions
from memory_admin.memory.actions import Assertion
from memory_admin.memory.models import FieldPolicy, MemoryRecord
from memory_admin.memory.policies import save_field_policy

ADMIN = "conformance-admin"
COMPLIANCE = "conformance-compliance"


class _Rollback(Exception):
    pass


def _error(response: httpx.Response) -> tuple[str, dict[str, Any]]:
    try:
        body = response.json()
    except ValueError:
        body = {}
    if not isinstance(body, dict):
        body = {}
    return str(body.get("code") or f"http_{response.status_code}"), body


class ThisSession(Session):
    def __init__(self, case: Case, tenant: Tenant, tokens: dict[str, str]) -> None:
        self.case = case
        self.tenant = tenant
        # A project id of its own: on SQLite a rolled-back tenant's id comes back for the next one, and
        # answers cached for "now" (keyed by tenant id and project) must never be served to another run.
        self.project = f"{case.project}.{secrets.token_hex(4)}"
        self.clients = {name: http.client(token) for name, token in tokens.items()}
        self.facts: dict[str, tuple[str, int]] = {}  # case fact id -> (memory_id, revision)
        self.items: dict[str, str] = {}  # case summary/plan/load id -> public id

    def close(self) -> None:
        for c in self.clients.values():
            c.close()

    # --- building the case's history -------------------------------------------------------------

    def _bases(self, ids: list[str]) -> list[dict[str, Any]]:
        return [{"memory_id": self.facts[i][0], "revision": self.facts[i][1]} for i in ids]

    def _post(self, by: str, path: str, body: dict[str, Any]) -> dict[str, Any]:
        response = self.clients[by].post(path, json=body)
        if response.status_code >= 400:
            raise RuntimeError(f"{self.case.name}: POST {path} answered {response.status_code}: {response.text[:300]}")
        return dict(response.json())

    def valid_from(self, step: dict[str, Any]) -> datetime:
        return self.case.at(step["valid_from"])

    def assert_fact(self, principal: Any, step: dict[str, Any]) -> None:
        """Told at the case's instant; `expected_revision` is the revision of the fact's head (what a writer
        reads before writing), none for a new fact."""
        case = self.case
        head = (
            MemoryRecord.objects.filter(
                tenant_id=self.tenant.pk,
                project__key=self.project,
                subject_id=step["subject"],
                predicate=step["predicate"],
                is_head=True,
            )
            .values_list("revision", flat=True)
            .first()
        )
        told = case.at(step["told_at"])
        result = actions.assert_fact(
            principal,
            Assertion(
                project_id=self.project,
                subject_id=step["subject"],
                predicate=step["predicate"],
                value=step["value"],
                valid_from=self.valid_from(step),
                valid_to=case.at(step["valid_to"]) if step.get("valid_to") else None,
                source_canonical_ref=step["source"],
                source_revision=step["revision"],
                expected_revision=head,
            ),
            now=told,
            verified_at=told if step.get("verified") else None,
        )
        self.facts[step["id"]] = (result.record.memory_id, result.record.revision)

    def summary(self, step: dict[str, Any]) -> None:
        body = {"project_id": self.project, "text": step["text"], "derived_from": self._bases(step["from"])}
        self.items[step["id"]] = self._post(step["by"], "/api/v1/summaries/", body)["id"]

    def plan(self, step: dict[str, Any]) -> None:
        body = {
            "project_id": self.project,
            "kind": step["kind"],
            "payload": step.get("payload") or {},
            "due_at": self.case.at(step["due_at"]).isoformat(),
            "derived_from": self._bases(step["from"]),
        }
        self.items[step["id"]] = self._post(step["by"], "/api/v1/scheduled-actions/", body)["id"]

    def load(self, step: dict[str, Any]) -> None:
        body = {
            "session_id": step["session"],
            "project_id": self.project,
            "memories": self._bases(step["from"]),
            "expires_at": (timezone.now() + timedelta(days=1)).isoformat(),
        }
        self.items[step["id"]] = self._post(step["by"], "/api/v1/context-loads/", body)["id"]

    def delete(self, step: dict[str, Any]) -> None:
        body = {
            "project_id": self.project,
            "scope": {"subject_id": step["subject"]},
            "reason": f"conformance case {self.case.name}",
        }
        self._post(COMPLIANCE, "/api/v1/deletion-requests/", body)

    # --- what the probe agent asks ---------------------------------------------------------------

    def read_fact(
        self,
        by: str,
        subject: str,
        predicate: str,
        *,
        purpose: str = "answer",
        valid_at: datetime | None = None,
        known_at: datetime | None = None,
    ) -> Reading:
        params = {"project_id": self.project, "subject_id": subject, "predicate": predicate, "purpose": purpose}
        if valid_at is not None:
            params["valid_at"] = valid_at.isoformat()
        if known_at is not None:
            params["known_at"] = known_at.isoformat()
        response = self.clients[by].get("/api/v1/facts/current/", params=params)
        if response.status_code != 200:
            code, body = _error(response)
            shown = [body["last_verified_value"]] if body.get("last_verified_value") is not None else []
            return Reading(stop=code, action_allowed=False, shown=shown, raw={"status": response.status_code, **body})
        body = response.json()
        candidates = [c.get("value") for c in body.get("candidates") or []]
        shown = [v for v in [body.get("value"), body.get("last_verified_value"), *candidates] if v is not None]
        if body.get("status") == MemoryRecord.Status.DISPUTED and body.get("memory_id") is None:
            return Reading(stop="disputed", status="disputed", action_allowed=False, shown=shown, raw=body)
        return Reading(
            value=body.get("value"),
            has_value=True,
            status=str(body.get("status") or ""),
            caveat=str(body.get("caveat") or ""),
            action_allowed=bool(body.get("action_allowed")),
            shown=shown,
            raw=body,
        )

    def _item(self, by: str, path: str, usable_status: str, value_of: Any) -> Reading:
        response = self.clients[by].get(path)
        if response.status_code != 200:
            code, body = _error(response)
            return Reading(stop=code, usable=False, raw={"status": response.status_code, **body})
        body = response.json()
        usable = body.get("status") == usable_status
        return Reading(
            value=value_of(body),
            has_value=True,
            status=str(body.get("status")),
            usable=usable,
            stop="" if usable else f"status {body.get('status')}",
            shown=[value_of(body)],
            raw=body,
        )

    def read_summary(self, by: str, summary: str) -> Reading:
        return self._item(by, f"/api/v1/summaries/{self.items[summary]}/", "current", lambda b: b.get("text"))

    def read_plan(self, by: str, plan: str) -> Reading:
        return self._item(by, f"/api/v1/scheduled-actions/{self.items[plan]}/", "scheduled", lambda b: b.get("payload"))

    def _notices(self, by: str, load: str) -> list[dict[str, Any]]:
        response = self.clients[by].get(f"/api/v1/agents/{by}/invalidations/")
        response.raise_for_status()
        return [n for n in response.json()["results"] if n["context_load_id"] == self.items[load]]

    def open_notices(self, by: str, load: str) -> list[str]:
        by_memory = {memory_id: fact for fact, (memory_id, _) in self.facts.items()}
        return [by_memory.get(n["memory_id"], n["memory_id"]) for n in self._notices(by, load)]

    def acknowledge(self, by: str, load: str) -> None:
        for notice in self._notices(by, load):
            self.clients[by].post(f"/api/v1/agents/{by}/invalidations/{notice['id']}/ack/")


def _policy(project: str, data: dict[str, Any], source_url: str) -> dict[str, Any]:
    source = data.get("canonical_source")
    return {
        "project_id": project,
        "predicate": data["predicate"],
        "authorized_issuers": list(data.get("issuers") or []),
        "canonical_ref_prefix": data.get("canonical_prefix") or "",
        "canonical_source": http_json_settings(source_url) if source == "stand-in" else source,
        "recheck_interval": timedelta(hours=data.get("recheck_interval_hours", 24)),
        "recheck_before_action": bool(data.get("recheck_before_action", False)),
        "on_failure": data.get("on_failure", FieldPolicy.OnFailure.ANSWER_WITH_CAVEAT),
    }


class ThisTarget(Target):
    name = "this"
    label = "this system"
    description = "This product, in a fresh throwaway tenant (policies per field, over the HTTP API)."
    is_product = True
    session_class: type[ThisSession] = ThisSession

    @contextmanager
    def session(self, case: Case, source: SourceScript, source_url: str) -> Iterator[Session]:
        try:
            with transaction.atomic():
                tenant = Tenant.objects.create(
                    slug=f"conformance-{secrets.token_hex(6)}", name=f"Conformance {case.name}"
                )
                with tenant_context(tenant.pk):
                    session = self._build(case, tenant, source, source_url)
                    try:
                        yield session
                    finally:
                        session.close()
                raise _Rollback
        except _Rollback:
            pass

    def _build(self, case: Case, tenant: Tenant, source: SourceScript, source_url: str) -> ThisSession:
        principals = {name: ensure_principal(tenant.slug, name, [Role.AGENT]) for name in case.principals}
        principals[ADMIN] = ensure_principal(tenant.slug, ADMIN, [Role.ADMIN])
        principals[COMPLIANCE] = ensure_principal(tenant.slug, COMPLIANCE, [Role.COMPLIANCE])
        tokens = {name: create_token(p, "conformance")[1] for name, p in principals.items()}
        session = self.session_class(case, tenant, tokens)
        for data in case.policies:
            save_field_policy(principals[ADMIN], _policy(session.project, data, source_url))
        for kind, step in iter_steps(case):
            match kind:
                case "assert":
                    session.assert_fact(principals[step["by"]], step)
                case "summary":
                    session.summary(step)
                case "plan":
                    session.plan(step)
                case "load":
                    session.load(step)
                case "delete":
                    session.delete(step)
                case "source":
                    mode = case.failure if step["mode"] == "failure" else step["mode"]
                    revision = case.revision(int(step["revision"])) if "revision" in step else None
                    source.set(session.project, step["subject"], mode=mode, value=step.get("value"), revision=revision)
                case _:
                    raise ValueError(f"{case.name}: unknown step {kind!r}")
        return session
