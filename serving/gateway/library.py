"""Library objects: personas, model profiles, tools, tasks, workflows. Versioned, in libraries.

Each client has its own library; the system library (shipped with Wonder, ``wonder library
apply``) is read-only to every client (issue 13, ``core/store/library.py``). A client sees its own
objects and the system's; an id means the client's own object if it has one, else the system's
(``?owner=system`` asks for the system's). Every object read carries ``owner``: ``"system"`` or
the client's id.

``PUT /v1/<kind>/{id}`` stores a new version in the client's library (admin-scope key; 403 for an
id the system library holds), ``GET /v1/<kind>/{id}`` the latest or ``?version=N``,
``GET /v1/<kind>`` the latest of each, ``GET /v1/<kind>/{id}/versions`` every version.
"""

# No ``from __future__ import annotations``: the route factory below annotates parameters with
# models held in variables, which FastAPI must see as real classes, not strings.

from dataclasses import dataclass
from typing import Annotated, Any

from fastapi import APIRouter, Body, Path, Query
from pydantic import BaseModel, Field, create_model

from core.domain import NAME_PATTERN, ModelProfile, Persona, TaskDef, Tool
from core.errors import Conflict, InvalidInput, NotFound, PermissionDenied
from core.ids import utc_now
from core.library_policy import policy_problems, unserved_model
from core.store.audit import changed_fields
from core.store.library import SYSTEM, LibraryOps, Owned
from core.workflows import WorkflowDef
from serving.gateway.audit_trail import Audit
from serving.gateway.auth import ClientId, Context, KeyAdmin
from serving.gateway.context import GatewayContext
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
        # A representation inconsistent with its target: RFC 9110 §9.3.4 suggests 409.
        raise Conflict(f"body id {body_id!r} does not match the path id {obj_id!r}")
    fields: dict[str, Any] = body.model_dump(by_alias=True, exclude={"id", "version", "owner"})
    return kind.model.model_validate({**fields, "id": obj_id})


OWNER_DESCRIPTION = "Whose library holds it: 'system' or the client's id"
OwnerQuery = Annotated[
    str | None,
    Query(
        max_length=64,
        description="'system' for the system library's object (default: yours, else the system's)",
    ),
]


def owned_model(model: type[BaseModel]) -> type[BaseModel]:
    """``model`` as read over the API: with its ``owner``."""
    owned: type[BaseModel] = create_model(
        f"{model.__name__}Read", __base__=model, owner=(str, Field(description=OWNER_DESCRIPTION))
    )
    return owned


def owned_body(body: type[BaseModel]) -> type[BaseModel]:
    """A PUT body that may carry ``owner`` back as read (checked, never stored)."""
    with_owner: type[BaseModel] = create_model(
        body.__name__, __base__=body, owner=(str | None, Field(None, max_length=64))
    )
    return with_owner


def read_view(owned: Owned[Any], model: type[BaseModel]) -> BaseModel:
    return model.model_validate({**owned.obj.model_dump(by_alias=True), "owner": owned.owner})


def visible_owner(client_id: str, owner: str | None) -> str | None:
    """The library a read asks for: ``None`` (the client's view), the system's or its own; any
    other client's is not found."""
    if owner is None or owner in (SYSTEM, client_id):
        return owner
    raise NotFound(f"library {owner} not found")


def writable(
    label: str, obj_id: str, ops: LibraryOps[Any], client_id: str, owner: str | None
) -> None:
    """A client writes only its own library: 403 for an id only the system library holds (or a
    body naming the system as owner), 404 for a body naming another client."""
    if owner == SYSTEM or (owner is None and ops.owner_of(obj_id, client_id) == SYSTEM):
        raise PermissionDenied(
            f"{label} {obj_id} belongs to the system library, which is read-only: "
            "store yours under another id"
        )
    if owner not in (None, client_id):
        raise NotFound(f"library {owner} not found")


