"""The gateway keeps its own contract (issue 12, item 4).

Direct checks of the global rules (unknown query parameters refused with a 422 naming them; every
405 carries ``Allow`` with all the methods of its path), then a schemathesis run over the whole
OpenAPI document: every operation, its documented examples, the coverage phase (boundaries, wrong
types, unsupported methods), generated requests (valid and invalid, a fixed seed, a few examples
each) and stateful sequences, sent to the real app over a real SQLite store with real in-process
Conversation actors (``tests.inprocess``), every check on every response.

Every check must pass, on every route (the key revoke/rotate routes included: the run renews its
own credentials when it has lost them, ``RenewedKey``), with the configured exceptions explained
in ``schemathesis_config`` (rules JSON Schema cannot say, and ``/mcp``, whose contract is MCP's).
Behind the app: the production memory service (LanceDB in a tmp dir, a hashing embedder), workflow
runtime (coordinators in this process) and MCP connections (a stdio server in the sandbox), so no
route answers 503 for want of a runtime.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import schemathesis
from fastapi import FastAPI
from fastapi.testclient import TestClient
from schemathesis.config import SchemathesisConfig
from schemathesis.engine import events, from_schema

from core.client_secrets import ensure_key_file
from core.ids import new_id, utc_now
from core.store import Store
from serving.gateway.app import create_api
from serving.gateway.context import GatewayContext
from tests.inprocess import InProcessCluster
from tests.unit.test_gateway_api import add_client

SEED = 12
EXAMPLES = 3


@dataclass(frozen=True)
class Gateway:
    app: FastAPI
    key: str  # the client's first (admin) key
    store: Store


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    data_dir: Path = tmp_path_factory.mktemp("contract")
    ensure_key_file(data_dir / "secrets.key")  # the operator's key: secrets can be stored
    env = {"WONDER_DATA_DIR": str(data_dir), "WONDER_EMBEDDER": "local"}
    cluster = InProcessCluster(env)
    context = GatewayContext(
        store=cluster.store,
        conversations=cluster,  # type: ignore[arg-type]
        workflows=cluster.workflows,
        memory=cluster.memory,
        settings_env=env,
        mcp=cluster.tools.mcp,  # MCP servers are reached for real (stdio: in the sandbox)
    )
    yield Gateway(create_api(context), add_client(cluster.store, "contract"), cluster.store)
    cluster.close()


def client_of(gateway: Gateway) -> TestClient:
    """A client with a key of its own (the schemathesis run may revoke or rotate the first)."""
    found = gateway.store.keys.find(gateway.key)
    assert found is not None
    secret = f"wk_{new_id()}"
    gateway.store.keys.add(found.client_id, secret, utc_now(), name="contract-check")
    return TestClient(gateway.app, headers={"Authorization": f"Bearer {secret}"})


class RenewedKey:
    """The run's credentials: the client's key while it works, else a new admin key of the same
    client. The run may revoke or rotate (with no grace) the very key it sends, as any key the
    stateful phase finds; losing it must not end the run's coverage."""

    def __init__(self, store: Store, key: str) -> None:
        self.store = store
        self.key = key
        self.client_id = store.keys.find(key).client_id  # type: ignore[union-attr]
        self.renewed = 0

    def get(self, _case: Any, _ctx: Any) -> str:
        found = self.store.keys.find(self.key)
        if found is None or found.refusal(utc_now()) is not None:
            self.key = f"wk_{new_id()}"
            self.store.keys.add(self.client_id, self.key, utc_now(), name="contract-renewed")
            self.renewed += 1
        return self.key

    def set(self, case: Any, key: str, _ctx: Any) -> None:
        case.headers = {**(case.headers or {}), "Authorization": f"Bearer {key}"}


def test_unknown_query_parameters_are_refused_by_name(gateway: Gateway) -> None:
    client = client_of(gateway)
    refused = client.get("/v1/conversations?limit=5&limt=3&zz=1")
    assert refused.status_code == 422
    error = refused.json()["error"]
    assert error["code"] == "INVALID_INPUT"
    assert [d["path"] for d in error["details"]] == ["query.limt", "query.zz"]
    assert client.get("/v1/conversations?limit=5").status_code == 200
    assert client.get("/healthz?probe=1").status_code == 422


def test_a_405_names_every_method_of_its_path(gateway: Gateway) -> None:
    client = client_of(gateway)
    answer = client.patch("/v1/personas/p1")
    assert answer.status_code == 405
    assert answer.json()["error"]["code"] == "METHOD_NOT_ALLOWED"
    assert set(answer.headers["Allow"].split(", ")) >= {"GET", "PUT"}  # two routes
    # A literal segment is not a parameter's value: /memories/search is only POST.
    search = client.get("/v1/agents/a1/memories/search")
    assert search.status_code == 405 and search.headers["Allow"] == "POST"


