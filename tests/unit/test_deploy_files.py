"""The deployment files match the code: Ray's cluster-launcher schema, the settings, the placement
rules and the Serve builders (so ray-cluster.yaml and deploy/rayservice.yaml cannot drift)."""

from __future__ import annotations

import importlib
import json
import re
from pathlib import Path
from typing import Any

import jsonschema
import ray
import yaml
from ray.serve.schema import ServeDeploySchema

from cluster import bootstrap, placement
from cluster.niceness import serve_controller_options
from core.settings import Settings

ROOT = Path(__file__).resolve().parents[2]
LAUNCHER = ROOT / "ray-cluster.yaml"
RAYSERVICE = ROOT / "deploy" / "rayservice.yaml"
WONDER_NAME = re.compile(r"\bWONDER_[A-Z0-9_]+")


def launcher() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load(LAUNCHER.read_text())
    return loaded


def rayservice() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load(RAYSERVICE.read_text())
    return loaded


def test_ray_cluster_yaml_is_valid_for_the_cluster_launcher() -> None:
    schema = json.loads((Path(ray.__file__).parent / "autoscaler" / "ray-schema.json").read_text())
    jsonschema.validate(launcher(), schema)


def test_every_wonder_variable_in_the_files_is_a_setting() -> None:
    known = {f"WONDER_{name.upper()}" for name in Settings.model_fields}
    for path in (LAUNCHER, RAYSERVICE):
        named = set(WONDER_NAME.findall(path.read_text()))
        assert named, path
        assert named <= known, f"{path.name}: not settings: {sorted(named - known)}"


def _env_lines(config: dict[str, Any]) -> dict[str, str]:
    text = "\n".join(str(c) for c in config["setup_commands"])
    return dict(re.findall(r"'(WONDER_[A-Z0-9_]+)=([^'\s]*)'", text))


def test_launcher_node_groups_follow_the_placement_rules() -> None:
    config = launcher()
    env = _env_lines(config)
    settings = Settings(**{k.removeprefix("WONDER_").lower(): v for k, v in env.items()})
    assert settings.database_url and settings.database_url.startswith("postgresql")
    assert settings.lance_uri and settings.lance_uri.startswith("s3://")
    assert settings.object_uri and settings.object_uri.startswith("s3://")
    types = config["available_node_types"]
    head = types[config["head_node_type"]]
    gpu = [t for t in types.values() if t["resources"].get("GPU")]
    cpu = [t for t in types.values() if t is not head and not t["resources"].get("GPU")]
    assert gpu and cpu
    for node_type in gpu:
        assert node_type["resources"][settings.accelerator_resource] >= 1
        assert node_type["labels"] == placement.accelerator_node_labels()
    for node_type in [head, *cpu]:
        assert settings.accelerator_resource not in node_type["resources"]
        assert node_type["labels"][placement.NODE_GROUP_LABEL] != placement.ACCELERATOR_GROUP
    units = sum(t["max_workers"] * t["resources"][settings.accelerator_resource] for t in gpu)
    assert placement.llm_on_accelerators(settings) and units >= settings.llm_num_replicas
    assert "RAY_AUTH_MODE=token" in LAUNCHER.read_text()


def test_rayservice_groups_settings_and_serve_apps() -> None:
    manifest = rayservice()
    assert manifest["kind"] == "RayService"
    cluster = manifest["spec"]["rayClusterConfig"]
    env = {
        e["name"]: e["value"]
        for e in cluster["headGroupSpec"]["template"]["spec"]["containers"][0]["env"]
    }
    assert env["RAY_AUTH_MODE"] == "token"
    settings = Settings(
        **{k.removeprefix("WONDER_").lower(): v for k, v in env.items() if k.startswith("WONDER_")}
    )
    groups = {g["groupName"]: g for g in cluster["workerGroupSpecs"]}
    label = f"{placement.NODE_GROUP_LABEL}={placement.ACCELERATOR_GROUP}"
    gpu_params = groups["gpu"]["rayStartParams"]
    assert gpu_params["labels"] == label
    assert json.loads(json.loads(gpu_params["resources"])) == {settings.accelerator_resource: 1}
    assert groups["cpu"]["rayStartParams"]["labels"] == f"{placement.NODE_GROUP_LABEL}=cpu"
    for group in groups.values():
        container = group["template"]["spec"]["containers"][0]
        assert (
            container["env"] == cluster["headGroupSpec"]["template"]["spec"]["containers"][0]["env"]
        )
        assert container["envFrom"] == [{"secretRef": {"name": "wonder-settings"}}]
    serve_config = yaml.safe_load(manifest["spec"]["serveConfigV2"])
    ServeDeploySchema.model_validate(serve_config)  # Serve's own schema accepts it
    assert serve_config["controller_options"] == serve_controller_options(settings)
    for app in serve_config["applications"]:
        module, _, name = app["import_path"].partition(":")
        assert callable(getattr(importlib.import_module(module), name)), app["import_path"]


