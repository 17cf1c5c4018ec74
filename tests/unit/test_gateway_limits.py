"""Request limits per route (serving/gateway/limits.py), in-process over a real SQLite store:
every refusal a precise 4xx. The same over real HTTP: tests/integration/test_gateway_security.py.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from fastapi.testclient import TestClient

from serving.gateway.limits import MAX_JSON_DEPTH, max_body, nests_deeper_than
from tests.unit.test_gateway_api import (  # noqa: F401 - fixtures
    PERSONA,
    access,
    api,
    error_of,
    store,
)


def nested(depth: int) -> Any:
    value: Any = "leaf"
    for _ in range(depth):  # ``depth`` objects, one inside the other
        value = {"a": value}
    return value


def test_depth_counts_brackets_outside_strings() -> None:
    assert not nests_deeper_than(b'{"a": "[[[[[[[[[[[[[[[[[["}', 2)
    assert nests_deeper_than(b'{"a": [[{"b": 1}]]}', 3)
    assert not nests_deeper_than(b'{"a": [[{"b": "\\\\\\"[[[[[["}]]}', 4)
    assert not nests_deeper_than(json.dumps(nested(MAX_JSON_DEPTH)).encode(), MAX_JSON_DEPTH)
    assert nests_deeper_than(json.dumps(nested(MAX_JSON_DEPTH + 1)).encode(), MAX_JSON_DEPTH)


def test_routes_have_their_own_limits() -> None:
    assert max_body("PUT", "/v1/personas/p")[0] == 1024 * 1024
    assert max_body("POST", "/prod/v1/conversations/c/messages")[0] == 1024 * 1024
    for routed in ("/v1/messages", "/v1/agents", "/v1/triggers"):  # a message or a persona
        assert max_body("POST", routed)[0] == 1024 * 1024
    assert max_body("POST", "/v1/agents/a/memories")[0] == 2 * 1024 * 1024
    assert max_body("POST", "/v1/conversations")[0] == 64 * 1024


@pytest.mark.parametrize(
    ("method", "path", "size", "status"),
    [
        ("PUT", "/v1/personas/big", 1024 * 1024 + 1, 413),
        ("POST", "/v1/conversations/c/messages", 1024 * 1024 + 1, 413),
        ("POST", "/v1/conversations", 64 * 1024 + 1, 413),
        ("POST", "/v1/agents/a/memories", 2 * 1024 * 1024 + 1, 413),
    ],
)
def test_a_body_over_its_route_limit_is_413(
    api: TestClient,  # noqa: F811
    method: str,
    path: str,
    size: int,
    status: int,
) -> None:
    body = b'{"x": "' + b"a" * size + b'"}'
    response = api.request(method, path, content=body, headers={"Content-Type": "application/json"})
    assert response.status_code == status
    error = error_of(response)
    assert error["code"] == "PAYLOAD_TOO_LARGE" and "limited to" in error["message"]


def test_a_chunked_body_is_counted_as_it_arrives(api: TestClient) -> None:  # noqa: F811
    def chunks() -> Any:
        for _ in range(70):
            yield b"a" * 1024

    response = api.post(
        "/v1/conversations", content=chunks(), headers={"Content-Type": "application/json"}
    )
    assert response.status_code == 413


def test_json_nested_too_deep_is_400_and_within_limits_passes(api: TestClient) -> None:  # noqa: F811
    deep = {**PERSONA, "x": nested(MAX_JSON_DEPTH + 5)}
    response = api.put("/v1/personas/deep", json=deep)
    assert response.status_code == 400 and "deeper than" in error_of(response)["message"]
    assert api.put("/v1/personas/fine", json=PERSONA).status_code == 200
    too_long = api.put("/v1/personas/long", json={**PERSONA, "system_prompt": "x" * 100_001})
    assert too_long.status_code == 422 and "body.system_prompt" in error_of(too_long)["message"]
