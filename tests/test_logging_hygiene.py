"""What the product itself logs carries no memory content (docs/operations.md "What is logged"): request lines lose
their query strings, failed requests lose their body and the exception's message, and the worker logs no
task arguments or results."""

from __future__ import annotations

import json
import logging
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest
from celery import current_app
from celery.app import trace
from celery.worker import strategy
from django.core.servers.basehttp import WSGIRequestHandler
from django.http import HttpRequest, HttpResponse
from django.test import Client
from django.urls import path

from deletion import stores
from deletion.stores.base import Job
from memory_admin.logging_filters import WITHHELD, ContentFreeFormatter, ContentFreeRecords, content_free_traceback
from tests.celery_worker import require_real_broker, running_worker, wait_until

SUBJECT = "person-sato-4711"
VALUE = "Room 3F-east, badge 99812"


@pytest.fixture
def server_log(caplog: pytest.LogCaptureFixture) -> Iterator[pytest.LogCaptureFixture]:
    """runserver's logger does not propagate (Django's default, kept in settings): listen on it directly."""
    logger = logging.getLogger("django.server")
    logger.addHandler(caplog.handler)
    try:
        yield caplog
    finally:
        logger.removeHandler(caplog.handler)


def test_the_configured_loggers_carry_the_filter() -> None:
    for name in ("django.server", "django.request", "django.security", "celery.app.trace", "celery.worker.strategy"):
        assert any(isinstance(f, ContentFreeRecords) for f in logging.getLogger(name).filters), name


def test_the_root_handler_writes_any_other_record_content_free_and_leaves_the_record_alone() -> None:
    [formatter] = [h.formatter for h in logging.getLogger().handlers if isinstance(h.formatter, ContentFreeFormatter)]
    try:
        raise ValueError(VALUE)
    except ValueError as error:
        record = logging.LogRecord(
            "memory_admin.anything", logging.ERROR, __file__, 1, "fetching %s", (f"/x/?subject={SUBJECT}",), None
        )
        record.exc_info = (ValueError, error, error.__traceback__)
    text = formatter.format(record)
    assert "fetching /x/?…" in text and f"ValueError: {WITHHELD}" in text
    assert SUBJECT not in text and VALUE not in text
    assert record.exc_info is not None and record.exc_text is None  # other handlers still get the exception


def test_runserver_request_lines_are_logged_without_their_query_string(server_log: pytest.LogCaptureFixture) -> None:
    # bin/run serves with runserver: its request handler logs the request line exactly as here.
    handler = WSGIRequestHandler.__new__(WSGIRequestHandler)
    handler.requestline = f"GET /facts/?project=project-a&subject={SUBJECT}&predicate=meeting_room HTTP/1.1"
    with socket.socket() as connection:
        handler.request = connection  # type: ignore[assignment]  # runserver's handler holds the socket
        handler.log_request(200, 5120)
        handler.requestline = f"GET /api/v1/records/?subject_id={SUBJECT} HTTP/1.1"
        handler.log_request(404, 80)
    lines = [r for r in server_log.records if r.name == "django.server"]
    assert [r.getMessage() for r in lines] == [
        '"GET /facts/?… HTTP/1.1" 200 5120',
        '"GET /api/v1/records/?… HTTP/1.1" 404 80',
    ]
    assert (
        lines[1].levelno == logging.WARNING and lines[1].__dict__["status_code"] == 404
    )  # Django's own level and extra kept
    assert SUBJECT not in server_log.text


def _boom(request: HttpRequest) -> HttpResponse:
    payload = json.loads(request.body)
    raise ValueError(f"cannot store {payload['value']!r} for {request.GET['subject_id']}")


urlpatterns = [path("api/v1/boom/", _boom)]
handler500 = "memory_admin.http_errors.server_error"


@pytest.mark.urls("tests.test_logging_hygiene")
def test_a_server_error_is_logged_without_the_body_the_query_or_the_exception_message(
    caplog: pytest.LogCaptureFixture,
) -> None:
    client = Client(raise_request_exception=False)
    with caplog.at_level(logging.INFO):
        response = client.post(
            f"/api/v1/boom/?subject_id={SUBJECT}", data={"value": VALUE}, content_type="application/json"
        )
    assert response.status_code == 500
    assert response.json()["code"] == "server_error"
    [record] = [r for r in caplog.records if r.name == "django.request"]
    assert record.getMessage() == "Internal Server Error: /api/v1/boom/"
    assert record.__dict__["request"] is None  # no handler can render the request (GET, POST, headers)
    assert record.exc_info is None
    # The traceback's frames stay, so the failure can be found; the message quoting the value does not.
    assert record.exc_text is not None
    assert "in _boom" in record.exc_text and f"ValueError: {WITHHELD}" in record.exc_text
    assert VALUE not in caplog.text and SUBJECT not in caplog.text


