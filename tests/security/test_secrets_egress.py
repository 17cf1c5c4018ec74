"""Secrets and egress over the real gateway on the session's Ray: a client's secret reaches only
a destination the operator lists, and a destination the client chose otherwise gets nothing, not
even a connection (a listener started here on 127.0.0.1 counts them).

The session's operator lists for model endpoints 127.0.0.1 at a few ports
(``Cluster.model_ports``) and the name ``localhost``; for ``http.request``, 127.0.0.1 (any port)
(tests/conftest.py).
"""

from __future__ import annotations

import httpx

from tests.conftest import Cluster
from tests.integration.test_gateway import (  # the gateway deployed once per session
    alice,  # noqa: F401 - fixture
    error_of,
    gateway_url,  # noqa: F401 - fixture
    unique,
)
from tests.security.flows import (
    conversation_with,
    everything_seen,
    put_ok,
    run_turn,
    run_workflow,
    task_workflow,
)
from tests.security.listener import ANSWER, BIG_BYTES, LEAK_MARKER, Listening, unused_port

PROVIDER_KEY = "sk-test-value-that-must-stay-put-4b1d"


def _store_secret(client: httpx.Client, name: str, value: str) -> None:
    response = client.put(f"/v1/secrets/{name}", json={"value": value})
    assert response.status_code == 200, response.text
    assert value not in response.text


# --------------------------------------------------------------------------- model providers


def test_a_profile_on_an_unlisted_loopback_port_never_gets_a_packet(
    alice: httpx.Client,  # noqa: F811
    ray_cluster: Cluster,
) -> None:
    with Listening(unused_port()) as unlisted:
        refused = alice.put(
            f"/v1/model-profiles/{unique('mp')}",
            json={"provider": "openai", "base_url": f"{unlisted.url}/v1"},
        )
        assert refused.status_code == 403, refused.text
        message = error_of(refused)["message"]
        assert f"127.0.0.1:{unlisted.port}" in message and "WONDER_MODEL_ALLOWED_HOSTS" in message

        # A listed *name* passes at PUT; the address it resolves to is checked at the call.
        by_name = unique("mp")
        put_ok(
            alice,
            f"/v1/model-profiles/{by_name}",
            {"provider": "openai", "base_url": f"http://localhost:{unlisted.port}/v1"},
        )
        turn = run_turn(alice, conversation_with(alice, by_name), "hello?")
        assert turn["status"] == "failed", turn
        assert "non-public address" in turn["failure_reason"]

        # A profile stored before the allow-list (straight into the store) is refused at the call.
        from core.domain import ModelProfile
        from core.ids import utc_now

        stored = ModelProfile(id=unique("mp"), provider="openai", base_url=f"{unlisted.url}/v1")
        owner = _client_of(alice, ray_cluster)
        ray_cluster.store.model_profiles.put(stored, utc_now(), owner=owner)
        turn = run_turn(alice, conversation_with(alice, stored.id), "hello?")
        assert turn["status"] == "failed", turn
        assert "allow-list" in turn["failure_reason"]
        assert unlisted.connections == 0 and unlisted.requests == []


def _client_of(client: httpx.Client, cluster: Cluster) -> str:
    found = cluster.store.clients.client_for_key(client.headers["Authorization"][7:])
    assert found is not None
    return found


def test_the_provider_key_is_a_secret_sent_only_to_the_listed_endpoint(
    alice: httpx.Client,  # noqa: F811
    ray_cluster: Cluster,
) -> None:
    with Listening(ray_cluster.model_ports[1]) as provider:
        _store_secret(alice, "provider-key", PROVIDER_KEY)
        profile = unique("mp")
        body = {
            "provider": "openai",
            "base_url": f"{provider.url}/v1",
            "api_key_secret": "provider-key",
        }
        put_ok(alice, f"/v1/model-profiles/{profile}", body)
        conv_id = conversation_with(alice, profile)
        turn = run_turn(alice, conv_id, "hello?")
        assert turn["status"] == "completed", turn
        (request,) = provider.requests
        assert request.headers["authorization"] == f"Bearer {PROVIDER_KEY}"
        assert request.headers["host"] == f"127.0.0.1:{provider.port}"
        seen = everything_seen(alice, conv_id)
        assert ANSWER in seen and PROVIDER_KEY not in seen
        assert PROVIDER_KEY not in alice.get(f"/v1/model-profiles/{profile}").text
        assert PROVIDER_KEY not in alice.get("/v1/audit").text


