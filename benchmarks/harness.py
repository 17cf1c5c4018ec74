"""What the benchmarks share: a local Ray with the gateway, a store with a scripted agent, and
percentiles. Each benchmark starts its own Ray (own temp dir, free ports) and tears it down."""

from __future__ import annotations

import asyncio
import os
import shutil
import socket
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def ms(seconds: list[float]) -> dict[str, float]:
    """p50/p99/mean in milliseconds of samples in seconds."""
    values = [s * 1000 for s in seconds]
    return {
        "p50": round(pct(values, 0.5), 2),
        "p99": round(pct(values, 0.99), 2),
        "mean": round(statistics.fmean(values), 2),
    }


async def extractions_stored(
    store: Any, conversation_id: str, polling: list[bool] | None = None
) -> float:
    """Seconds until no memory extraction of the conversation is pending in the store
    (extractions wait for a quiet moment, ``WONDER_EXTRACTION_QUIET_S``). ``polling[0]`` is set
    while this reads the store (a caller counting statements leaves these out)."""
    flag = polling if polling is not None else [False]
    t0 = time.perf_counter()
    while True:
        flag[0] = True
        try:
            pending = store.pending_extractions.list(conversation_id)  # on the loop: nothing
            # else of this process runs meanwhile (hook_path.py counts the rest's statements)
        finally:
            flag[0] = False
        if not pending:
            return time.perf_counter() - t0
        await asyncio.sleep(0.01)


def inprocess_cluster() -> Any:
    """The production actors, executor and store in this process, on a fresh data dir, with test
    doubles allowed (``tests.inprocess.InProcessCluster``): the hook path without Ray's noise."""
    from tests.inprocess import InProcessCluster

    env = {
        "WONDER_DATA_DIR": tempfile.mkdtemp(prefix="wonder-bench-"),
        "WONDER_ALLOW_TEST_DOUBLES": "true",
    }
    os.environ.update(env)
    return InProcessCluster(env)


async def timed_turns(actor: Any, n: int) -> list[float]:
    """``n`` turns through a conversation actor one after another: message posted → turn done."""
    samples = []
    for i in range(n):
        t0 = time.perf_counter()
        ack = await actor.post_message(f"m{i}", "bench", message_id=None)
        await actor.wait_for_turn(ack.turn_id)
        samples.append(time.perf_counter() - t0)
    return samples


def reporter(name: str) -> Callable[[str], None]:
    def progress(message: str) -> None:
        print(f"[{name}] {message}", flush=True)

    return progress


@dataclass
class System:
    """A running local Wonder: Ray, Serve with the gateway on ``port``, and the store."""

    env: dict[str, str]
    port: int
    dashboard_url: str
    store: Any


def agent_ports_given() -> None:
    """Name the node agents' ports up front (free ones) instead of letting them report the ports
    they bound: the raylet waits a fixed 15 s for a reported port (not configurable), which the
    agents' imports outlast on a loaded machine (the raylet then aborts the node's start). It
    still waits for the dashboard agent's, so a very loaded machine may need another try. The
    default dashboard agent port (52365) is fixed too: another Ray here holds it."""
    from ray._private import parameter

    original = parameter.RayParams.__init__
    ports = {
        "dashboard_agent_listen_port": free_port(),
        "metrics_agent_port": free_port(),
        "metrics_export_port": free_port(),
        "runtime_env_agent_port": free_port(),
    }

    def with_ports(self: Any, *args: Any, **kwargs: Any) -> None:
        original(self, *args, **kwargs)
        for name, port in ports.items():
            if getattr(self, name) in (None, 0, 52365):
                setattr(self, name, port)

    parameter.RayParams.__init__ = with_ports  # type: ignore[method-assign]


@dataclass
class LocalRay:
    """A running local Ray without the gateway: its ``WONDER_*`` env and, if asked for, the
    dashboard's URL (Ray's state API)."""

    env: dict[str, str]
    dashboard_url: str | None


@contextmanager
def local_ray(
    progress: Callable[[str], None],
    *,
    dashboard: bool = False,
    system_config: dict[str, Any] | None = None,
) -> Iterator[LocalRay]:
    """Start a local Ray (2 CPUs, a fresh data dir, no gateway); stop it and remove both after."""
    import ray

    data_dir = Path(tempfile.mkdtemp(prefix="wonder-bench-"))
    ray_tmp = tempfile.mkdtemp(prefix="wb", dir="/tmp")
    env = {"WONDER_DATA_DIR": str(data_dir), "RAY_AUTH_MODE": "disabled"}
    os.environ.update(env)
    os.environ.pop("RAY_ADDRESS", None)
    progress("starting a local Ray")
    dashboard_port = free_port() if dashboard else None
    ray.init(
        num_cpus=2,
        namespace="wonder",
        _temp_dir=ray_tmp,
        include_dashboard=dashboard,
        **({"dashboard_host": "127.0.0.1", "dashboard_port": dashboard_port} if dashboard else {}),
        runtime_env={"env_vars": env},
        log_to_driver=False,
        _system_config=system_config or None,
    )
    try:
        url = f"http://127.0.0.1:{dashboard_port}" if dashboard_port else None
        yield LocalRay(env, url)
    finally:
        ray.shutdown()
        shutil.rmtree(data_dir, ignore_errors=True)
        shutil.rmtree(ray_tmp, ignore_errors=True)


