"""Which of our processes run ahead of Ray's workers for the CPU (their niceness).

Ray's CoreWorker renices a worker process to ``RAY_worker_niceness`` (15 by default) only once the
process has started: while a new worker imports Python it runs at the raylet's niceness (0). On a
small node a burst of conversation actors starting then outranks everything already running, the
gateway replicas and the Serve proxy included, and acknowledgements wait for a core
(docs/benchmarks.md, "Activation"). So the gateway replicas and the Serve controller — and the
proxies, which the controller creates and which inherit its runtime env — start with
``RAY_worker_niceness`` set to ``WONDER_GATEWAY_NICENESS`` (default 0), as Ray's own job manager
does for job drivers. An actor created from such a process would inherit the setting;
``worker_runtime_env`` gives it Ray's worker niceness back.

The vLLM replicas (and the EngineCore processes they start) run at ``WONDER_LLM_NICENESS``
(default 10), ahead of Ray's workers too: on a CPU node the engine's threads decode on every
core, in steps that wait for the slowest thread, so at 15 every worker that wakes (the relay of
other streams, a starting actor) would stall a whole step (docs/local-model.md, "Token
batches").
"""

from __future__ import annotations

import os
from typing import Any

from core.settings import Settings

RAY_WORKER_NICENESS = "RAY_worker_niceness"  # ray._private.ray_constants.RAY_WORKER_NICENESS
RAY_DEFAULT_WORKER_NICENESS = "15"  # Ray's ``worker_niceness`` default (ray_config_def.h)


def raised_env(settings: Settings) -> dict[str, str]:
    """Environment variables of a process that runs ahead of Ray's workers (a gateway replica)."""
    return {RAY_WORKER_NICENESS: str(settings.gateway_niceness)}


# Uvicorn (Serve's HTTP proxy) rewrites a request's client address from X-Forwarded-For when the
# peer is one it trusts (loopback by default), so anything on the host could forge the address
# the audit trail records. The proxies trust no one; the gateway itself believes the header only
# from the proxies the operator lists (WONDER_TRUSTED_PROXIES, ``core.client_address``).
PROXY_TRUSTS_NO_FORWARDED_FOR = {"FORWARDED_ALLOW_IPS": ""}


def serve_controller_options(settings: Settings) -> dict[str, Any]:
    """``serve.start(controller_options=...)``: the controller and its proxies run raised (and
    the proxies believe no X-Forwarded-For)."""
    env_vars = {**raised_env(settings), **PROXY_TRUSTS_NO_FORWARDED_FOR}
    return {"runtime_env": {"env_vars": env_vars}}


def worker_env() -> dict[str, str]:
    """Environment variables that give a process Ray's worker niceness back."""
    return {RAY_WORKER_NICENESS: RAY_DEFAULT_WORKER_NICENESS}


def worker_runtime_env() -> dict[str, Any] | None:
    """The runtime env of an actor created by this process: Ray's worker niceness when this
    process runs raised (it would inherit ours), else ``None`` (inherit as usual)."""
    if RAY_WORKER_NICENESS not in os.environ:
        return None
    return {"env_vars": worker_env()}


def llm_env(settings: Settings) -> dict[str, str]:
    """Environment variables of a vLLM replica: ``WONDER_LLM_NICENESS`` (default 10). On a CPU
    node the engine's threads decode on every core; at Ray's 15 any other process that wakes
    (the relay of other streams, a starting actor) would stall each decode step."""
    return {RAY_WORKER_NICENESS: str(settings.llm_niceness)}


def at_worker_niceness(actor_options: dict[str, Any]) -> dict[str, Any]:
    """``ray_actor_options`` of a Serve replica other than the gateway: the controller runs
    raised and its replicas inherit its runtime env, so they say Ray's worker niceness."""
    return with_env(actor_options, worker_env())


def with_env(actor_options: dict[str, Any], env: dict[str, str]) -> dict[str, Any]:
    """``actor_options`` with ``env`` added to its runtime env's variables."""
    runtime_env = dict(actor_options.get("runtime_env") or {})
    runtime_env["env_vars"] = {**(runtime_env.get("env_vars") or {}), **env}
    return {**actor_options, "runtime_env": runtime_env}
