"""Library objects: personas, model profiles, tools, tasks, workflows. Versioned; shared by all.

``PUT /v1/<kind>/{id}`` stores a new version (an unchanged body returns the current one),
``GET /v1/<kind>/{id}`` the latest or ``?version=N``, ``GET /v1/<kind>`` the latest of each,
``GET /v1/<kind>/{id}/versions`` every version.
"""

# No ``from __future__ import annotations``: the route factory below annotates parameters with
# models held in variables, which FastAPI must see as real classes, not strings.

from dataclasses import dataclass
from typing import Annotated, Any

from fastapi import APIRouter, Body, Path, Query
from pydantic import BaseModel

from core.domain import NAME_PATTERN, ModelProfile, Persona, TaskDef, Tool
from core.errors import InvalidInput, NotFound
from core.ids import utc_now
from core.library_policy import policy_problems
from core.settings import Settings
from core.store.audit import changed_fields
from core.store.operations import LibraryOps
from core.workflows import WorkflowDef
from serving.gateway.admin import record
from serving.gateway.auth import ClientId, Context, KeyAdmin
from serving.gateway.protocol import (
    Items,
    ModelProfileBody,
    PersonaBody,
    TaskBody,
    ToolBody,
    WorkflowBody,
)


@dataclass(frozen=True)
class LibraryKind:
    path: str  # URL segment
    store_attr: str  # attribute of Store holding its LibraryOps
    model: type[BaseModel]
    body: type[BaseModel]
    label: str


KINDS: tuple[LibraryKind, ...] = (
    LibraryKind("personas", "personas", Persona, PersonaBody, "persona"),
    LibraryKind(
        "model-profiles", "model_profiles", ModelProfile, ModelProfileBody, "model profile"
    ),
    LibraryKind("tools", "tools", Tool, ToolBody, "tool"),
    LibraryKind("tasks", "tasks", TaskDef, TaskBody, "task"),
    LibraryKind("workflows", "workflows", WorkflowDef, WorkflowBody, "workflow"),
)

ObjectId = Annotated[str, Path(pattern=NAME_PATTERN, description="Library object id")]


def stored_object(kind: LibraryKind, obj_id: str, body: BaseModel) -> BaseModel:
    """The library object a PUT body describes, with its id from the path."""
    body_id = getattr(body, "id", None)
    if body_id is not None and body_id != obj_id:
        raise InvalidInput(f"body id {body_id!r} does not match the path id {obj_id!r}")
    fields: dict[str, Any] = body.model_dump(by_alias=True, exclude={"id", "version"})
    return kind.model.model_validate({**fields, "id": obj_id})


def allowed(obj: BaseModel, settings: Settings) -> BaseModel:
    """``obj`` if the operator's policy allows storing it; else a 400 naming every problem."""
    problems = policy_problems(obj, settings)
    if problems:
        raise InvalidInput("; ".join(problems))
    return obj


def _routes_for(router: APIRouter, kind: LibraryKind) -> None:
    model, body_model, tag = kind.model, kind.body, kind.path

    def ops(context: Any) -> LibraryOps[Any]:
        ops_for_kind: LibraryOps[Any] = getattr(context.store, kind.store_attr)
        return ops_for_kind

    def put_object(
        obj_id: ObjectId,
        body: Annotated[body_model, Body()],  # type: ignore[valid-type]
        context: Context,
        key: KeyAdmin,
    ) -> Any:
        client_id = key.client_id
        obj = allowed(stored_object(kind, obj_id, body), context.settings)
        try:
            before = ops(context).get(obj_id)
        except NotFound:
            before = None
        stored = ops(context).put(obj, utc_now())
        if before is None or stored.version != before.version:
            details = {
                "kind": kind.label,
                "id": obj_id,
                "version": stored.version,
                "changed": changed_fields(before, stored),
            }
            record(context, client_id, "library.put", f"{kind.store_attr}:{obj_id}", details)
        return stored

    def get_object(
        obj_id: ObjectId,
        context: Context,
        _client: ClientId,
        version: Annotated[int | None, Query(ge=1, description="Default: the latest")] = None,
    ) -> Any:
        return ops(context).get(obj_id, version)

    def list_objects(context: Context, _client: ClientId) -> Any:
        return Items[model](items=ops(context).list_latest())  # type: ignore[valid-type]

    def list_versions(obj_id: ObjectId, context: Context, _client: ClientId) -> Any:
        found = ops(context).versions(obj_id)
        if not found:
            ops(context).get(obj_id)  # raises NotFound with the usual message
        return Items[model](items=found)  # type: ignore[valid-type]

    base = f"/v1/{kind.path}"
    router.add_api_route(
        base + "/{obj_id}",
        put_object,
        methods=["PUT"],
        response_model=model,
        tags=[tag],
        summary=f"Store a new version of a {kind.label}",
    )
    router.add_api_route(
        base + "/{obj_id}",
        get_object,
        methods=["GET"],
        response_model=model,
        tags=[tag],
        summary=f"Get a {kind.label} (latest, or ?version=N)",
    )
    router.add_api_route(
        base,
        list_objects,
        methods=["GET"],
        response_model=Items[model],  # type: ignore[valid-type]
        tags=[tag],
        summary=f"List the latest version of every {kind.label}",
    )
    router.add_api_route(
        base + "/{obj_id}/versions",
        list_versions,
        methods=["GET"],
        response_model=Items[model],  # type: ignore[valid-type]
        tags=[tag],
        summary=f"List every version of a {kind.label}",
    )


def build_router() -> APIRouter:
    router = APIRouter()
    for kind in KINDS:
        _routes_for(router, kind)
    return router


router = build_router()
