"""What an API client can make Wonder run (issue 17), over the real gateway on the session's Ray:
only registered callables, a worker that survives its tasks, test doubles off in production.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from websockets.exceptions import ConnectionClosed

from tests.conftest import Cluster, wait_for
from tests.integration.test_gateway import (  # the gateway deployed once per session
    alice,  # noqa: F401 - fixture
    error_of,
    gateway_url,  # noqa: F401 - fixture
    http_client,
    unique,
)


def put_ok(client: httpx.Client, path: str, body: dict[str, Any]) -> dict[str, Any]:
    response = client.put(path, json=body)
    assert response.status_code == 200, response.text
    return dict(response.json())


def test_callables_are_listed_and_unregistered_ones_refused_at_put(
    alice: httpx.Client,  # noqa: F811
) -> None:
    listed = alice.get("/v1/library/callables")
    assert listed.status_code == 200
    names = {c["name"]: c for c in listed.json()["items"]}
    assert "library.callables:calculate" in names and names["library.callables:sleep"]["async"]
    assert not any(n.startswith("jobs.") for n in names)

    for bad in ("jobs.cli:main", "actors.executor:run_task", "os:system", "{{input.fn}}"):
        task = {"actions": [{"kind": "python", "params": {"callable": bad}}]}
        response = alice.put(f"/v1/tasks/{unique('task')}", json=task)
        assert response.status_code == 403, response.text
        error = error_of(response)
        assert error["code"] == "PERMISSION_DENIED" and "is not registered" in error["message"]
        assert "actions.0.params.callable" in error["message"]
    ok = {"actions": [{"kind": "python", "params": {"callable": "library.callables:calculate"}}]}
    put_ok(alice, f"/v1/tasks/{unique('task')}", ok)


def _tool(alice: httpx.Client, name: str, callable_name: str) -> str:  # noqa: F811
    task_id = unique("task")
    put_ok(
        alice,
        f"/v1/tasks/{task_id}",
        {"actions": [{"kind": "python", "params": {"callable": callable_name}}]},
    )
    tool_id = unique("tool")
    put_ok(
        alice,
        f"/v1/tools/{tool_id}",
        {"name": name, "description": name, "target_type": "task", "target_id": task_id},
    )
    return tool_id


def _turn_moves(alice: httpx.Client, conv_id: str, content: str) -> list[dict[str, Any]]:  # noqa: F811
    posted = alice.post(f"/v1/conversations/{conv_id}/messages", json={"content": content})
    assert posted.status_code == 202, posted.text
    turn_id = posted.json()["turn_id"]

    def ended() -> dict[str, Any] | None:
        turn = alice.get(f"/v1/conversations/{conv_id}/turns/{turn_id}").json()
        return turn if turn.get("status") in ("completed", "failed") else None

    turn = wait_for(ended, timeout=90, interval=0.2)
    assert turn["status"] == "completed", turn
    return list(turn["moves"])


def test_a_task_calling_sys_exit_fails_its_tool_call_and_the_pool_keeps_working(
    alice: httpx.Client,  # noqa: F811
) -> None:
    exit_tool = _tool(alice, "quit", "tests.callables:exit_worker")
    pid_tool = _tool(alice, "pid", "tests.callables:worker_pid")
    profile = unique("mp")
    script = [
        {"match": "please quit", "tool_calls": [{"name": "quit", "arguments": {}}]},
        {"match": "please pid", "tool_calls": [{"name": "pid", "arguments": {}}]},
        {"reply": "done: {{last_tool}}"},
    ]
    put_ok(alice, f"/v1/model-profiles/{profile}", {"provider": "scripted", "script": script})
    persona = unique("persona")
    put_ok(
        alice,
        f"/v1/personas/{persona}",
        {"system_prompt": "t", "model_profile_id": profile, "tool_ids": [exit_tool, pid_tool]},
    )
    agent = alice.post("/v1/agents", json={"name": "a", "persona_ref": {"id": persona}})
    conv_id = alice.post("/v1/conversations", json={"agent_id": agent.json()["id"]}).json()["id"]

    pids = []
    for _ in range(2):  # twice: the worker that ran the first exit is the one asked next
        (quit_move,) = [m for m in _turn_moves(alice, conv_id, "please quit") if m["tool_call"]]
        result = quit_move["tool_result"]
        assert result["success"] is False
        assert "tried to stop the worker (SystemExit)" in result["error"]["message"]
        (pid_move,) = [m for m in _turn_moves(alice, conv_id, "please pid") if m["tool_call"]]
        assert pid_move["tool_result"]["success"] is True, pid_move
        pids.append(pid_move["tool_result"]["result"]["pid"])
    assert all(isinstance(p, int) for p in pids)


def test_the_scripted_provider_is_refused_where_test_doubles_are_off(
    ray_cluster: Cluster, serve_port: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A gateway deployed with the settings ``wonder up`` passes (``Settings.env()`` without the
    operator's WONDER_ALLOW_TEST_DOUBLES) refuses the scripted provider; the suite's allows it."""
    from ray import serve

    from cluster.gateway import build_gateway_app
    from core.settings import load_settings
    from tests.factories import make_client

    monkeypatch.delenv("WONDER_ALLOW_TEST_DOUBLES")  # an operator who did not turn them on
    production = load_settings().env()  # what `wonder up` hands its gateway (cli.deploy)
    assert production["WONDER_ALLOW_TEST_DOUBLES"] == "False"
    serve.run(build_gateway_app(production), name="gateway-prod", route_prefix="/prod")
    try:
        _, key = make_client(ray_cluster.store, "prod")
        with http_client(f"http://127.0.0.1:{serve_port}/prod", key) as client:
            deadline = time.monotonic() + 60
            while client.get("/healthz").status_code != 200 and time.monotonic() < deadline:
                time.sleep(0.2)
            refused = client.put(
                f"/v1/model-profiles/{unique('mp')}", json={"provider": "scripted"}
            )
            assert refused.status_code == 403, refused.text
            assert "WONDER_ALLOW_TEST_DOUBLES" in error_of(refused)["message"]
            assert (
                client.put(
                    f"/v1/model-profiles/{unique('mp')}", json={"provider": "vllm"}
                ).status_code
                == 200
            )
    finally:
        serve.delete("gateway-prod")


