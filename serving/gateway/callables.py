"""``GET /v1/library/callables``: what a task's ``python`` action may name on this deployment."""

from __future__ import annotations

from fastapi import APIRouter
from pydantic import Field

from core.callables import registered
from serving.gateway.auth import ClientId, Context
from serving.gateway.protocol import Items, WireModel

router = APIRouter(tags=["library"])


class CallableOut(WireModel):
    name: str = Field(description="What a task names in params.callable: 'module:function'")
    description: str
    is_async: bool = Field(alias="async", serialization_alias="async")


@router.get(
    "/v1/library/callables",
    response_model=Items[CallableOut],
    response_model_by_alias=True,
    summary="List the callables python task actions may name",
)
def list_callables(context: Context, _client: ClientId) -> Items[CallableOut]:
    found = registered(context.settings.library_callables)
    return Items[CallableOut](
        items=[
            CallableOut.model_validate(
                {"name": c.name, "description": c.description, "async": c.is_async}
            )
            for c in found
        ]
    )
