"""What the operator allows in library objects, beyond their shape (docs/security.md).

- A task's ``python`` actions may name only registered callables (``core.callables``).
- A model profile may use the ``scripted`` provider (a test double that sleeps and emits tokens on
  demand) only where the operator turned test doubles on (``WONDER_ALLOW_TEST_DOUBLES``).
- An ``openai`` model profile's ``base_url`` is on the operator's allow-list
  (``WONDER_MODEL_ALLOWED_HOSTS``, ``core.egress``); so is a task's inline ``llm`` profile.
- A ``vllm`` model profile names a model the local deployment serves (``unserved_model``, checked
  by the gateway's ``PUT`` against what the deployment answers to: a 400 naming the served ones).

``policy_problems`` is checked when an object is stored (the gateway's ``PUT``, ``wonder library
apply``): a refused object is a 400 naming the field, never a failure at run time.
"""

from __future__ import annotations

from collections.abc import Callable

from pydantic import BaseModel, ValidationError

from core.callables import unregistered_callables
from core.domain import DEFAULT_MODEL, ModelProfile, TaskDef
from core.egress import check_url, model_egress
from core.errors import WonderError
from core.json_schemas import check_schema
from core.settings import Settings
from core.workflows import WorkflowDef

TEST_DOUBLES_OFF = (
    "provider: the 'scripted' provider is a test double and is disabled on this deployment "
    "(the operator enables it with WONDER_ALLOW_TEST_DOUBLES=true)"
)


def policy_problems(obj: BaseModel, settings: Settings) -> list[str]:
    """Why ``obj`` may not be stored under ``settings``, one line per problem (empty: allowed)."""
    if isinstance(obj, TaskDef):
        problems = unregistered_callables(
            ((a.kind, a.params) for a in obj.actions), settings.library_callables
        )
        return problems + inline_profile_problems(obj, settings)
    if isinstance(obj, ModelProfile):
        return scripted_problems(obj, settings) + egress_problems(obj, settings)
    if isinstance(obj, WorkflowDef) and obj.max_tokens > settings.workflow_max_nodes_per_run:
        return [
            f"max_tokens: {obj.max_tokens} is above this deployment's limit of "
            f"{settings.workflow_max_nodes_per_run} node executions per run "
            "(WONDER_WORKFLOW_MAX_NODES_PER_RUN)"
        ]
    return []


def egress_problems(profile: ModelProfile, settings: Settings) -> list[str]:
    """Why ``profile``'s ``base_url`` may not be used: not on the operator's allow-list (its
    address is checked again at every call)."""
    if profile.provider != "openai" or profile.base_url is None:
        return []
    try:
        check_url(profile.base_url, model_egress(settings), "base_url")
    except WonderError as exc:
        return [exc.message]
    return []


def inline_profile_problems(task: TaskDef, settings: Settings) -> list[str]:
    """An ``llm`` action's own ``profile`` passes the checks a stored profile does, and its
    ``json_schema`` those of a tool's input schema (linear-time patterns)."""
    problems: list[str] = []
    for index, action in enumerate(task.actions):
        schema = action.params.get("json_schema") if action.kind == "llm" else None
        if isinstance(schema, dict):
            try:
                check_schema(schema, f"actions.{index}.params.json_schema")
            except ValueError as exc:
                problems.append(str(exc))
        inline = action.params.get("profile") if action.kind == "llm" else None
        if not isinstance(inline, dict):
            continue
        where = f"actions.{index}.params.profile"
        try:
            profile = ModelProfile.model_validate({"id": "inline", **inline})
        except ValidationError as exc:
            problems.append(f"{where}: {exc.errors()[0]['msg']}")
            continue
        problems += [f"{where}: {p}" for p in policy_problems(profile, settings)]
    return problems


def scripted_problems(profile: ModelProfile, settings: Settings) -> list[str]:
    if profile.provider == "scripted" and not settings.allow_test_doubles:
        return [TEST_DOUBLES_OFF]
    return []


def unserved_model(
    profile: ModelProfile, served: Callable[[], frozenset[str] | None]
) -> str | None:
    """Why ``profile`` names a model the local deployment does not serve; ``None`` when it is
    served, names no local model, or nothing says (``served()``: the names the deployment answers
    to, asked only when there is a name to check; ``None``: unknown)."""
    if profile.provider != "vllm" or profile.model == DEFAULT_MODEL:
        return None  # every deployment answers to the default name
    names = served()
    if names is None or profile.model in names:
        return None
    return (
        f"model: {profile.model!r} is not served by the local model deployment "
        f"(it answers to: {', '.join(sorted(names)) or 'nothing'}); name one of its models or "
        "LoRA adapters"
    )
