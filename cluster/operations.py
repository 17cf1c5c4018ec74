"""What operators see of the running cluster: the conversation directory's figures and resident
actors, and the Serve deployments (the model's, the gateway's) as Ray Serve reports them
(``core.ports.ClusterView``)."""

from __future__ import annotations

import asyncio
from enum import Enum
from typing import Any

from ray import serve

from cluster.conversations import RayConversations
from core.jsontypes import JsonObject


class RayClusterView:
    def __init__(self, conversations: RayConversations) -> None:
        self.conversations = conversations

    async def residency(self) -> JsonObject:
        return await self.conversations.residency()

    async def model_deployments(self) -> list[JsonObject]:
        status = await asyncio.to_thread(serve.status)
        return deployments_of(status)


def _name(value: Any) -> str:
    return str(value.value) if isinstance(value, Enum) else str(value)


def deployments_of(status: Any) -> list[JsonObject]:
    """Every deployment of every Serve application: its status and replicas by state."""
    out: list[JsonObject] = []
    for app_name, app in sorted(status.applications.items()):
        for name, deployment in sorted(app.deployments.items()):
            replicas = {_name(k): int(v) for k, v in deployment.replica_states.items()}
            out.append(
                {
                    "application": app_name,
                    "name": name,
                    "status": _name(deployment.status),
                    "replicas": replicas,
                    "message": deployment.message or "",
                }
            )
    return out