# --------------------------------------------------------------------------- quotas and audit


@pytest.fixture
def admin(gateway_url: str, ray_cluster: Cluster) -> Iterator[httpx.Client]:  # noqa: F811
    from core.ids import utc_now
    from tests.factories import make_client

    _, key = make_client(ray_cluster.store, "operator")
    ray_cluster.store.admin_keys.add(key, utc_now())
    with http_client(gateway_url, key) as client:
        yield client


def fresh(gateway_url: str, ray_cluster: Cluster, name: str) -> tuple[str, httpx.Client, str]:  # noqa: F811
    from tests.factories import make_client

    client_id, key = make_client(ray_cluster.store, name)
    return client_id, http_client(gateway_url, key), key


def test_only_an_admin_key_sets_quotas(
    gateway_url: str,  # noqa: F811
    ray_cluster: Cluster,
    admin: httpx.Client,
) -> None:
    client_id, carol, _ = fresh(gateway_url, ray_cluster, "carol")
    with carol:
        refused = carol.put(f"/v1/clients/{client_id}/quota", json={"conversations": 100})
        assert refused.status_code == 403 and error_of(refused)["code"] == "PERMISSION_DENIED"
        bad = admin.put(f"/v1/clients/{client_id}/quota", json={"burst": 0})
        assert bad.status_code == 422 and "body.burst" in error_of(bad)["message"]
        assert admin.put("/v1/clients/client_nope/quota", json={}).status_code == 404
        put = admin.put(f"/v1/clients/{client_id}/quota", json={"conversations": 100})
        assert put.status_code == 200 and put.json() == {"conversations": 100}
        assert carol.get("/v1/quota").json() == {"conversations": 100}
        assert admin.get(f"/v1/clients/{client_id}/quota").json() == {"conversations": 100}


def test_the_request_rate_is_refused_with_retry_after_and_recovers(
    gateway_url: str,  # noqa: F811
    ray_cluster: Cluster,
    admin: httpx.Client,
) -> None:
    client_id, dave, _ = fresh(gateway_url, ray_cluster, "dave")
    quota = {"requests_per_second": 0.2, "burst": 3}  # three at once, then one per 5 s
    assert admin.put(f"/v1/clients/{client_id}/quota", json=quota).status_code == 200
    with dave:
        statuses = [dave.get("/v1/agents").status_code for _ in range(3)]
        assert statuses == [200, 200, 200]
        over = dave.get("/v1/agents")
        assert over.status_code == 429, over.text
        assert error_of(over)["code"] == "QUOTA_EXCEEDED" and error_of(over)["retriable"]
        retry_after = int(over.headers["Retry-After"])
        assert 1 <= retry_after <= 5
        time.sleep(retry_after)
        assert dave.get("/v1/agents").status_code == 200  # one token came back