def test_exception_messages_are_logged_only_when_the_operator_asks(caplog: pytest.LogCaptureFixture) -> None:
    logger = logging.getLogger("tests.logging_hygiene")
    verbose = ContentFreeRecords(exception_messages=True)
    logger.addFilter(verbose)
    try:
        try:
            raise ValueError(VALUE)
        except ValueError:
            logger.exception("failed")
    finally:
        logger.removeFilter(verbose)
    assert VALUE in caplog.text


def test_a_chained_traceback_names_each_exception_type_but_no_message() -> None:
    try:
        try:
            raise KeyError(SUBJECT)
        except KeyError as inner:
            raise RuntimeError(VALUE) from inner
    except RuntimeError as outer:
        text = content_free_traceback(outer)
    assert text.index("KeyError") < text.index("RuntimeError")
    assert SUBJECT not in text and VALUE not in text


def test_celery_task_events_are_logged_without_arguments_results_or_messages(caplog: pytest.LogCaptureFixture) -> None:
    """The records Celery's worker writes, made the way it makes them (a context dict, also as `data`)."""
    received = {"id": "t-1", "name": "x.task", "args": f"[{SUBJECT!r}]", "kwargs": "{}", "eta": None}
    succeeded = {"id": "t-1", "name": "x.task", "runtime": 0.1, "return_value": VALUE}
    failed = {
        "id": "t-1",
        "name": "x.task",
        "description": "raised unexpected",
        "exc": f"ValueError({VALUE!r})",
        "traceback": VALUE,
        "args": f"[{SUBJECT!r}]",
        "kwargs": "{}",
    }
    with caplog.at_level(logging.INFO):
        logging.getLogger(strategy.__name__).info(trace.LOG_RECEIVED, received, extra={"data": received})
        logging.getLogger(trace.__name__).info(trace.LOG_SUCCESS, succeeded, extra={"data": succeeded})
        logging.getLogger(trace.__name__).error(trace.LOG_FAILURE, failed, extra={"data": failed})
    messages = [r.getMessage() for r in caplog.records]
    assert messages == [
        "Task x.task[t-1] received",
        "Task x.task[t-1] succeeded in 0.1s: <not logged>",
        f"Task x.task[t-1] raised unexpected: ValueError: {WITHHELD}",
    ]
    assert all(r.__dict__["data"]["args"] == "<not logged>" for r in caplog.records if "args" in r.__dict__["data"])
    assert SUBJECT not in caplog.text and VALUE not in caplog.text


@pytest.mark.celery
@pytest.mark.django_db(transaction=True)
def test_a_real_worker_logs_no_task_arguments_or_results(tmp_path: Path) -> None:
    """The worker configures its logging itself: the filters must survive that."""
    require_real_broker()
    log_path = tmp_path / "worker.log"
    with running_worker(log_path) as worker:
        # Ids of records that do not exist: the task answers 0 and changes nothing.
        current_app.send_task(
            "memory_admin.derived.tasks.refresh_record_vectors",
            args=[[f"mem-{SUBJECT}"]],
            queue=current_app.conf.task_default_queue,
        )
        done = wait_until(lambda: "succeeded in" in log_path.read_text())
        assert worker.poll() is None, "the worker died"
    log = log_path.read_text()
    assert done, log[-3000:]
    assert "refresh_record_vectors" in log and "<not logged>" in log
    assert SUBJECT not in log


@pytest.mark.django_db
def test_the_logs_stores_evidence_names_the_logs_it_covers_and_those_it_does_not() -> None:
    job = Job(
        tenant_id=0,
        request_public_id="del-x",
        project_id=0,
        project_key="p",
        targets={"ids": [], "subjects": [SUBJECT], "event_ids": []},
    )
    verification = stores.get("logs").verify(job)
    assert verification.remaining == 0
    covered = verification.evidence["log_stores"]
    assert covered["covered"] == ["events: raw conversation lines the agents sent (this store redacts them)"]
    assert any("access logs" in line for line in covered["not_covered"])
    assert "What is logged" in covered["why_not_covered"]