def test_no_client_field_names_a_process_environment_variable(
    alice: httpx.Client,  # noqa: F811
) -> None:
    for name in ("HOME", "WONDER_SECRETS_KEY", "AWS_SECRET_ACCESS_KEY"):
        refused = alice.put(
            f"/v1/model-profiles/{unique('mp')}",
            json={"provider": "openai", "base_url": "http://localhost/v1", "api_key_env": name},
        )
        assert refused.status_code == 422, refused.text
        assert "api_key_secret" in error_of(refused)["message"]


def test_a_providers_error_body_is_not_repeated_to_the_client(
    alice: httpx.Client,  # noqa: F811
    ray_cluster: Cluster,
) -> None:
    with Listening(ray_cluster.model_ports[1]) as provider:
        profile = unique("mp")
        put_ok(
            alice,
            f"/v1/model-profiles/{profile}",
            {"provider": "openai", "base_url": f"{provider.url}/fail/v1"},
        )
        conv_id = conversation_with(alice, profile)
        turn = run_turn(alice, conv_id, "hello?")
        assert turn["status"] == "failed", turn
        assert "400" in turn["failure_reason"]
        assert provider.requests  # the provider was asked, and answered with its text
        assert LEAK_MARKER not in everything_seen(alice, conv_id)


# --------------------------------------------------------------------------- http.request


def _http_task(headers: dict[str, object]) -> dict[str, object]:
    params = {"url": "{{input.url}}", "headers": headers, "max_bytes": "{{input.max_bytes}}"}
    return {"actions": [{"kind": "http.request", "params": params}]}


def test_http_request_sends_secret_headers_and_checks_every_redirect_hop(
    alice: httpx.Client,  # noqa: F811
) -> None:
    _store_secret(alice, "api-token", PROVIDER_KEY)
    auth = {"Authorization": {"secret": "api-token", "prefix": "Bearer "}}
    workflow = task_workflow(alice, _http_task(auth), ["url", "max_bytes"])
    with Listening() as service, Listening(unused_port()) as elsewhere:
        run = run_workflow(alice, workflow, {"url": f"{service.url}/echo", "max_bytes": 1000})
        assert run["status"] == "completed", run
        assert run["output"]["status"] == 200 and run["output"]["body"] == {"ok": True}
        assert service.requests[-1].headers["authorization"] == f"Bearer {PROVIDER_KEY}"

        hop = f"http://localhost:{elsewhere.port}/stolen"  # a name the operator does not list
        redirect = f"{service.url}/redirect?to={hop}"
        run = run_workflow(alice, workflow, {"url": redirect, "max_bytes": 1000})
        assert run["status"] == "failed", run
        assert "allow-list" in run["error"]["message"]
        assert PROVIDER_KEY not in str(run)
        assert elsewhere.connections == 0


def test_http_request_streams_the_body_and_stops_at_the_cap(
    alice: httpx.Client,  # noqa: F811
) -> None:
    workflow = task_workflow(alice, _http_task({}), ["url", "max_bytes"])
    with Listening() as service:
        run = run_workflow(alice, workflow, {"url": f"{service.url}/big", "max_bytes": 2000})
        assert run["status"] == "completed", run
        output = run["output"]
        assert output["truncated"] is True and output["bytes"] == 2000
        assert len(output["body"]) == 2000 and "2000" in output["note"]
        assert service.big_sent < BIG_BYTES  # the reader hung up: the rest was never read


def test_a_tasks_input_cannot_name_a_secret(alice: httpx.Client) -> None:  # noqa: F811
    """A model (or a caller) filling a task's input cannot make it send a secret."""
    _store_secret(alice, "api-token-2", PROVIDER_KEY)
    task = _http_task({"Authorization": "{{input.auth}}"})
    workflow = task_workflow(alice, task, ["url", "auth", "max_bytes"])
    with Listening() as service:
        run = run_workflow(
            alice,
            workflow,
            {"url": f"{service.url}/echo", "auth": {"secret": "api-token-2"}, "max_bytes": 100},
        )
        assert run["status"] == "failed", run
        assert "cannot name a secret" in run["error"]["message"]
        assert service.requests == []
