"""The gateway keeps its own contract (issue 12, item 4).

Direct checks of the global rules (unknown query parameters refused with a 422 naming them; every
405 carries ``Allow`` with all the methods of its path), then a schemathesis run over the whole
OpenAPI document: every operation, its documented examples, the coverage phase (boundaries, wrong
types, unsupported methods), generated requests (valid and invalid, a fixed seed, a few examples
each) and stateful sequences, sent to the real app over a real SQLite store with real in-process
Conversation actors (``tests.inprocess``), every check on every response.

Not green yet: ``REMAINING`` lists the failures still to fix (by operation and check) and why.
The test fails on any failure outside it, so nothing regresses while they are worked off.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import schemathesis
from fastapi import FastAPI
from fastapi.testclient import TestClient
from schemathesis.config import SchemathesisConfig
from schemathesis.engine import events, from_schema

from core.errors import Unavailable
from serving.gateway.app import create_api
from serving.gateway.context import GatewayContext
from tests.inprocess import InProcessCluster, NoWorkflows
from tests.unit.test_gateway_api import add_client

SEED = 12
EXAMPLES = 3

# (operation, check) pairs still failing, each with its reason (the issue 12 report lists them).
REMAINING: dict[tuple[str, str], str] = {
    # No memory service or workflow runtime behind this in-process gateway: a retriable 503
    # (a server error to schemathesis); over Ray these answer.
    **{
        (op, "not_a_server_error"): "no memory/workflow runtime in the unit tier"
        for op in (
            "DELETE /v1/agents/{agent_id}/memories/{memory_id}",
            "GET /v1/agents/{agent_id}/memories",
            "GET /v1/agents/{agent_id}/memories/{memory_id}",
            "POST /v1/agents/{agent_id}/memories",
            "POST /v1/agents/{agent_id}/memories/search",
            "GET /v1/workflow-runs/{run_id}",
            "POST /v1/workflow-runs/{run_id}/cancel",
            "POST /v1/workflows/{workflow_id}/runs",
            "GET /v1/workflow-runs/{run_id}/branch",
            "GET /v1/workflow-runs/{run_id}/diff",
            "POST /v1/workflow-runs/{run_id}/merge",
            "Stateful tests",
        )
    },
    # "search" is also a {memory_id}: GET/DELETE of that path exist, so Allow names them.
    ("POST /v1/agents/{agent_id}/memories/search", "allow_header_conformance"): "path overlap",
    # Rules across fields or against stored state that the schema cannot say (exclusive hooks,
    # unknown references, cursors): a 422/400 for a schema-valid body. To do: express them in
    # the schema where possible, else answer 409/404 and declare it.
    **{
        (op, "positive_data_acceptance"): "cross-field or stored-state rule not in the schema"
        for op in (
            "GET /v1/conversations",
            "GET /v1/conversations/{conversation_id}/branch",
            "GET /v1/conversations/{conversation_id}/children",
            "GET /v1/conversations/{conversation_id}/diff",
            "GET /v1/conversations/{conversation_id}/workspace",
            "POST /v1/agents",
            "POST /v1/conversations",
            "POST /v1/conversations/{conversation_id}/merge",
            "POST /v1/projects",
            "PUT /v1/model-profiles/{obj_id}",
            "PUT /v1/personas/{obj_id}",
            "PUT /v1/tasks/{obj_id}",
            "PUT /v1/tools/{obj_id}",
            "PUT /v1/workflows/{obj_id}",
            "Stateful tests",
            # Routes of issues 11 and 13 (merged after this test): a turn to fork at that is not
            # in the conversation, forward and backward paging combined, a reference to an unknown
            # persona or session target, an expiry in the past: 400s for schema-valid requests.
            "POST /v1/hooks",
            "POST /v1/keys",
            "POST /v1/triggers",
            "POST /v1/conversations/{conversation_id}/forks",
            "POST /v1/conversations/{conversation_id}/messages",
            "POST /v1/messages",
            "PUT /v1/sessions/{label}",
            "GET /v1/conversations/{conversation_id}/events",
            "GET /v1/conversations/{conversation_id}/forks",
            "GET /v1/conversations/{conversation_id}/messages",
            # Issue 14: a default_branch that does not exist in the project's repository.
            "PATCH /v1/projects/{project_id}",
        )
    },
    # A routing target or a cron schedule the schema allows loosely (one-of-three routing keys, a
    # free-form five-field schedule): to do, express them as oneOf / a pattern.
    ("POST /v1/triggers", "negative_data_rejection"): "routing/schedule looser in the schema",
    ("POST /v1/messages", "negative_data_rejection"): "routing looser in the schema",
    # A persona's system prompt over its limit makes the body itself too large: refused with
    # 413 before validation, a status this check does not count as a refusal.
    ("POST /v1/agents", "negative_data_rejection"): "413 for an oversized body",
}


class NoMemory:
    """Memories for a gateway with no memory service behind it: any use is a retriable 503."""

    def __getattr__(self, name: str) -> Any:
        async def unavailable(*_args: Any, **_kwargs: Any) -> Any:
            raise Unavailable(f"no memory service in this test ({name})")

        return unavailable


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[FastAPI, str]]:
    data_dir: Path = tmp_path_factory.mktemp("contract")
    cluster = InProcessCluster({"WONDER_DATA_DIR": str(data_dir), "WONDER_EMBEDDER": "local"})
    context = GatewayContext(
        store=cluster.store,
        conversations=cluster,  # type: ignore[arg-type]
        workflows=NoWorkflows(),  # type: ignore[arg-type]
        memory=NoMemory(),  # type: ignore[arg-type]
    )
    yield create_api(context), add_client(cluster.store, "contract")


def test_unknown_query_parameters_are_refused_by_name(gateway: tuple[FastAPI, str]) -> None:
    app, key = gateway
    client = TestClient(app, headers={"Authorization": f"Bearer {key}"})
    refused = client.get("/v1/conversations?limit=5&limt=3&zz=1")
    assert refused.status_code == 422
    error = refused.json()["error"]
    assert error["code"] == "INVALID_INPUT"
    assert [d["path"] for d in error["details"]] == ["query.limt", "query.zz"]
    assert client.get("/v1/conversations?limit=5").status_code == 200
    assert client.get("/healthz?probe=1").status_code == 422


def test_a_405_names_every_method_of_its_path(gateway: tuple[FastAPI, str]) -> None:
    app, key = gateway
    client = TestClient(app, headers={"Authorization": f"Bearer {key}"})
    answer = client.patch("/v1/personas/p1")
    assert answer.status_code == 405
    assert answer.json()["error"]["code"] == "METHOD_NOT_ALLOWED"
    assert set(answer.headers["Allow"].split(", ")) >= {"GET", "PUT"}  # two routes


def test_schemathesis_over_the_whole_api(gateway: tuple[FastAPI, str]) -> None:
    app, key = gateway
    config = SchemathesisConfig()
    config.update(seed=SEED, max_failures=None)
    project = config.projects.default
    project.update(headers={"Authorization": f"Bearer {key}"}, continue_on_failure=True)
    project.generation.update(
        max_examples=EXAMPLES, deterministic=True, no_shrink=True, database="none"
    )
    # Revoking or rotating a key would take the run's own credentials away mid-run (the stateful
    # phase finds the key's id); tests/unit/test_keys.py and the gateway tests cover those routes.
    schema = schemathesis.openapi.from_asgi("/openapi.json", app, config=config).exclude(
        path_regex=r"^/v1/keys/\{key_id\}/(revoke|rotate)$"
    )
    started = time.monotonic()
    failures: dict[tuple[str, str], str] = {}
    checks = 0
    errors: list[str] = []
    for event in from_schema(schema).execute():
        if isinstance(event, events.ScenarioFinished):
            for results in event.recorder.checks.values():
                for result in results:
                    checks += 1
                    if result.status.name == "FAILURE" and result.failure_info is not None:
                        title = result.failure_info.failure.title
                        failures[(event.recorder.label, result.name)] = title
        elif isinstance(event, events.NonFatalError | events.FatalError):
            errors.append(str(event.info))
    print(
        f"schemathesis: {checks} checks, {len(failures)} failing (operation, check) pairs, "
        f"{len(set(failures) & set(REMAINING))} of them known, "
        f"{time.monotonic() - started:.0f} s"
    )
    assert not errors
    new = {pair: title for pair, title in failures.items() if pair not in REMAINING}
    assert not new, "new contract failures:\n" + "\n".join(f"{k}: {v}" for k, v in new.items())


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/v1/personas/p-strict", {"system_prompt": "x", "recent_turns_limit": False}),
        ("/v1/personas/p-strict", {"system_prompt": "x", "recent_turns_limit": "3"}),
        ("/v1/model-profiles/m-strict", {"temperature": False}),
        (
            "/v1/tools/t-strict",
            {
                "name": "t",
                "description": "d",
                "target_type": "task",
                "target_id": "x",
                "idempotent": 0,
            },
        ),
    ],
    ids=["bool-as-int", "str-as-int", "bool-as-float", "int-as-bool"],
)
def test_numbers_and_booleans_are_not_coerced(
    gateway: tuple[FastAPI, str], path: str, body: dict[str, Any]
) -> None:
    app, key = gateway
    client = TestClient(app, headers={"Authorization": f"Bearer {key}"})
    answer = client.put(path, json=body)
    assert answer.status_code == 422, answer.text
    assert answer.json()["error"]["code"] == "INVALID_INPUT"
