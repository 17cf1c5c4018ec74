"""The audit trail on a real gateway: every security-relevant change names who (the key's id and
the acting user), what, when and from where (the address the gateway saw: a forged
``X-Forwarded-For`` is not believed unless the operator trusts the proxy), and ``GET /v1/audit``
finds them by action, target, key, user and time."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import httpx
import pytest

from core.ids import new_id, utc_now
from tests.conftest import Cluster
from tests.factories import make_client
from tests.integration.test_gateway import deploy_gateway, http_client

pytestmark = pytest.mark.timeout(300)

USER = "ann"
FORGED = "6.6.6.6"


@pytest.fixture(scope="module")
def gateway_url(ray_cluster: Cluster, serve_port: int) -> str:
    return deploy_gateway(ray_cluster, serve_port)


def _ok(response: httpx.Response, status: int = 200) -> dict[str, Any]:
    assert response.status_code == status, (response.request.url, response.text)
    return dict(response.json()) if response.content else {}


def _changes(api: httpx.Client, tag: str) -> dict[str, str]:
    """Every change that matters to security, made as ``ann`` through the API; returns the
    audit target each should be recorded under, by action."""
    persona, label = f"p-{tag}", f"s-{tag}"
    targets: dict[str, str] = {}
    key = _ok(api.post("/v1/keys", json={"name": "spare", "scope": "app"}), 201)["key"]["id"]
    targets["key.create"] = f"key:{key}"
    rotated = _ok(api.post(f"/v1/keys/{key}/rotate", json={"grace_s": 0}), 201)["key"]["id"]
    targets["key.rotate"] = f"key:{key}"
    _ok(api.post(f"/v1/keys/{rotated}/revoke"))
    targets["key.revoke"] = f"key:{rotated}"
    _ok(api.put(f"/v1/personas/{persona}", json={"system_prompt": "audited"}))
    targets["library.put"] = f"personas:{persona}"
    _ok(api.put(f"/v1/users/{USER}/quota", json={"concurrent_turns": 2}))
    targets["quota.set"] = f"user:{USER}"
    doomed = _ok(api.post("/v1/projects", json={"name": f"doomed-{tag}"}), 201)["id"]
    targets["project.create"] = f"project:{doomed}"
    _ok(api.patch(f"/v1/projects/{doomed}", json={"name": "renamed"}))
    targets["project.update"] = f"project:{doomed}"
    _ok(api.delete(f"/v1/projects/{doomed}"), 204)
    targets["project.delete"] = f"project:{doomed}"
    project = _ok(api.post("/v1/projects", json={"name": f"proj-{tag}"}), 201)["id"]
    agent = _ok(
        api.post(
            "/v1/agents",
            json={"name": "a", "persona_ref": {"id": persona}, "project_ids": [project]},
        ),
        201,
    )["id"]
    conv = _ok(api.post("/v1/conversations", json={"agent_id": agent}), 201)["id"]
    base = f"/v1/conversations/{conv}"
    _ok(api.put(f"{base}/members/bob", json={"level": "reader"}))
    targets["member.grant"] = f"conversations:{conv}"
    _ok(api.delete(f"{base}/members/bob"))
    targets["member.revoke"] = f"conversations:{conv}"
    _ok(api.put(f"{base}/policy", json={"concurrency_policy": "queue"}))
    targets["conversation.policy"] = f"conversations:{conv}"
    assert _ok(api.post(f"{base}/merge"))["status"] in ("up_to_date", "merged")
    targets["merge"] = f"conversations:{conv}"
    _ok(api.put(f"/v1/sessions/{label}", json={"conversation_id": conv}), 201)
    targets["session.create"] = f"session:{label}"
    hook = _ok(api.post("/v1/hooks", json={"route": {"session": label}}), 201)["id"]
    targets["hook.create"] = f"hook:{hook}"
    _ok(api.delete(f"/v1/hooks/{hook}"))
    targets["hook.delete"] = f"hook:{hook}"
    trigger = {"schedule": "0 3 * * *", "template": "t", "route": {"session": label}}
    trigger_id = _ok(api.post("/v1/triggers", json=trigger), 201)["id"]
    targets["trigger.create"] = f"trigger:{trigger_id}"
    _ok(api.delete(f"/v1/triggers/{trigger_id}"))
    targets["trigger.delete"] = f"trigger:{trigger_id}"
    _ok(api.delete(f"/v1/sessions/{label}"))
    targets["session.delete"] = f"session:{label}"
    _ok(api.delete(base))
    targets["conversation.delete"] = f"conversations:{conv}"
    return targets


def test_every_change_names_its_key_user_time_and_address(
    gateway_url: str, ray_cluster: Cluster
) -> None:
    client_id, key = make_client(ray_cluster.store, "audited")
    key_id = ray_cluster.store.keys.find(key).id  # type: ignore[union-attr]
    started = utc_now()
    with http_client(gateway_url, key) as api:
        # The acting user on every change, and a forged X-Forwarded-For the gateway must not
        # believe (it trusts no proxy unless WONDER_TRUSTED_PROXIES names it).
        api.headers.update({"X-Wonder-User": USER, "X-Forwarded-For": FORGED})
        targets = _changes(api, new_id().lower())
        del api.headers["X-Wonder-User"], api.headers["X-Forwarded-For"]
        entries = _ok(api.get("/v1/audit", params={"limit": 500}))["items"]
    by_action = {e["action"]: e for e in entries if e["target"] in targets.values()}
    missing = sorted(set(targets) - set(by_action))
    assert not missing, f"changes the audit trail does not record: {missing}"
    for action, target in targets.items():
        entry = by_action[action]
        assert entry["target"] == target, entry
        assert (entry["client_id"], entry["key_id"], entry["user_id"]) == (client_id, key_id, USER)
        assert entry["address"] == "127.0.0.1", entry  # the peer, not the forged header
        assert started - timedelta(seconds=5) <= datetime.fromisoformat(entry["at"]) <= utc_now()


def test_the_audit_route_filters(gateway_url: str, ray_cluster: Cluster) -> None:
    client_id, key = make_client(ray_cluster.store, "audit-filters")
    with http_client(gateway_url, key) as api:
        api.headers["X-Wonder-User"] = USER
        targets = _changes(api, new_id().lower())
        del api.headers["X-Wonder-User"]
        spare = targets["key.create"].removeprefix("key:")

        def actions(**params: Any) -> list[str]:
            return [e["action"] for e in _ok(api.get("/v1/audit", params=params))["items"]]

        assert set(actions(action="key.")) == {"key.create", "key.rotate", "key.revoke"}
        assert actions(action="hook.create") == ["hook.create"]
        assert actions(target=targets["hook.create"]) == ["hook.create", "hook.delete"]
        everything = actions()  # every entry of this client: all made by ann with one key
        assert len(everything) > len(targets)  # the agent's project too
        assert actions(user_id=USER) == everything
        assert actions(user_id="bob") == []
        first = _ok(api.get("/v1/audit"))["items"][0]
        key_id = first["key_id"]
        assert actions(key_id=key_id) == everything
        assert actions(key_id=spare) == []  # made nothing itself
        later = (utc_now() + timedelta(minutes=1)).isoformat()
        assert actions(since=later) == [] and actions(until=later) == everything
        assert actions(since=first["at"])[0] == first["action"]

        # An acting user reads only what it did; another user's entries are not its to read.
        def seen(who: str) -> list[str]:
            found = _ok(api.get("/v1/audit", headers={"X-Wonder-User": who}))["items"]
            return [e["user_id"] for e in found]

        assert set(seen(USER)) == {USER} and seen("bob") == []
        refused = api.get("/v1/audit", params={"user_id": USER}, headers={"X-Wonder-User": "bob"})
        assert refused.status_code == 403
        bad_times = ({"since": "2026-01-01T00:00:00"}, {"since": "0"}, {"until": "2026-01-01"})
        for bad in (*bad_times, {"action": "Key*"}, {"user_id": "a b"}):
            assert api.get("/v1/audit", params=bad).status_code in (400, 422), bad
    assert client_id
