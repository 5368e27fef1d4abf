"""The OpenAPI schema, Swagger UI (self-hosted) and the Django admin are served."""

from __future__ import annotations


def test_the_openapi_schema_names_the_contract_paths(client, db):
    response = client.get("/api/v1/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json")
    assert response.status_code == 200
    paths = response.json()["paths"]
    for path in (
        "/api/v1/records/",
        "/api/v1/records/{memory_id}/",
        "/api/v1/records/{memory_id}/history/",
        "/api/v1/records/{memory_id}/exclude/",
        "/api/v1/records/{memory_id}/expire/",
        "/api/v1/facts/current/",
        "/api/v1/disputes/",
        "/api/v1/disputes/{dispute_id}/resolve/",
        "/api/v1/field-policies/",
    ):
        assert path in paths, path


def test_swagger_ui_is_served_without_a_cdn(client, db):
    response = client.get("/api/v1/docs/")
    assert response.status_code == 200
    html = response.content.decode()
    assert "swagger-ui" in html
    assert "cdn.jsdelivr.net" not in html and "unpkg.com" not in html


def test_the_django_admin_lists_records_for_a_tenant_admin(client, admin, moved_deadline):
    client.force_login(admin)
    response = client.get("/admin/memory/memoryrecord/")
    assert response.status_code == 200
    assert moved_deadline[1].record.memory_id in response.content.decode()


def test_the_home_page_asks_an_anonymous_visitor_to_sign_in(client, db):
    response = client.get("/")
    assert response.status_code == 302
    assert response["Location"].startswith("/login/")