@contextmanager
def local_system(progress: Callable[[str], None], **settings: str) -> Iterator[System]:
    """Start a local Ray (2 CPUs, dashboard on a free port) and the gateway; stop both after.

    ``settings`` are extra ``WONDER_*`` variables (e.g. ``WONDER_MAX_RESIDENT_CONVERSATIONS``).
    """
    import ray
    from ray import serve

    data_dir = Path(tempfile.mkdtemp(prefix="wonder-bench-"))
    ray_tmp = tempfile.mkdtemp(prefix="wb", dir="/tmp")
    env = {
        "WONDER_DATA_DIR": str(data_dir),
        "WONDER_MAX_RESIDENT_CONVERSATIONS": "64",
        "WONDER_ALLOW_TEST_DOUBLES": "true",  # the scripted echo model is a test double
        "RAY_AUTH_MODE": "disabled",
        # Serve kills a proxy not ready in 5 s or failing a 10 s health check: on a loaded
        # machine that is the proxy starting, not a broken one.
        "RAY_SERVE_PROXY_READY_CHECK_TIMEOUT_S": "120",
        "RAY_SERVE_PROXY_HEALTH_CHECK_TIMEOUT_S": "60",
        # Bursts measure the platform, not the default quotas (docs/security.md).
        "WONDER_QUOTA_DEFAULT_CONCURRENT_TURNS": "0",
        "WONDER_QUOTA_DEFAULT_CONCURRENT_WEBSOCKETS": "0",
        "WONDER_QUOTA_DEFAULT_CONCURRENT_RUNS": "0",
        **settings,
    }
    os.environ.update(env)
    os.environ.pop("RAY_ADDRESS", None)
    progress("starting a local Ray and the gateway")
    dashboard_port = free_port()
    agent_ports_given()
    ray.init(
        num_cpus=2,
        namespace="wonder",
        _temp_dir=ray_tmp,
        include_dashboard=True,
        dashboard_host="127.0.0.1",
        dashboard_port=dashboard_port,
        runtime_env={"env_vars": env},
        log_to_driver=False,
    )
    port = free_port()
    try:
        from cluster.gateway import build_gateway_app
        from cluster.niceness import serve_controller_options
        from core.settings import settings_from_env
        from core.store import open_store

        serve.start(
            http_options={"host": "127.0.0.1", "port": port},
            controller_options=serve_controller_options(settings_from_env(env)),
        )

        serve.run(build_gateway_app(env), name="gateway", route_prefix="/")
        yield System(env, port, f"http://127.0.0.1:{dashboard_port}", open_store(env))
    finally:
        serve.shutdown()
        ray.shutdown()
        shutil.rmtree(data_dir, ignore_errors=True)
        shutil.rmtree(ray_tmp, ignore_errors=True)


def setup_store(store: Any) -> dict[str, Any]:
    """A client (with an API key), a zero-latency scripted echo profile, and agents whose
    personas have both hooks (``hooks``: context assembly and memory extraction tasks), none
    (``nohooks``), or one (``context``, ``extraction``)."""
    from core.domain import Agent, Client, ModelProfile, Persona, PersonaRef, TaskAction, TaskDef
    from core.ids import new_id, utc_now

    client = Client(id=new_id("client"), name="bench", created_at=utc_now())
    store.clients.insert(client)
    key = f"wk_{new_id()}"
    store.clients.add_api_key(client.id, key, utc_now())
    store.model_profiles.put(
        ModelProfile(id="bench-echo", provider="scripted", model="echo"), utc_now()
    )
    store.tasks.put(
        TaskDef(
            id="bench-context", actions=[TaskAction(kind="context.get", params={"key": "notes"})]
        ),
        utc_now(),
    )
    store.tasks.put(
        TaskDef(
            id="bench-extract",
            actions=[
                TaskAction(kind="context.set", params={"key": "last_turn", "value": "{{turn_id}}"})
            ],
        ),
        utc_now(),
    )
    agents = {}
    for name, context, extraction in (
        ("hooks", "bench-context", "bench-extract"),
        ("nohooks", None, None),
        ("context", "bench-context", None),
        ("extraction", None, "bench-extract"),
    ):
        persona = store.personas.put(
            Persona(
                id=f"bench-{name}",
                system_prompt="You echo.",
                model_profile_id="bench-echo",
                context_assembly_task_id=context,
                memory_extraction_task_id=extraction,
            ),
            utc_now(),
        )
        agent = Agent(
            id=new_id("agent"),
            client_id=client.id,
            name=name,
            persona_ref=PersonaRef(id=persona.id),
            created_at=utc_now(),
        )
        agents[name] = store.agents.insert(agent)
    return {"client_id": client.id, "key": key, "agents": agents}


def conversations(env: dict[str, str]) -> Any:
    """This process's ``Conversations`` adapter (what the gateway uses)."""
    from cluster import wiring

    return wiring.conversations(env)


def rss_mib(pid: int) -> float:
    """Resident set size of a process on this machine, from /proc (MiB)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0