def test_count_quotas_refuse_conversations_turns_tokens_and_sockets(
    gateway_url: str,  # noqa: F811
    ray_cluster: Cluster,
    admin: httpx.Client,
) -> None:
    from websockets.sync.client import connect

    client_id, erin, key = fresh(gateway_url, ray_cluster, "erin")
    quota_path = f"/v1/clients/{client_id}/quota"
    with erin:
        conv = erin.post("/v1/conversations", json={})
        assert conv.status_code == 201
        conv_id = conv.json()["id"]
        assert admin.put(quota_path, json={"conversations": 1}).status_code == 200
        full = erin.post("/v1/conversations", json={})
        assert full.status_code == 429 and "conversations" in error_of(full)["message"]
        assert full.headers["Retry-After"] == "1"

        for limits, fragment in (
            ({"concurrent_turns": 0}, "concurrent_turns"),
            ({"tokens_per_day": 0}, "tokens_per_day"),
        ):
            assert admin.put(quota_path, json=limits).status_code == 200
            refused = erin.post(f"/v1/conversations/{conv_id}/messages", json={"content": "hi"})
            assert refused.status_code == 429 and fragment in error_of(refused)["message"]
            assert int(refused.headers["Retry-After"]) >= 1

        assert admin.put(quota_path, json={"concurrent_websockets": 1}).status_code == 200
        ws_url = gateway_url.replace("http://", "ws://") + f"/v1/conversations/{conv_id}/stream"
        headers = {"Authorization": f"Bearer {key}"}
        with connect(ws_url, additional_headers=headers, proxy=None, open_timeout=30) as first:
            assert json.loads(first.recv(timeout=30))["type"] in (
                "conversation_started",
                "subscribed",
            )
            with connect(ws_url, additional_headers=headers, proxy=None) as second:
                frame = json.loads(second.recv(timeout=30))
                assert frame["type"] == "error" and frame["error"]["code"] == "QUOTA_EXCEEDED"
                with pytest.raises(ConnectionClosed) as closed:
                    second.recv(timeout=30)
                assert closed.value.rcvd is not None and closed.value.rcvd.code == 4429

        # the first socket closed: its place is free again
        def reopened() -> bool:
            with connect(ws_url, additional_headers=headers, proxy=None) as again:
                return str(json.loads(again.recv(timeout=30))["type"]) != "error"

        assert wait_for(reopened, timeout=30, interval=0.2)


def test_a_users_quota_is_set_by_the_clients_admin_key_and_limits_that_user_only(
    gateway_url: str,  # noqa: F811
    ray_cluster: Cluster,
) -> None:
    _, ivy, _ = fresh(gateway_url, ray_cluster, "ivy")
    quota = {"requests_per_second": 0.5, "burst": 2, "concurrent_turns": 0}
    with ivy:
        app_key = ivy.post("/v1/keys", json={"name": "app"}).json()["api_key"]
        with http_client(gateway_url, app_key) as app:
            refused = app.put("/v1/users/alice/quota", json=quota)
            assert refused.status_code == 403 and error_of(refused)["code"] == "PERMISSION_DENIED"
        assert ivy.put("/v1/users/no%20one/quota", json=quota).status_code == 422
        assert ivy.put("/v1/users/alice/quota", json={"memories": 3}).status_code == 422
        put = ivy.put("/v1/users/alice/quota", json=quota)
        assert put.status_code == 200 and put.json() == quota
        assert ivy.get("/v1/users/alice/quota").json() == quota
        assert ivy.get("/v1/user-quotas").json() == {
            "items": [{"user_id": "alice", "quota": quota}]
        }

        # Alice's own bucket: two at once, then refused; bob and the client itself go on.
        as_alice = {"X-Wonder-User": "alice"}
        assert [ivy.get("/v1/agents", headers=as_alice).status_code for _ in range(2)] == [200] * 2
        over = ivy.get("/v1/agents", headers=as_alice)
        assert over.status_code == 429 and "user alice: more than 0.5" in error_of(over)["message"]
        assert 1 <= int(over.headers["Retry-After"]) <= 2
        assert ivy.get("/v1/agents", headers={"X-Wonder-User": "bob"}).status_code == 200
        assert ivy.get("/v1/agents").status_code == 200
        assert wait_for(
            lambda: ivy.get("/v1/agents", headers=as_alice).status_code == 200, timeout=10
        )

        # Alice may run no turn at all: her message is refused, bob's is accepted.
        conv_id = ivy.post("/v1/conversations", json={}).json()["id"]
        messages = f"/v1/conversations/{conv_id}/messages"
        refused = ivy.post(messages, json={"content": "hi", "user_id": "alice"})
        assert refused.status_code == 429, refused.text
        assert "user alice: quota concurrent_turns reached" in error_of(refused)["message"]
        assert ivy.post(messages, json={"content": "hi", "user_id": "bob"}).status_code == 202

        assert ivy.delete("/v1/users/alice/quota").json() == {}
        assert ivy.get("/v1/users/alice/quota").json() == {}
        changes = [e for e in ivy.get("/v1/audit").json()["items"] if e["action"] == "quota.set"]
        assert [(e["target"], e["details"]["after"]) for e in changes] == [
            ("user:alice", quota),
            ("user:alice", {}),
        ]