def allowed(obj: BaseModel, context: GatewayContext) -> BaseModel:
    """``obj`` if the operator's policy allows storing it (registered callables, test doubles
    enabled), else a 403 naming every problem; a ``vllm`` model profile naming a model the local
    deployment does not serve is a 400 naming the ones it does."""
    problems = policy_problems(obj, context.settings)
    if problems:
        raise PermissionDenied("; ".join(problems))
    if isinstance(obj, ModelProfile) and context.models is not None:
        unserved = unserved_model(obj, context.models.names)
        if unserved is not None:
            raise InvalidInput(unserved)
    return obj


def _routes_for(router: APIRouter, kind: LibraryKind) -> None:
    tag = kind.path
    body_model, read_model = owned_body(kind.body), owned_model(kind.model)

    def ops(context: Any) -> LibraryOps[Any]:
        ops_for_kind: LibraryOps[Any] = getattr(context.store, kind.store_attr)
        return ops_for_kind

    def put_object(
        obj_id: ObjectId,
        body: Annotated[body_model, Body()],  # type: ignore[valid-type]
        context: Context,
        key: KeyAdmin,
        audit: Audit,
    ) -> Any:
        client_id = key.client_id
        writable(kind.label, obj_id, ops(context), client_id, getattr(body, "owner", None))
        obj = allowed(stored_object(kind, obj_id, body), context)
        try:
            before = ops(context).get(obj_id, owner=client_id)
        except NotFound:
            before = None
        stored = ops(context).put(obj, utc_now(), owner=client_id)
        if before is None or stored.version != before.version:
            details = {
                "kind": kind.label,
                "id": obj_id,
                "owner": client_id,
                "version": stored.version,
                "changed": changed_fields(before, stored),
            }
            audit.record("library.put", f"{kind.store_attr}:{obj_id}", details)
        return read_view(Owned(client_id, stored), read_model)

    def get_object(
        obj_id: ObjectId,
        context: Context,
        client_id: ClientId,
        version: Annotated[int | None, Query(ge=1, description="Default: the latest")] = None,
        owner: OwnerQuery = None,
    ) -> Any:
        found = ops(context).find(
            obj_id, version, client_id=client_id, owner=visible_owner(client_id, owner)
        )
        return read_view(found, read_model)

    def list_objects(context: Context, client_id: ClientId) -> Any:
        found = ops(context).list_owned(client_id, limit=context.settings.list_max_items)
        return Items[read_model](items=[read_view(o, read_model) for o in found])  # type: ignore[valid-type]

    def list_versions(
        obj_id: ObjectId, context: Context, client_id: ClientId, owner: OwnerQuery = None
    ) -> Any:
        latest = ops(context).find(
            obj_id, client_id=client_id, owner=visible_owner(client_id, owner)
        )
        found = ops(context).versions(obj_id, owner=latest.owner)
        return Items[read_model](  # type: ignore[valid-type]
            items=[read_view(Owned(latest.owner, o), read_model) for o in found]
        )

    base = f"/v1/{kind.path}"
    router.add_api_route(
        base + "/{obj_id}",
        put_object,
        methods=["PUT"],
        response_model=read_model,
        tags=[tag],
        summary=f"Store a new version of a {kind.label} in your library (admin-scope key)",
    )
    router.add_api_route(
        base + "/{obj_id}",
        get_object,
        methods=["GET"],
        response_model=read_model,
        tags=[tag],
        summary=f"Get a {kind.label}: yours, else the system's (latest, or ?version=N)",
    )
    router.add_api_route(
        base,
        list_objects,
        methods=["GET"],
        response_model=Items[read_model],  # type: ignore[valid-type]
        tags=[tag],
        summary=f"List the latest version of every {kind.label} you see (system's and yours)",
    )
    router.add_api_route(
        base + "/{obj_id}/versions",
        list_versions,
        methods=["GET"],
        response_model=Items[read_model],  # type: ignore[valid-type]
        tags=[tag],
        summary=f"List every version of a {kind.label}",
    )


def build_router() -> APIRouter:
    router = APIRouter()
    for kind in KINDS:
        _routes_for(router, kind)
    return router


router = build_router()
