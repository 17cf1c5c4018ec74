"""Secrets are write-only over the real gateway: a value goes in once and never comes back out
(not in a response, a listing, the audit trail or the store's clear text), rotation makes a new
version, every change is audited, and another client's secrets are invisible."""

from __future__ import annotations

import httpx

from tests.conftest import Cluster
from tests.integration.test_gateway import (  # the gateway deployed once per session
    alice,  # noqa: F401 - fixture
    bob,  # noqa: F401 - fixture
    error_of,
    gateway_url,  # noqa: F401 - fixture
    http_client,
    unique,
)

VALUE_1 = "first-value-3c2e9a-never-shown"
VALUE_2 = "second-value-8d41f0-never-shown"


def test_a_secret_is_write_only_versioned_and_audited(
    alice: httpx.Client,  # noqa: F811
    ray_cluster: Cluster,
) -> None:
    name = unique("db-password")
    created = alice.put(f"/v1/secrets/{name}", json={"value": VALUE_1})
    assert created.status_code == 200, created.text
    meta = created.json()
    assert meta["version"] == 1 and meta["size"] == len(VALUE_1) and "value" not in meta
    assert meta["created_by"].startswith("client:")
    rotated = alice.put(f"/v1/secrets/{name}", json={"value": VALUE_2}).json()
    assert rotated["version"] == 2 and rotated["rotated_at"] and rotated["rotated_by"]

    listed = alice.get("/v1/secrets")
    assert name in [s["name"] for s in listed.json()["items"]]
    one = alice.get(f"/v1/secrets/{name}")
    assert one.json()["version"] == 2
    audit = alice.get("/v1/audit", params={"limit": 500})
    actions = [(e["action"], e["target"]) for e in audit.json()["items"]]
    assert ("secret.create", f"secrets:{name}") in actions
    assert ("secret.rotate", f"secrets:{name}") in actions
    for text in (created.text, listed.text, one.text, audit.text):
        assert VALUE_1 not in text and VALUE_2 not in text

    # At rest: sealed with the operator's key, the clear text nowhere in the row.
    from sqlalchemy import select

    from core.store import schema

    with ray_cluster.store.db.connect() as c:
        row = c.execute(
            select(schema.client_secrets).where(schema.client_secrets.c.name == name)
        ).one()
    assert VALUE_2 not in str(tuple(row)) and VALUE_1 not in str(tuple(row))

    assert alice.delete(f"/v1/secrets/{name}").status_code == 204
    assert alice.get(f"/v1/secrets/{name}").status_code == 404
    audit = alice.get("/v1/audit", params={"limit": 500}).json()["items"]
    assert ("secret.delete", f"secrets:{name}") in [(e["action"], e["target"]) for e in audit]


def test_secrets_belong_to_their_client_and_need_an_admin_scope_key(
    alice: httpx.Client,  # noqa: F811
    bob: httpx.Client,  # noqa: F811
    gateway_url: str,  # noqa: F811
) -> None:
    name = unique("token")
    assert alice.put(f"/v1/secrets/{name}", json={"value": VALUE_1}).status_code == 200
    assert bob.get(f"/v1/secrets/{name}").status_code == 404
    assert bob.delete(f"/v1/secrets/{name}").status_code == 404
    assert name not in bob.get("/v1/secrets").text

    app_key = alice.post("/v1/keys", json={"name": "app", "scope": "app"}).json()["api_key"]
    with http_client(gateway_url, app_key) as app:
        refused = app.put(f"/v1/secrets/{name}", json={"value": VALUE_2})
        assert refused.status_code == 403 and error_of(refused)["code"] == "PERMISSION_DENIED"
        assert app.get(f"/v1/secrets/{name}").json()["version"] == 1  # it may read metadata


def test_a_secret_that_cannot_be_used_is_audited_without_its_value(
    alice: httpx.Client,  # noqa: F811
    ray_cluster: Cluster,
) -> None:
    from tests.security.flows import conversation_with, put_ok, run_turn

    profile = unique("mp")
    port = ray_cluster.model_ports[2]
    body = {
        "provider": "openai",
        "base_url": f"http://127.0.0.1:{port}/v1",
        "api_key_secret": "no-such-secret",
    }
    put_ok(alice, f"/v1/model-profiles/{profile}", body)
    turn = run_turn(alice, conversation_with(alice, profile), "hello?")
    assert turn["status"] == "failed" and "no-such-secret" in turn["failure_reason"]
    audit = alice.get("/v1/audit", params={"limit": 500}).json()["items"]
    failures = [e for e in audit if e["action"] == "secret.use_failed"]
    assert failures and failures[-1]["target"] == "secrets:no-such-secret"
    assert failures[-1]["details"]["where"] == f"model profile {profile}"
