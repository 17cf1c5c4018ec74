"""Placement decisions (cluster/placement.py): pure functions of the settings and the nodes."""

from __future__ import annotations

import pytest

from cluster import placement
from cluster.placement import NodeView
from core.settings import Settings

OFF_ACCELERATORS = {"wonder.io/node-group": "!accelerator"}


def settings(**values: object) -> Settings:
    return Settings(**values)  # type: ignore[arg-type]


def test_actors_and_tasks_stay_off_accelerator_nodes_unless_told() -> None:
    default = settings()
    assert placement.conversation_options(default) == {"label_selector": OFF_ACCELERATORS}
    assert placement.coordinator_options(default) == {"label_selector": OFF_ACCELERATORS}
    assert placement.executor_options(default) == {"label_selector": OFF_ACCELERATORS}
    allowed = settings(actors_on_accelerator_nodes=True)
    assert "label_selector" not in placement.conversation_options(allowed)
    assert placement.executor_options(allowed) == {}


def test_singletons_go_to_the_head() -> None:
    assert placement.singleton_options() == {"resources": {"node:__internal_head__": 0.001}}


@pytest.mark.parametrize(
    ("values", "expected"),
    [
        ({}, {}),  # cpu device, auto: anywhere (one machine has no accelerator node)
        ({"llm_device": "cuda"}, {"resources": {"wonder_accelerator": 1}}),
        ({"llm_placement": "accelerator"}, {"resources": {"wonder_accelerator": 1}}),
        ({"llm_device": "cuda", "llm_placement": "any"}, {}),
        (
            {"llm_placement": "accelerator", "accelerator_resource": "gpu_pool"},
            {"resources": {"gpu_pool": 1}},
        ),
    ],
)
def test_llm_replicas_need_an_accelerator_unit(values: dict[str, object], expected: dict) -> None:  # type: ignore[type-arg]
    assert placement.llm_actor_options(settings(**values)) == expected


def test_embedder_goes_where_the_settings_say() -> None:
    assert placement.embedder_actor_options(settings()) == {"label_selector": OFF_ACCELERATORS}
    assert placement.embedder_actor_options(settings(embedder_placement="accelerator")) == {
        "label_selector": {"wonder.io/node-group": "accelerator"}
    }
    assert placement.embedder_actor_options(settings(embedder_placement="any")) == {}


def test_merged_keeps_both_resources() -> None:
    base = {"num_cpus": 1, "resources": {"a": 1}}
    assert placement.merged(base, {"resources": {"b": 2}}) == {
        "num_cpus": 1,
        "resources": {"a": 1, "b": 2},
    }


HEAD = NodeView("head" * 4, {"CPU": 2, "node:__internal_head__": 1}, {})
CPU = NodeView("cpu0" * 4, {"CPU": 2}, {"wonder.io/node-group": "cpu"})
GPU = NodeView(
    "gpu0" * 4, {"CPU": 2, "wonder_accelerator": 1}, {"wonder.io/node-group": "accelerator"}
)
UNLABELLED_GPU = NodeView("gpu1" * 4, {"CPU": 2, "wonder_accelerator": 1}, {})


CPU_1 = NodeView("cpu1" * 4, {"CPU": 2}, {"wonder.io/node-group": "cpu"})


def test_a_conversation_actor_is_pinned_to_its_node_with_a_fallback() -> None:
    options = placement.conversation_options(settings(), "n1")
    assert options == {
        "label_selector": {**OFF_ACCELERATORS, "ray.io/node-id": "n1"},
        # Its node lost, Ray restarts it on any node off the accelerators.
        "fallback_strategy": [{"label_selector": OFF_ACCELERATORS}],
    }
    anywhere = placement.conversation_options(settings(actors_on_accelerator_nodes=True), "n1")
    assert anywhere == {
        "label_selector": {"ray.io/node-id": "n1"},
        "fallback_strategy": [{"label_selector": {"ray.io/node-id": "!none"}}],
    }


def test_conversations_go_to_workers_while_there_are_any() -> None:
    assert placement.conversation_nodes(settings(), [HEAD, CPU_1, GPU, CPU]) == [
        CPU.node_id,
        CPU_1.node_id,
    ]
    assert placement.conversation_nodes(settings(), [HEAD, GPU]) == [HEAD.node_id]
    on_gpus = settings(actors_on_accelerator_nodes=True)
    assert placement.conversation_nodes(on_gpus, [HEAD, GPU]) == [GPU.node_id]
    assert placement.conversation_nodes(settings(), [GPU]) == []


def test_the_least_held_node_takes_the_next_actor() -> None:
    assert placement.least_held(["a", "b", "c"], ["a", "b", "a"]) == "c"
    assert placement.least_held(["a", "b"], ["a", "gone", "gone"]) == "b"
    assert placement.least_held(["a", "b"], []) == "a"  # the lowest id among equals
    assert placement.least_held([], ["a"]) is None


def test_a_well_formed_cluster_has_no_problems() -> None:
    assert placement.check_nodes(settings(llm_placement="accelerator"), [HEAD, CPU, GPU]) == []
    assert placement.check_nodes(settings(), [HEAD]) == []


def test_missing_accelerator_names_the_settings() -> None:
    [problem] = placement.check_nodes(settings(llm_device="cuda", llm_num_replicas=2), [HEAD, GPU])
    assert "WONDER_ACCELERATOR_RESOURCE" in problem and "WONDER_LLM_NUM_REPLICAS=2" in problem
    assert "offer 1" in problem


def test_an_unlabelled_accelerator_node_is_refused() -> None:
    [problem] = placement.check_nodes(settings(), [HEAD, UNLABELLED_GPU])
    assert "wonder.io/node-group=accelerator" in problem


def test_only_accelerator_nodes_leave_actors_nowhere() -> None:
    [problem] = placement.check_nodes(settings(), [GPU])
    assert "WONDER_ACTORS_ON_ACCELERATOR_NODES" in problem
    assert placement.check_nodes(settings(actors_on_accelerator_nodes=True), [GPU]) == []


def test_every_llm_deployment_is_placed_and_a_split_model_in_its_first_bundle() -> None:
    """``wonder up``'s LLM app (``placed_llm_app``): each model's deployment asks for an
    accelerator unit; for a model over several GPUs the replica actor's bundle carries it too."""
    from core.settings import LlmModelSettings
    from serving.llm import build_llm_app

    gpu = settings(
        llm_device="cuda",
        llm_tensor_parallel=2,
        llm_models=[LlmModelSettings(name="small", model_dir="/models/small")],
    )
    placed: dict[str, dict[str, object]] = {}

    def place(options: dict[str, object]) -> dict[str, object]:
        placed[str(options["name"])] = placement.llm_deployment_options(options, gpu)
        return placed[str(options["name"])]

    build_llm_app(gpu, placement=place)
    primary, small = placed["LLMServer"], placed["LLMServer-small"]
    unit = {"wonder_accelerator": 1}
    assert primary["ray_actor_options"]["resources"] == unit  # type: ignore[index]
    assert primary["placement_group_bundles"] == [
        {"CPU": 1.0, "GPU": 1.0, "wonder_accelerator": 1.0},
        {"GPU": 1.0},
    ]
    assert small["ray_actor_options"]["resources"] == unit  # type: ignore[index]
    assert small["ray_actor_options"]["num_gpus"] == 1  # type: ignore[index]
    assert "placement_group_bundles" not in small
    # On one CPU machine nothing asks for the unit: the options pass unchanged.
    cpu = settings()
    options = {"name": "LLMServer", "ray_actor_options": {"num_cpus": 1}}
    assert placement.llm_deployment_options(options, cpu) == options
