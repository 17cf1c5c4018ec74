"""What the LLM deployments ask of Ray Serve and vLLM, from settings alone (no Ray, no GPU):
autoscaling and its refusal to scale the default model to zero, graceful drain, the placement
group for tensor/pipeline parallelism, the affinity router, several models and LoRA."""

from __future__ import annotations

from typing import Any

import pytest

from core.settings import LlmModelSettings, Settings, settings_from_env
from serving.llm import engine_spec_for, replica_options
from serving.llm_config import (
    PRIMARY_DEPLOYMENT_NAME,
    ROUTER_CLASS,
    LlmConfigError,
    deployment_for_model,
    deployment_options,
    engine_args,
    model_plans,
)


def options_for(settings: Settings, index: int = 0) -> dict[str, Any]:
    plan = model_plans(settings)[index]
    return deployment_options(plan, settings, {"X": "1"})


def test_default_is_one_cpu_replica_with_a_drain_and_the_affinity_router() -> None:
    options = options_for(Settings())
    assert options["name"] == PRIMARY_DEPLOYMENT_NAME
    assert options["num_replicas"] == 1 and "autoscaling_config" not in options
    assert options["ray_actor_options"] == {"num_cpus": 1, "runtime_env": {"env_vars": {"X": "1"}}}
    assert "placement_group_bundles" not in options
    assert options["max_ongoing_requests"] == 64
    assert options["graceful_shutdown_timeout_s"] == 300.0
    assert options["request_router_config"] == {
        "request_router_class": ROUTER_CLASS,
        "request_router_kwargs": {"max_ongoing_for_affinity": 32},
    }
    assert "request_router_config" not in options_for(Settings(llm_prefix_routing=False))


def test_autoscaling_between_min_and_max() -> None:
    settings = Settings(
        llm_min_replicas=1,
        llm_max_replicas=4,
        llm_target_ongoing_requests=12,
        llm_upscale_delay_s=5,
        llm_downscale_delay_s=60,
        llm_graceful_shutdown_s=900,
    )
    options = options_for(settings)
    assert "num_replicas" not in options
    assert options["autoscaling_config"] == {
        "min_replicas": 1,
        "initial_replicas": 1,
        "max_replicas": 4,
        "target_ongoing_requests": 12.0,
        "upscale_delay_s": 5.0,
        "downscale_delay_s": 60.0,
    }
    assert options["graceful_shutdown_timeout_s"] == 900.0
    # A maximum alone autoscales from one replica.
    assert options_for(Settings(llm_max_replicas=3))["autoscaling_config"]["min_replicas"] == 1


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        (Settings(llm_min_replicas=0, llm_max_replicas=2), "ALLOW_SCALE_TO_ZERO"),
        (Settings(llm_min_replicas=3, llm_max_replicas=2), "above max_replicas"),
        (Settings(llm_min_replicas=2), "needs a maximum"),
    ],
)
def test_unsafe_or_impossible_scaling_is_refused(settings: Settings, message: str) -> None:
    with pytest.raises(LlmConfigError, match=message):
        model_plans(settings)


def test_scale_to_zero_when_the_operator_asks_for_it() -> None:
    settings = Settings(llm_min_replicas=0, llm_max_replicas=2, llm_allow_scale_to_zero=True)
    scaling = options_for(settings)["autoscaling_config"]
    assert (scaling["min_replicas"], scaling["initial_replicas"]) == (0, 1)
    extra = LlmModelSettings(name="big", model_dir="/m/big", min_replicas=0, max_replicas=1)
    assert options_for(Settings(llm_models=[extra]), 1)["autoscaling_config"]["min_replicas"] == 0


def test_one_gpu_per_replica_without_parallelism() -> None:
    options = options_for(Settings(llm_device="cuda", llm_accelerator_type="A10G"))
    actor = options["ray_actor_options"]
    assert (actor["num_cpus"], actor["num_gpus"], actor["accelerator_type"]) == (1, 1, "A10G")
    assert "placement_group_bundles" not in options


def test_tensor_parallel_two_asks_for_two_gpu_bundles_on_one_node() -> None:
    settings = Settings(llm_device="cuda", llm_tensor_parallel=2, llm_accelerator_type="H100")
    options = options_for(settings)
    assert options["placement_group_strategy"] == "STRICT_PACK"
    assert options["placement_group_bundles"] == [
        {"CPU": 1.0, "GPU": 1.0, "accelerator_type:H100": 0.001},
        {"GPU": 1.0, "accelerator_type:H100": 0.001},
    ]
    # The replica actor sits in the first bundle and leaves the GPUs to vLLM's workers.
    assert options["ray_actor_options"]["num_cpus"] == 1
    assert options["ray_actor_options"]["num_gpus"] == 0
    args = engine_args(model_plans(settings)[0], "cuda")
    assert args[args.index("--tensor-parallel-size") + 1] == "2"
    assert args[args.index("--distributed-executor-backend") + 1] == "ray"
    assert "--pipeline-parallel-size" not in args