def schemathesis_config() -> SchemathesisConfig:
    """A fixed seed, a few examples per operation, every check; one documented exception."""
    config = SchemathesisConfig.from_dict(
        {
            "seed": SEED,
            "continue-on-failure": True,
            "request-timeout": 60,  # a first LanceDB write on a loaded 2-core box takes seconds
            "generation": {
                "max-examples": EXAMPLES,
                "deterministic": True,
                "no-shrink": True,
                "database": "none",
            },
            "operations": [
                {
                    # Rules across fields cannot be said in JSON Schema: a workflow's edges and
                    # start name its nodes (unique ids), a tool's embedded input_schema must
                    # itself be a valid JSON Schema, a project's push_on_merge needs a repository
                    # URL, a memory upkeep policy (an agent's or a persona's) names one
                    # consolidation strategy, a model profile's thinking_config needs a thinking
                    # mode. The server answers 422 naming the field; every other rule of these
                    # bodies is in the schema. (429: the run sets user quotas it then meets.)
                    "include-path-regex": r"^/v1/((workflows|tools|personas|model-profiles)"
                    r"/\{obj_id\}|projects|agents(/\{agent_id\}(/memory-upkeep)?)?)$",
                    "checks": {
                        "positive_data_acceptance": {
                            "expected-statuses": ["2xx", "401", "403", "404", "409", "422", "429"]
                        }
                    },
                },
                {
                    # Rules across a list's items or a body's fields: a chat's last message must
                    # be the user's, with text, and all its messages quoted together fit one
                    # message; an MCP server's transport decides its fields (http: url and
                    # headers, stdio: command), header names the transport sets or that carry
                    # credentials are refused whatever their case, and a URL must be on the
                    # operator's WONDER_MCP_ALLOWED_HOSTS (empty here: 403) and a command start
                    # an MCP server (400 naming what it did); a conversation bundle's rows name
                    # each other (a message's turn, a move's turn and message, a call's turn must
                    # be the bundle's own, ids unique, no turn still running: 400 naming the row).
                    # Each answer names the field.
                    "include-path-regex": r"^/v1/((agents/\{agent_id\}/)?chat/completions"
                    r"|mcp-servers/\{server_id\}|conversation-imports)$",
                    "checks": {
                        "positive_data_acceptance": {
                            "expected-statuses": [
                                *("2xx", "400", "401", "403", "404", "409", "422", "429")
                            ]
                        }
                    },
                },
                {
                    # /mcp speaks MCP's streamable HTTP transport, whose contract is the MCP
                    # specification, not this document: a request is a JSON-RPC message sent
                    # with "Accept: application/json, text/event-stream" (a header OpenAPI
                    # cannot require), an answer a JSON-RPC message as JSON or as server-sent
                    # events (or 202 with no body for a notification), a refusal a JSON-RPC
                    # error. The official MCP conformance suite and the mcp SDK's client check
                    # it (tests/integration/test_mcp_server.py); here it is still fuzzed for
                    # server errors, its key and its query.
                    "include-path-regex": r"^/mcp$",
                    "checks": {
                        "positive_data_acceptance": {"enabled": False},
                        "content_type_conformance": {"enabled": False},
                        "response_schema_conformance": {"enabled": False},
                    },
                },
                {
                    # A decision's edited arguments are checked against the waiting tool's own
                    # input schema (the server's, not this document's): 422 naming the field; a
                    # decision on a call decided already or whose turn is over is a 409.
                    "include-path-regex": r"^/v1/conversations/\{conversation_id\}/approvals"
                    r"/\{approval_id\}$",
                    "checks": {
                        "positive_data_acceptance": {
                            "expected-statuses": [
                                *("2xx", "401", "403", "404", "409", "422", "429")
                            ]
                        }
                    },
                },
                {
                    # A re-run from a node needs the run to have ended, and to have reached the
                    # node with every node upstream of it completed: states of the run (a run the
                    # stateful phase just started is still running), answered with 409 naming
                    # them.
                    "include-path-regex": r"^/v1/workflow-runs/\{run_id\}/reruns$",
                    "checks": {
                        "positive_data_acceptance": {
                            "expected-statuses": ["2xx", "401", "403", "404", "409", "429"]
                        }
                    },
                },
                {
                    # A schedule's days must exist and its firings be at least the deployment's
                    # WONDER_TRIGGER_MIN_INTERVAL_S apart: rules of the calendar and the
                    # operator, answered with 400 naming the schedule.
                    "include-path-regex": r"^/v1/triggers$",
                    "checks": {
                        "positive_data_acceptance": {
                            "expected-statuses": ["2xx", "400", "401", "403", "404", "422", "429"]
                        }
                    },
                },
            ],
        }
    )
    config.update(max_failures=None)
    return config


@pytest.mark.timeout(1200)  # ~130,000 checks over every operation: minutes on a busy 2-core box
def test_schemathesis_over_the_whole_api(gateway: Gateway) -> None:
    config = schemathesis_config()
    schema = schemathesis.openapi.from_asgi("/openapi.json", gateway.app, config=config)
    credentials = RenewedKey(gateway.store, gateway.key)

    class Credentials:  # schemathesis makes its provider from a class
        def get(self, case: Any, ctx: Any) -> str:
            return credentials.get(case, ctx)

        def set(self, case: Any, key: str, ctx: Any) -> None:
            credentials.set(case, key, ctx)

    schema.auth(refresh_interval=None)(Credentials)
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
                        failure = result.failure_info.failure
                        where = getattr(failure, "operation", "")
                        status = getattr(failure, "status_code", "")
                        failures[(event.recorder.label, result.name)] = (
                            f"{failure.title} ({where} answered {status})"
                        )
        elif isinstance(event, events.NonFatalError | events.FatalError):
            errors.append(str(event.info))
    print(
        f"schemathesis: {checks} checks, {len(failures)} failing (operation, check) pairs, "
        f"the run's key renewed {credentials.renewed} times, {time.monotonic() - started:.0f} s"
    )
    assert not errors
    assert not failures, "contract failures:\n" + "\n".join(
        f"{k}: {v}" for k, v in failures.items()
    )


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
    gateway: Gateway, path: str, body: dict[str, Any]
) -> None:
    client = client_of(gateway)
    answer = client.put(path, json=body)
    assert answer.status_code == 422, answer.text
    assert answer.json()["error"]["code"] == "INVALID_INPUT"
