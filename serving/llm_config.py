"""Settings → what the LLM deployments ask of Ray Serve and of vLLM (pure: no Ray, no vLLM).

Every model Wonder serves is one ``ModelPlan``: the primary model from the flat ``WONDER_LLM_*``
settings (deployment ``LLMServer``, answering to its name and to ``default``) and one more per
entry of ``WONDER_LLM_MODELS`` (deployment ``LLMServer-<name>``), all in the ``llm`` application.
From a plan come

* the Serve options of its deployment (``deployment_options``): a fixed replica count or an
  autoscaling config, the per-replica stream limit, a graceful shutdown long enough for open
  streams to finish when a replica is scaled away, the request router, and the resources of one
  replica: one logical CPU on CPU, one GPU on CUDA, and for a model split over several GPUs
  (tensor x pipeline parallel) a placement group of one GPU bundle per worker, STRICT_PACK on one
  node (what ``ray.serve.llm`` asks for, with the replica actor in the first bundle);
* vLLM's engine arguments for the parallelism, prefix caching and LoRA (``engine_args``).

Kept apart from ``serving.llm`` so that the whole placement request is unit-tested without a GPU.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from core.domain import DEFAULT_MODEL
from core.errors import InvalidInput
from core.settings import Settings

DEFAULT_MODEL_ALIAS = DEFAULT_MODEL
BUNDLED_MODEL_NAME = "SmolLM2-135M-Instruct"
PRIMARY_DEPLOYMENT_NAME = "LLMServer"
ROUTER_CLASS = "serving.llm_routing.ConversationAffinityRouter"
"""The request router every LLM deployment uses when prefix routing is on (a class path: Serve
imports it in each process that holds a handle)."""
GRACEFUL_SHUTDOWN_WAIT_LOOP_S = 1.0
"""How often a replica being removed checks whether its last stream has finished."""
ACCELERATOR_HINT = 0.001
"""A sliver of the ``accelerator_type:<T>`` resource: pins a bundle to such nodes (Ray's idiom)."""


class LlmConfigError(InvalidInput, ValueError):
    """The LLM settings ask for something that cannot or must not be deployed."""


@dataclass(frozen=True)
class Scaling:
    """A fixed replica count (``max_replicas`` None) or autoscaling between min and max."""

    num_replicas: int = 1
    min_replicas: int | None = None
    max_replicas: int | None = None
    target_ongoing_requests: float = 8.0
    upscale_delay_s: float = 10.0
    downscale_delay_s: float = 120.0

    @property
    def autoscaling(self) -> bool:
        return self.max_replicas is not None


@dataclass(frozen=True)
class ModelPlan:
    """One served model: its names, where its weights are, how it is split and scaled."""

    name: str
    served_names: tuple[str, ...]
    deployment_name: str
    model_dir: str | None  # None: the bundled model, prepared on each replica's node
    scaling: Scaling
    tensor_parallel: int = 1
    pipeline_parallel: int = 1
    max_model_len: int | None = None
    lora_modules: tuple[tuple[str, str], ...] = ()
    max_lora_rank: int = 16
    primary: bool = True

    @property
    def world_size(self) -> int:
        """Devices one copy of the model spans (vLLM's world size)."""
        return self.tensor_parallel * self.pipeline_parallel


def deployment_name_for(model: str) -> str:
    """The deployment serving an extra model called ``model`` (Serve-safe characters only)."""
    return f"{PRIMARY_DEPLOYMENT_NAME}-{re.sub(r'[^A-Za-z0-9._-]', '_', model)}"


def model_plans(settings: Settings) -> list[ModelPlan]:
    """Every model to serve, the primary first; refuses duplicate names and unsafe scaling."""
    plans = [_primary_plan(settings)]
    for extra in settings.llm_models:
        plans.append(
            ModelPlan(
                name=extra.name,
                served_names=(extra.name,),
                deployment_name=deployment_name_for(extra.name),
                model_dir=extra.model_dir,
                scaling=_scaling(
                    settings, extra.num_replicas, extra.min_replicas, extra.max_replicas
                ),
                tensor_parallel=extra.tensor_parallel,
                pipeline_parallel=extra.pipeline_parallel,
                max_model_len=extra.max_model_len,
                lora_modules=tuple(sorted(extra.lora_modules.items())),
                max_lora_rank=extra.max_lora_rank,
                primary=False,
            )
        )
    _check_unique_names(plans)
    for plan in plans:
        _check_plan(plan, settings)
    return plans


def _primary_plan(settings: Settings) -> ModelPlan:
    source = settings.llm_model_dir
    name = settings.llm_model_name or (
        Path(source.rstrip("/")).name if source else BUNDLED_MODEL_NAME
    )
    names = (name,) if name == DEFAULT_MODEL_ALIAS else (name, DEFAULT_MODEL_ALIAS)
    return ModelPlan(
        name=name,
        served_names=names,
        deployment_name=PRIMARY_DEPLOYMENT_NAME,
        model_dir=source,
        scaling=_scaling(
            settings,
            settings.llm_num_replicas,
            settings.llm_min_replicas,
            settings.llm_max_replicas,
        ),
        tensor_parallel=settings.llm_tensor_parallel,
        pipeline_parallel=settings.llm_pipeline_parallel,
        max_model_len=settings.llm_max_model_len,
        lora_modules=tuple(sorted(settings.llm_lora_modules.items())),
        max_lora_rank=settings.llm_max_lora_rank,
    )


def _scaling(
    settings: Settings, num_replicas: int, min_replicas: int | None, max_replicas: int | None
) -> Scaling:
    return Scaling(
        num_replicas=num_replicas,
        min_replicas=min_replicas,
        max_replicas=max_replicas,
        target_ongoing_requests=settings.llm_target_ongoing_requests,
        upscale_delay_s=settings.llm_upscale_delay_s,
        downscale_delay_s=settings.llm_downscale_delay_s,
    )


def _check_unique_names(plans: list[ModelPlan]) -> None:
    seen: dict[str, str] = {}
    for plan in plans:
        for name in (*plan.served_names, *(adapter for adapter, _ in plan.lora_modules)):
            if name in seen:
                raise LlmConfigError(
                    f"model name {name!r} is served twice ({seen[name]} and {plan.name}): "
                    "each model and LoRA adapter needs its own name"
                )
            seen[name] = plan.name


def _check_plan(plan: ModelPlan, settings: Settings) -> None:
    scaling = plan.scaling
    if scaling.max_replicas is None:
        if scaling.min_replicas is not None:
            raise LlmConfigError(
                f"model {plan.name}: a minimum replica count needs a maximum "
                "(WONDER_LLM_MAX_REPLICAS / max_replicas) to autoscale"
            )
        return
    floor = scaling.min_replicas if scaling.min_replicas is not None else 1
    if floor > scaling.max_replicas:
        raise LlmConfigError(
            f"model {plan.name}: min_replicas {floor} is above max_replicas {scaling.max_replicas}"
        )
    if floor == 0 and plan.primary and not settings.llm_allow_scale_to_zero:
        raise LlmConfigError(
            "WONDER_LLM_MIN_REPLICAS=0 would let the default local model scale to zero: the "
            "first message after a quiet spell would wait for a cold replica (30 s to minutes). "
            "Set WONDER_LLM_ALLOW_SCALE_TO_ZERO=true if that is what you want, or a minimum of 1."
        )


# --------------------------------------------------------------------------- what Serve is asked


def autoscaling_config(scaling: Scaling) -> dict[str, Any] | None:
    """Serve's ``autoscaling_config`` for ``scaling`` (None: a fixed replica count)."""
    if scaling.max_replicas is None:
        return None
    floor = scaling.min_replicas if scaling.min_replicas is not None else 1
    return {
        "min_replicas": floor,
        "initial_replicas": max(floor, 1),  # even a scale-to-zero model starts answering
        "max_replicas": scaling.max_replicas,
        "target_ongoing_requests": scaling.target_ongoing_requests,
        "upscale_delay_s": scaling.upscale_delay_s,
        "downscale_delay_s": scaling.downscale_delay_s,
    }


def replica_resources(plan: ModelPlan, device: str, accelerator_type: str | None) -> dict[str, Any]:
    """The resources of one replica: actor options, plus a placement group when the model spans
    several GPUs.

    On CUDA with a world size above 1, vLLM's Ray executor starts one worker per GPU inside the
    replica's placement group; the replica actor itself holds the first bundle's CPU and no GPU.
    STRICT_PACK keeps the whole copy on one node (tensor-parallel all-reduces over NVLink/PCIe,
    never the network).
    """
    if device == "cpu":
        if plan.world_size > 1:
            raise LlmConfigError(
                f"model {plan.name}: tensor/pipeline parallelism ({plan.tensor_parallel}x"
                f"{plan.pipeline_parallel}) needs WONDER_LLM_DEVICE=cuda"
            )
        return {"ray_actor_options": {"num_cpus": 1}}
    hint = {f"accelerator_type:{accelerator_type}": ACCELERATOR_HINT} if accelerator_type else {}
    if plan.world_size == 1:
        options: dict[str, Any] = {"num_cpus": 1, "num_gpus": 1}
        if accelerator_type:
            options["accelerator_type"] = accelerator_type
        return {"ray_actor_options": options}
    bundles = [{"CPU": 1.0, "GPU": 1.0, **hint}]
    bundles += [{"GPU": 1.0, **hint} for _ in range(plan.world_size - 1)]
    return {
        "ray_actor_options": {"num_cpus": 1, "num_gpus": 0},
        "placement_group_bundles": bundles,
        "placement_group_strategy": "STRICT_PACK",
    }


def request_router_config(settings: Settings) -> dict[str, Any] | None:
    """The conversation-affinity router (None: Serve's default power-of-two-choices)."""
    if not settings.llm_prefix_routing:
        return None
    return {
        "request_router_class": ROUTER_CLASS,
        "request_router_kwargs": {"max_ongoing_for_affinity": settings.llm_affinity_max_ongoing},
    }


def deployment_options(plan: ModelPlan, settings: Settings, env: dict[str, str]) -> dict[str, Any]:
    """Everything ``Deployment.options`` gets for ``plan``."""
    resources = replica_resources(plan, settings.llm_device.lower(), settings.llm_accelerator_type)
    resources["ray_actor_options"]["runtime_env"] = {"env_vars": dict(env)}
    options: dict[str, Any] = {
        "name": plan.deployment_name,
        "max_ongoing_requests": settings.llm_max_ongoing_requests,
        # A replica being scaled away stops taking requests, then waits this long for its open
        # streams to finish before it is killed: scale-down never cuts a stream that ends in time.
        "graceful_shutdown_timeout_s": settings.llm_graceful_shutdown_s,
        "graceful_shutdown_wait_loop_s": GRACEFUL_SHUTDOWN_WAIT_LOOP_S,
        **resources,
    }
    scaling = autoscaling_config(plan.scaling)
    if scaling is None:
        options["num_replicas"] = plan.scaling.num_replicas
    else:
        options["autoscaling_config"] = scaling
    router = request_router_config(settings)
    if router is not None:
        options["request_router_config"] = router
    return options


# --------------------------------------------------------------------------- what vLLM is asked


def engine_args(plan: ModelPlan, device: str) -> list[str]:
    """vLLM arguments for parallelism, prefix caching, cached-token usage and LoRA."""
    args = ["--enable-prefix-caching", "--enable-prompt-tokens-details"]
    if plan.tensor_parallel > 1:
        args += ["--tensor-parallel-size", str(plan.tensor_parallel)]
    if plan.pipeline_parallel > 1:
        args += ["--pipeline-parallel-size", str(plan.pipeline_parallel)]
    if plan.world_size > 1 and device == "cuda":
        # Workers go into the replica's placement group (vLLM's Ray executor), not forked.
        args += ["--distributed-executor-backend", "ray"]
    if plan.lora_modules:
        args += ["--enable-lora", "--max-lora-rank", str(plan.max_lora_rank)]
        args += ["--max-loras", str(len(plan.lora_modules))]
        args += ["--lora-modules", *(f"{name}={path}" for name, path in plan.lora_modules)]
    return args


def deployment_for_model(settings: Settings, model: str) -> str:
    """Which deployment answers to ``model`` (a served name or a LoRA adapter); unknown names go
    to the primary deployment, which answers with vLLM's own 404."""
    for plan in model_plans(settings):
        if model in plan.served_names or model in dict(plan.lora_modules):
            return plan.deployment_name
    return PRIMARY_DEPLOYMENT_NAME