def test_grafana_dashboard_reads_metrics_the_code_exports() -> None:
    dashboard = json.loads((ROOT / "deploy" / "grafana-dashboard.json").read_text())
    exprs = [t["expr"] for panel in dashboard["panels"] for t in panel["targets"]]
    used = {
        re.sub(r"_(total|bucket|sum|count)$", "", name)
        for expr in exprs
        for name in re.findall(r"ray_(wonder_[a-z_]+)", expr)
    }
    declared = set(re.findall(r'"(wonder_[a-z_]+)"', (ROOT / "cluster" / "metrics.py").read_text()))
    assert used and used <= declared, sorted(used - declared)
    assert declared <= used, f"not on the dashboard: {sorted(declared - used)}"


def test_both_files_detect_a_lost_node_as_wonder_up_does() -> None:
    """The health-check settings of ``wonder up`` (``bootstrap.NODE_HEALTH_CHECK_ENV``) in the
    launcher's head start command and in every KubeRay container, and GCS fault tolerance."""
    head_command = " ".join(launcher()["head_start_ray_commands"])
    for name, value in bootstrap.NODE_HEALTH_CHECK_ENV.items():
        assert f"{name}={value}" in head_command, name
    assert "RAY_REDIS_ADDRESS=" in head_command
    assert "RAY_gcs_rpc_server_reconnect_timeout_s=" in " ".join(
        launcher()["worker_start_ray_commands"]
    )
    cluster = rayservice()["spec"]["rayClusterConfig"]
    env = {
        e["name"]: e["value"]
        for e in cluster["headGroupSpec"]["template"]["spec"]["containers"][0]["env"]
    }
    assert {k: env[k] for k in bootstrap.NODE_HEALTH_CHECK_ENV} == bootstrap.NODE_HEALTH_CHECK_ENV
    assert cluster["gcsFaultToleranceOptions"]["redisAddress"]
    assert (
        bootstrap.ray_process_env() | bootstrap.NODE_HEALTH_CHECK_ENV == bootstrap.ray_process_env()
    )


def test_serve_proxies_and_gateway_replicas_as_the_settings_say() -> None:
    manifest = rayservice()
    serve_config = yaml.safe_load(manifest["spec"]["serveConfigV2"])
    env = {
        e["name"]: e["value"]
        for e in manifest["spec"]["rayClusterConfig"]["headGroupSpec"]["template"]["spec"][
            "containers"
        ][0]["env"]
    }
    assert serve_config["proxy_location"] == env["WONDER_SERVE_PROXY_LOCATION"] == "EveryNode"
    launcher_env = _env_lines(launcher())
    assert launcher_env["WONDER_SERVE_PROXY_LOCATION"] == "EveryNode"
    for settings_env in (env, launcher_env):
        assert int(settings_env["WONDER_GATEWAY_NUM_REPLICAS"]) >= 2  # a lost node keeps one


def test_alerts_and_panels_name_counters_the_cluster_exports() -> None:
    source = (ROOT / "cluster" / "metrics.py").read_text()
    exported = set(re.findall(r'(?:Counter|Gauge|Histogram)\(\s*"(wonder_[a-z_]+)"', source))
    alerts = yaml.safe_load((ROOT / "deploy" / "alerts.yaml").read_text())
    rules = [rule for group in alerts["groups"] for rule in group["rules"]]
    assert rules and all({"alert", "expr", "labels", "annotations"} <= set(r) for r in rules)
    dashboard = (ROOT / "deploy" / "grafana-dashboard.json").read_text()
    exprs = [r["expr"] for r in rules] + [dashboard]
    named = {m for e in exprs for m in re.findall(r"ray_(wonder_[a-z_]+?)(?:_total|_bucket)?\b", e)}
    assert named and named <= exported, sorted(named - exported)
