"""What library code can make the executor run, in-process (the real ``run_task``, no Ray):
only registered callables; exits, interrupts and exceptions become failed results; a time limit
and an output cap hold. The same over real Ray is in tests/integration/test_executor_isolation.py.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from actors.executor import run_task
from cluster.executor_wiring import executor_services
from core.callables import lookup, registered, unregistered_callables
from core.domain import ModelProfile, TaskAction, TaskDef
from core.errors import NotFound
from core.library_policy import policy_problems
from core.ports import TaskContext, TaskOutcome
from core.settings import Settings, settings_from_env


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    return {
        "WONDER_DATA_DIR": str(tmp_path),
        "WONDER_ACTION_TIMEOUT_S": "1",
        "WONDER_ACTION_OUTPUT_MAX_BYTES": "2048",
        "WONDER_LIBRARY_CALLABLES": '["tests.callables"]',
    }


async def run(env: dict[str, str], *actions: dict[str, Any], **task_input: Any) -> TaskOutcome:
    task = TaskDef(id="t", actions=[TaskAction.model_validate(a) for a in actions])
    return await run_task(task, dict(task_input), TaskContext(), executor_services(env))


def call(name: str, **params: Any) -> dict[str, Any]:
    return {"kind": "python", "params": {"callable": name, **params}}


def test_the_shipped_library_and_configured_modules_are_registered() -> None:
    names = {c.name for c in registered(["tests.callables"])}
    assert {
        "library.callables:calculate",
        "library.workflows.steps:noop",
        "actors.actions.memory_actions:assemble_context",
        "tests.callables:exit_worker",
    } <= names
    assert not any(n.startswith(("jobs.", "cluster.", "core.store")) for n in names)


@pytest.mark.parametrize(
    "name", ["jobs.cli:main", "actors.executor:run_task", "os:system", "library.callables:math"]
)
def test_unregistered_names_are_refused(name: str) -> None:
    with pytest.raises(NotFound, match="not registered"):
        lookup(name)
    (problem,) = unregistered_callables([("python", {"callable": name})])
    assert problem.startswith("actions.0.params.callable: callable") and name in problem


def test_policy_refuses_a_task_and_a_scripted_profile_where_test_doubles_are_off() -> None:
    off = Settings(allow_test_doubles=False, library_callables=[])
    task = TaskDef(
        id="t", actions=[TaskAction(kind="python", params={"callable": "jobs.cli:main"})]
    )
    assert "jobs.cli:main" in policy_problems(task, off)[0]
    scripted = ModelProfile(id="s", provider="scripted")
    assert "WONDER_ALLOW_TEST_DOUBLES" in policy_problems(scripted, off)[0]
    assert policy_problems(scripted, Settings(allow_test_doubles=True)) == []
    assert policy_problems(ModelProfile(id="v"), off) == []


def test_test_doubles_are_off_by_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("WONDER_ALLOW_TEST_DOUBLES")
    assert settings_from_env().allow_test_doubles is False


async def test_a_registered_callable_runs(env: dict[str, str]) -> None:
    outcome = await run(env, call("tests.callables:worker_pid"))
    assert outcome.success and outcome.result == {"pid": os.getpid()}


@pytest.mark.parametrize(
    ("name", "fragment"),
    [
        ("tests.callables:exit_worker", "tried to stop the worker (SystemExit)"),
        ("tests.callables:interrupt", "tried to stop the worker (KeyboardInterrupt)"),
        ("jobs.cli:main", "not registered"),
    ],
)
async def test_exits_and_unregistered_names_are_failed_results(
    env: dict[str, str], name: str, fragment: str
) -> None:
    outcome = await run(env, call(name))
    assert not outcome.success and outcome.error is not None
    assert fragment in outcome.error.message
    assert (await run(env, call("tests.callables:worker_pid"))).success  # still here


async def test_a_callable_that_spins_is_stopped_at_the_time_limit(env: dict[str, str]) -> None:
    outcome = await run(env, call("tests.callables:spin"))
    assert not outcome.success and outcome.error is not None
    assert outcome.error.code == "TIMEOUT" and "longer than 1s" in outcome.error.message


async def test_an_async_action_is_stopped_at_the_time_limit(env: dict[str, str]) -> None:
    outcome = await run(env, call("library.workflows.steps:pause"), seconds=5)
    assert not outcome.success and outcome.error is not None
    assert outcome.error.code == "TIMEOUT" and "action 0 (python)" in outcome.error.message


async def test_an_output_over_the_cap_fails(env: dict[str, str]) -> None:
    assert (await run(env, call("tests.callables:big_output"), bytes=100)).success
    outcome = await run(env, call("tests.callables:big_output"), bytes=5000)
    assert not outcome.success and outcome.error is not None
    assert "the limit is 2048" in outcome.error.message