def test_the_audit_trail_lists_a_persona_change(
    gateway_url: str,  # noqa: F811
    ray_cluster: Cluster,
    admin: httpx.Client,
) -> None:
    frank_id, frank, _ = fresh(gateway_url, ray_cluster, "frank")
    _, grace, _ = fresh(gateway_url, ray_cluster, "grace")
    persona_id = unique("persona")
    with frank, grace:
        put_ok(frank, f"/v1/personas/{persona_id}", {"system_prompt": "v1"})
        put_ok(frank, f"/v1/personas/{persona_id}", {"system_prompt": "v1"})  # unchanged
        put_ok(
            frank, f"/v1/personas/{persona_id}", {"system_prompt": "v2", "recent_turns_limit": 3}
        )
        admin.put(f"/v1/clients/{frank_id}/quota", json={"conversations": 10})

        entries = frank.get("/v1/audit").json()["items"]
        persona = [e for e in entries if e["target"] == f"personas:{persona_id}"]
        assert [e["details"]["version"] for e in persona] == [1, 2]
        assert persona[1]["details"]["changed"] == ["recent_turns_limit", "system_prompt"]
        assert {e["actor"] for e in persona} == {f"client:{frank_id}"}
        assert persona[0]["action"] == "library.put" and persona[0]["at"]
        quota = [e for e in entries if e["action"] == "quota.set"]
        assert quota and quota[-1]["details"]["after"] == {"conversations": 10}

        agent = frank.post("/v1/agents", json={"name": "g", "persona_ref": {"id": persona_id}})
        conv_id = frank.post("/v1/conversations", json={}).json()["id"]
        guest = agent.json()["id"]
        joined = frank.post(f"/v1/conversations/{conv_id}/participants", json={"agent_id": guest})
        assert joined.status_code == 201, joined.text
        memberships = [
            e for e in frank.get("/v1/audit").json()["items"] if e["action"] == "membership.add"
        ]
        assert [e["details"] for e in memberships] == [
            {"conversation_id": conv_id, "agent_id": guest}
        ]

        assert persona_id not in str(grace.get("/v1/audit").json())
        other = grace.get("/v1/audit", params={"client_id": frank_id})
        assert other.status_code == 403
        seen = admin.get("/v1/audit", params={"client_id": frank_id, "limit": 500}).json()
        assert {e["id"] for e in persona} <= {e["id"] for e in seen["items"]}


# --------------------------------------------------------------------------- limits


def test_limits_over_http_and_websocket(
    gateway_url: str,  # noqa: F811
    ray_cluster: Cluster,
) -> None:
    from websockets.sync.client import connect

    _, henry, key = fresh(gateway_url, ray_cluster, "henry")
    with henry:
        conv_id = henry.post("/v1/conversations", json={}).json()["id"]
        huge = henry.post(
            f"/v1/conversations/{conv_id}/messages", json={"content": "x" * 20_000_000}
        )
        assert huge.status_code == 413 and error_of(huge)["code"] == "PAYLOAD_TOO_LARGE"
        deep: Any = "leaf"
        for _ in range(100):
            deep = [deep]
        nested = henry.put(
            f"/v1/tasks/{unique('task')}",
            json={"actions": [{"kind": "python", "params": {"callable": "x", "deep": deep}}]},
        )
        assert nested.status_code == 400 and "deeper than 64" in error_of(nested)["message"]
        long = henry.post(f"/v1/conversations/{conv_id}/messages", json={"content": "x" * 100_001})
        assert long.status_code == 422 and "body.content" in error_of(long)["message"]

        ws_url = gateway_url.replace("http://", "ws://") + f"/v1/conversations/{conv_id}/stream"
        headers = {"Authorization": f"Bearer {key}"}
        with connect(ws_url, additional_headers=headers, proxy=None, open_timeout=30) as ws:
            ws.send(json.dumps({"type": "message", "content": "x" * 600_000}))
            ws.send(json.dumps({"type": "ping", "id": "after"}))
            frames = [json.loads(ws.recv(timeout=30)) for _ in range(4)]
            errors = [f for f in frames if f["type"] == "error"]
            assert errors and errors[0]["error"]["code"] == "PAYLOAD_TOO_LARGE"
            assert {"type": "pong", "id": "after", "seq": None} in frames  # the stream goes on
