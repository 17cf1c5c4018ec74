"""Serve applications as a cluster deploys them: the model deployments with their placement.

``serving`` builds the deployments; here they get the node placement that ``cluster.placement``
decides from the settings (vLLM replicas on accelerator nodes, the embedder where the settings
say), so ``serving`` stays unaware of node groups.
"""

from __future__ import annotations

from typing import Any

from ray.serve import Application

from cluster import niceness, placement
from cluster.gateway import build_gateway_app
from core.settings import Settings, load_settings, wonder_env


def placed_llm_app(settings: Settings) -> Application:
    """The vLLM application (``serving.llm``: every model's deployment) placed on the
    accelerator nodes as ``placement.llm_deployment_options`` says, its replicas at
    ``WONDER_LLM_NICENESS`` (``cluster.niceness.llm_env``)."""
    from serving.llm import build_llm_app

    def placed(options: dict[str, Any]) -> dict[str, Any]:
        out = placement.llm_deployment_options(options, settings)
        actor_options = niceness.with_env(out["ray_actor_options"], niceness.llm_env(settings))
        return {**out, "ray_actor_options": actor_options}

    return build_llm_app(settings, placement=placed)


def placed_embedder_app(settings: Settings, **kwargs: Any) -> Application:
    """The embedder application with ``placement.embedder_actor_options``."""
    from serving.embedder_app import build_embedder_app

    options = niceness.at_worker_niceness(placement.embedder_actor_options(settings))
    return build_embedder_app(placement=options, **kwargs)


# Builders for a Serve config file (KubeRay's ``serveConfigV2``, ``serve deploy``): each reads
# the WONDER_* settings of the replica's environment, as ``wonder up`` would pass them.


def gateway_from_env(args: dict[str, str]) -> Application:
    """``import_path: cluster.serve_apps:gateway_from_env``."""
    return build_gateway_app(wonder_env())


def llm_from_env(args: dict[str, str]) -> Application:
    """``import_path: cluster.serve_apps:llm_from_env``."""
    return placed_llm_app(load_settings())


def embedder_from_env(args: dict[str, str]) -> Application:
    """``import_path: cluster.serve_apps:embedder_from_env``."""
    return placed_embedder_app(load_settings())
