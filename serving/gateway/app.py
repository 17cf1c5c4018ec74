"""The gateway app: ``create_api`` builds the FastAPI app; ``build_gateway_app`` wraps it in the
Ray Serve deployment ``gateway`` (``num_cpus=0``: it waits on actors, it does not compute).

The FastAPI app is built inside each replica (``__serve_build_asgi_app__``), after the replica has
opened its store, so nothing unpicklable crosses from the driver.
"""

from __future__ import annotations

from fastapi import FastAPI
from ray import serve
from ray.serve import Application

from serving.gateway import (
    agents,
    console,
    conversation_control,
    conversations,
    library,
    memories,
    messages,
    stream,
    turns,
    workflows,
)
from serving.gateway.context import ClusterConversations, GatewayContext
from serving.gateway.errors import install_error_handlers
from serving.gateway.protocol import ErrorResponse

DESCRIPTION = """\
LLM agents as an actor cluster. Authenticate with `Authorization: Bearer <api key>`
(`wonder keys create NAME`). Errors are `{"error": {"code", "message", "retriable"}}`.
Follow a conversation on the WebSocket `/v1/conversations/{id}/stream?after_seq=N`
(see docs/api.md).
"""

ERROR_RESPONSES: dict[int | str, dict[str, object]] = {
    status: {"model": ErrorResponse, "description": text}
    for status, text in (
        (400, "Malformed request"),
        (401, "Missing or invalid API key"),
        (404, "Not found"),
        (409, "Conflict"),
        (422, "Invalid fields"),
        (503, "Temporarily unavailable; retry"),
    )
}


def create_api(context: GatewayContext) -> FastAPI:
    """The gateway's FastAPI app over ``context`` (no Ray needed: tests pass a fake context)."""
    api = FastAPI(title="Wonder", version="0.1.0", description=DESCRIPTION)
    api.state.gateway = context
    install_error_handlers(api)
    api.include_router(console.router)
    api.include_router(stream.router)
    for router in (
        library.router,
        agents.router,
        conversations.router,
        messages.router,
        turns.router,
        conversation_control.router,
        workflows.router,
        memories.router,
    ):
        api.include_router(router, responses=ERROR_RESPONSES)
    return api


# Every open WebSocket counts as an ongoing request: Serve's default of 5 would make the sixth
# concurrent stream's handshake wait. The gateway only awaits actors, so it can hold many.
@serve.deployment(name="gateway", ray_actor_options={"num_cpus": 0}, max_ongoing_requests=10_000)
@serve.ingress()
class Gateway:
    """One gateway replica: a store handle and access to the Conversation actors."""

    def __init__(self, settings_env: dict[str, str]) -> None:
        from actors.stores import open_store

        self._context = GatewayContext(
            store=open_store(settings_env),
            conversations=ClusterConversations(),
            settings_env=settings_env,
        )

    def __serve_build_asgi_app__(self) -> FastAPI:
        return create_api(self._context)


def build_gateway_app(settings_env: dict[str, str]) -> Application:
    """The gateway as a Serve application; run it with ``serve.run(app, name="gateway")``."""
    wonder_env = {k: v for k, v in settings_env.items() if k.startswith("WONDER_")}
    deployment = Gateway.options(
        ray_actor_options={"num_cpus": 0, "runtime_env": {"env_vars": wonder_env}}
    )
    return deployment.bind(settings_env)