def test_tensor_and_pipeline_parallel_multiply() -> None:
    settings = Settings(llm_device="cuda", llm_tensor_parallel=4, llm_pipeline_parallel=2)
    options = options_for(settings)
    bundles = options["placement_group_bundles"]
    assert len(bundles) == 8 and sum(b["GPU"] for b in bundles) == 8
    assert bundles[0] == {"CPU": 1.0, "GPU": 1.0}  # no accelerator type: no hint
    args = engine_args(model_plans(settings)[0], "cuda")
    assert args[args.index("--pipeline-parallel-size") + 1] == "2"


def test_parallelism_on_cpu_is_refused() -> None:
    with pytest.raises(LlmConfigError, match="needs WONDER_LLM_DEVICE=cuda"):
        options_for(Settings(llm_tensor_parallel=2))


def test_engine_args_always_cache_prefixes_and_report_cached_tokens() -> None:
    args = engine_args(model_plans(Settings())[0], "cpu")
    assert args == ["--enable-prefix-caching", "--enable-prompt-tokens-details"]
    spec = engine_spec_for(model_plans(Settings())[0], Settings(), None)
    assert "--enable-prefix-caching" in spec.extra_args


def test_lora_adapters_become_engine_args_and_served_names() -> None:
    settings = Settings(
        llm_lora_modules={"sql": "/adapters/sql", "pirate": "/adapters/pirate"},
        llm_max_lora_rank=32,
    )
    args = engine_args(model_plans(settings)[0], "cpu")
    assert args[args.index("--max-lora-rank") + 1] == "32"
    assert args[args.index("--max-loras") + 1] == "2"
    modules = args[args.index("--lora-modules") + 1 :]
    assert modules == ["pirate=/adapters/pirate", "sql=/adapters/sql"]
    assert deployment_for_model(settings, "sql") == PRIMARY_DEPLOYMENT_NAME


def test_several_models_each_get_a_deployment() -> None:
    coder = LlmModelSettings(
        name="coder",
        model_dir="s3://models/coder",
        max_replicas=3,
        tensor_parallel=2,
        lora_modules={"coder-sql": "/adapters/sql"},
    )
    settings = Settings(llm_device="cuda", llm_models=[coder])
    primary, extra = model_plans(settings)
    assert primary.deployment_name == "LLMServer" and primary.served_names[-1] == "default"
    assert (extra.deployment_name, extra.served_names) == ("LLMServer-coder", ("coder",))
    options = options_for(settings, 1)
    assert options["name"] == "LLMServer-coder"
    assert options["autoscaling_config"]["max_replicas"] == 3
    assert len(options["placement_group_bundles"]) == 2
    assert deployment_for_model(settings, "coder") == "LLMServer-coder"
    assert deployment_for_model(settings, "coder-sql") == "LLMServer-coder"
    assert deployment_for_model(settings, "default") == "LLMServer"
    assert deployment_for_model(settings, "unknown") == "LLMServer"
    spec = engine_spec_for(extra, settings)
    # The replica prepares the extra model (not the primary one) on its own node.
    assert (
        spec.model_dir is None and spec.settings_env["WONDER_LLM_MODEL_DIR"] == "s3://models/coder"
    )
    assert spec.deployment_name == "LLMServer-coder"
    assert "--enable-lora" in spec.extra_args


def test_a_name_served_twice_is_refused() -> None:
    twin = LlmModelSettings(name="default", model_dir="/m/x")
    with pytest.raises(LlmConfigError, match="served twice"):
        model_plans(Settings(llm_models=[twin]))


def test_models_and_adapters_travel_through_the_environment() -> None:
    extra = LlmModelSettings(name="coder", model_dir="/m/c", lora_modules={"a": "/a"})
    settings = Settings(llm_models=[extra], llm_lora_modules={"p": "/p"})
    again = settings_from_env(settings.env())
    assert again.llm_models == [extra] and again.llm_lora_modules == {"p": "/p"}


def test_replica_options_keep_their_old_shape() -> None:
    settings = Settings(llm_num_replicas=2)
    spec = engine_spec_for(model_plans(settings)[0], settings)
    options = replica_options(spec, settings)
    assert options["num_replicas"] == 2
    assert options["ray_actor_options"]["runtime_env"]["env_vars"] == spec.env
