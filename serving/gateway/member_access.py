"""The one membership check of every route (``core.access`` holds the rules).

``member_access`` is a dependency of every router of the gateway (``app.py``). Without an acting
user (no ``X-Wonder-User``) it does nothing: the client acts, and may do everything its key may.
With one, it finds the conversation the route acts on from the route's path parameters, through
``REACH`` (the first parameter of the route found there decides), and checks the user's level
for what the route does (``action_of``):

- ``conversation_id``: that conversation (every ``/v1/conversations/{id}/…`` route);
- ``turn_id`` (``/v1/threads/{turn_id}``): the conversation the turn ran in;
- ``label`` (``/v1/sessions/{label}``): the session's conversation (a ``PUT`` names its
  conversation in the body: ``core.sessions.create_session`` checks it);
- ``run_id`` (``/v1/workflow-runs/{run_id}…``): the conversation the run works for, when a
  conversation's agent started it (a run started over the API works for none: the client's);
- ``hook_id``, ``trigger_id``: no conversation, but whose it is: a user reaches only the hooks
  and triggers it made (each posts as its maker, so it is as good as that user's key).

A user who is not a member gets exactly what the route answers when the object is not there
(the ``NotFound`` each entry names), so a refusal never tells that the object exists; a member
below the level needed gets 403 naming both levels. What a route finds in its body (a routing
target, a session's conversation) and what a listing shows are the routes' own checks, through
the same rules (``core.sessions``, the ``member`` filters of the store's listings).
``tests/security/test_access_routes.py`` holds every route to this: a route that reaches a
conversation and is not refused to a non-member fails it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from fastapi import Depends, Request

from core.access import Action, Level, check
from core.errors import NotFound
from serving.gateway.auth import ClientId, Context, User
from serving.gateway.context import GatewayContext

MEMBERS_PREFIX = "/v1/conversations/{conversation_id}/members"
CONTEXT_PREFIX = "/v1/conversations/{conversation_id}/context"


@dataclass(frozen=True)
class Reached:
    """What a path parameter leads to: a conversation (None: none, the client's object), or
    an object made by a user (``maker``; hooks and triggers)."""

    conversation_id: str | None = None
    maker: str | None = None
    by_maker: bool = False


# (context, client id, the parameter's value) → what it reaches; ``NotFound`` when the client has
# no such object (the route's own answer for it).
Resolver = Callable[[GatewayContext, str, str], Reached | None]


def _conversation(context: GatewayContext, client_id: str, conversation_id: str) -> Reached:
    context.store.conversations.get(conversation_id, client_id=client_id)
    return Reached(conversation_id)


def _thread(context: GatewayContext, client_id: str, turn_id: str) -> Reached:
    try:
        turn = context.store.turns.get(turn_id)
        context.store.conversations.get(turn.conversation_id, client_id=client_id)
    except NotFound:
        raise NotFound(f"thread {turn_id} not found") from None
    return Reached(turn.conversation_id)


def _session(context: GatewayContext, client_id: str, label: str) -> Reached | None:
    row = context.store.session_labels.get(client_id, label)
    return None if row is None else Reached(row.conversation_id)  # None: the route's 404


def _run(context: GatewayContext, client_id: str, run_id: str) -> Reached:
    run = context.workflows.get(run_id, client_id)
    return Reached(run.context.conversation_id)


def _hook(context: GatewayContext, client_id: str, hook_id: str) -> Reached:
    return Reached(
        maker=context.store.hooks.get(hook_id, client_id=client_id).user_id, by_maker=True
    )


def _trigger(context: GatewayContext, client_id: str, trigger_id: str) -> Reached:
    trigger = context.store.triggers.get(trigger_id, client_id=client_id)
    return Reached(maker=trigger.user_id, by_maker=True)


# Path parameter → (how it reaches a conversation, what the route answers when it is not there).
REACH: dict[str, tuple[Resolver, Callable[[str], str]]] = {
    "conversation_id": (_conversation, lambda v: f"conversation {v} not found"),
    "turn_id": (_thread, lambda v: f"thread {v} not found"),
    "label": (_session, lambda v: f"session {v} not found"),
    "run_id": (_run, lambda v: f"workflow run {v} not found"),
    "hook_id": (_hook, lambda v: f"hook {v} not found"),
    "trigger_id": (_trigger, lambda v: f"trigger {v} not found"),
}

# Routes whose parameter is checked elsewhere: a session PUT names its conversation in its body.
BODY_CHECKED = {("PUT", "/v1/sessions/{label}")}


def action_of(method: str, route_path: str) -> Action:
    """What a request on a conversation's route does, by method and route."""
    if method in ("GET", "HEAD") or route_path.startswith(MEMBERS_PREFIX):
        return Action.READ  # members' changes are checked by the members routes themselves
    if route_path.endswith(("/messages", "/cancel", "/replay")):
        return Action.WRITE  # a replay writes nothing, but spends model tokens as a message does
    if route_path.startswith(CONTEXT_PREFIX):
        return Action.WRITE  # the context channel is written like the conversation itself
    if method == "DELETE" and route_path == "/v1/conversations/{conversation_id}":
        return Action.DELETE
    return Action.MANAGE  # any other change: policy, participants, complete, merge, new routes


def level_of(context: GatewayContext, client_id: str, conversation_id: str, user: str) -> Level:
    """The user's level on the client's conversation; 404 when either is not there."""
    context.store.conversations.get(conversation_id, client_id=client_id)
    level = context.store.members.level(conversation_id, user)
    if level is None:
        raise NotFound(f"conversation {conversation_id} not found")
    return level


def check_reach(
    context: GatewayContext,
    client_id: str,
    user: str,
    method: str,
    route_path: str,
    params: dict[str, str],
) -> None:
    """``NotFound`` / ``PermissionDenied`` unless ``user`` may do this request (module doc)."""
    if (method, route_path) in BODY_CHECKED:
        return
    for name, (resolve, missing) in REACH.items():
        value = params.get(name)
        if value is None:
            continue
        reached = resolve(context, client_id, value)
        if reached is None:
            return
        if reached.by_maker:
            if reached.maker != user:
                raise NotFound(missing(value))
            return
        if reached.conversation_id is None:
            return  # the client's own object, in no conversation
        level = context.store.members.level(reached.conversation_id, user)
        if level is None:
            raise NotFound(missing(value))
        check(level, action_of(method, route_path), user, reached.conversation_id)
        return


def member_access(request: Request, context: Context, client_id: ClientId, user: User) -> None:
    """Dependency of every route: with an acting user, the conversation (or the user's object)
    the route reaches is checked (module docstring)."""
    if user is None:
        return
    route = request.scope.get("route")
    route_path = getattr(route, "path", request.url.path)
    params = {k: str(v) for k, v in request.path_params.items()}
    check_reach(context, client_id, user, request.method, route_path, params)


MemberAccess = Depends(member_access)
