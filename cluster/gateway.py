"""The gateway as a Ray Serve deployment (``gateway``; ``num_cpus=0``: it waits on actors, it does
not compute). Each replica builds its context's ports (``cluster.wiring``) and then the FastAPI app
(``serving.gateway.app.create_api``), so nothing unpicklable crosses from the driver.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

import ray
from fastapi import FastAPI
from ray import serve
from ray.serve import Application

from cluster import niceness, placement, wiring
from cluster.executor_dispatch import dispatch_handle
from cluster.executor_pool import start_pool
from cluster.mcp import RayMcpTools
from cluster.memory_access import ProcessMemory, ServedEmbedders
from cluster.model_tokenizers import DeployedTokenizers
from cluster.models import ServedChatModels
from cluster.operations import RayClusterView
from cluster.scheduler import scheduler_handle
from core.secret_vault import SecretVault
from core.settings import Settings, settings_from_env, wonder_env
from core.store import store_for_settings
from serving.gateway.app import create_api
from serving.gateway.context import GatewayContext
from serving.llm_client import LLM_APP_NAME, LLM_DEPLOYMENT_NAME

log = logging.getLogger("wonder.gateway")


class DeployedModelNames:
    """``ServedModels``: what the local model application's primary deployment answers to (every
    deployment's models, aliases and LoRA adapters), remembered for ``ttl_s``. Unknown (``None``)
    while the application is not deployed or not running, or when it does not answer within
    ``timeout_s``."""

    def __init__(self, ttl_s: float = 10.0, timeout_s: float = 5.0) -> None:
        self.ttl_s = ttl_s
        self.timeout_s = timeout_s
        self._lock = threading.Lock()
        self._known: tuple[float, frozenset[str] | None] | None = None

    def names(self) -> frozenset[str] | None:
        with self._lock:
            known = self._known
            if known is not None and time.monotonic() - known[0] < self.ttl_s:
                return known[1]
            names = self._ask()
            self._known = (time.monotonic(), names)
            return names

    def _ask(self) -> frozenset[str] | None:
        try:
            app = serve.status().applications.get(LLM_APP_NAME)
            if app is None or app.status != "RUNNING":
                return None
            handle = serve.get_deployment_handle(LLM_DEPLOYMENT_NAME, app_name=LLM_APP_NAME)
            served: list[str] = handle.served_models.remote().result(timeout_s=self.timeout_s)
        except Exception as exc:  # unknown, whatever went wrong: the profile is stored unchecked
            log.info("the local model deployment did not list its models (%s)", exc)
            return None
        return frozenset(served)


# Every open WebSocket counts as an ongoing request: Serve's default of 5 would make the sixth
# concurrent stream's handshake wait. The gateway only awaits actors, so it can hold many.
@serve.deployment(name="gateway", ray_actor_options={"num_cpus": 0}, max_ongoing_requests=10_000)
@serve.ingress()
class Gateway:
    """One gateway replica: a store handle and ports to the actors."""

    def __init__(self, settings_env: dict[str, str]) -> None:
        settings = settings_from_env(settings_env)
        store = store_for_settings(settings)
        conversations = wiring.conversations(settings_env)
        self._context = GatewayContext(
            store=store,
            conversations=conversations,
            workflows=wiring.workflows(settings_env),
            memory=ProcessMemory(settings, ServedEmbedders(settings_env)),
            settings_env=settings_env,
            workspaces=wiring.workspaces(settings_env),
            node=ray.get_runtime_context().get_node_id(),
            models=DeployedModelNames(),
            mcp=RayMcpTools(settings_env),
            chat_models=ServedChatModels(settings, SecretVault(store, settings)),
            cluster=RayClusterView(conversations),
            tokenizers=DeployedTokenizers(settings_env),
        )
        scheduler_handle(settings_env)  # cron triggers fire while a gateway is up (idempotent)
        start_pool(settings)  # executor processes up before the first turn (idempotent)
        dispatch_handle(ray.get_runtime_context().get_node_id())  # this node's, likewise

    def __serve_build_asgi_app__(self) -> FastAPI:
        return create_api(self._context)


def build_gateway_app(settings_env: dict[str, str]) -> Application:
    """The gateway as a Serve application; run it with ``serve.run(app, name="gateway")``.

    ``WONDER_GATEWAY_NUM_REPLICAS`` replicas over the nodes the placement rules allow, at most
    ``WONDER_GATEWAY_MAX_REPLICAS_PER_NODE`` on one (default 1: a lost node takes one replica
    with it; a replica beyond the nodes that can hold one waits for a node)."""
    deployment: Any = Gateway
    settings = settings_from_env(settings_env)
    env_vars = {**wonder_env(settings_env), **niceness.raised_env(settings)}
    options = {"num_cpus": 0, "runtime_env": {"env_vars": env_vars}}
    placed = placement.gateway_actor_options(settings)
    configured = deployment.options(
        num_replicas=settings.gateway_num_replicas,
        max_replicas_per_node=settings.gateway_max_replicas_per_node,
        ray_actor_options=placement.merged(options, placed),
    )
    app: Application = configured.bind(settings_env)
    return app


def start_serve(settings: Settings) -> None:
    """Start Serve's controller and HTTP proxies on the gateway's host and port.

    ``WONDER_SERVE_PROXY_LOCATION``: ``EveryNode`` (Serve's default) runs a proxy on every node
    that holds a replica, each on the same port, for a load balancer in front of them: a client
    of a lost node's proxy reconnects through another one. ``HeadOnly`` runs one proxy on the
    head, which routes to replicas on any node (one machine, where several nodes cannot share
    a port: ``tests/cluster``).
    """
    serve.start(
        proxy_location=settings.serve_proxy_location,
        http_options={"host": settings.gateway_host, "port": settings.gateway_port},
        controller_options=niceness.serve_controller_options(settings),
    )
