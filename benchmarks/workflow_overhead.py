"""WorkflowCoordinator overhead against plain Ray, measured in the same run.

Starts its own local Ray (own temp dir, no dashboard) and a store in a temp dir. Every task is the
library's no-op step (``library.workflows.steps:noop``) run by the executor, so what differs
between the two sides is the coordinator. Figures:

- ``chain``: a linear chain of N task nodes vs the same N ``execute_task`` calls awaited one after
  another from the driver. ``node_overhead_ms`` = (run time inside the coordinator - plain time)/N;
  ``node_overhead_e2e_ms`` uses the caller's time (start call → result), including the
  coordinator's creation.
- ``fanout``: a 100-way fan-out (foreach) + fan-in (join all) vs the same 100 ``execute_task``
  calls launched together and awaited with ``asyncio.gather``. ``fanout_ratio_vs_plain_ray`` =
  end-to-end run time / plain time (medians over the repetitions, interleaved);
  ``fanout_ratio_in_coordinator`` uses the coordinator's own started→finished time.
- ``planning_and_store_per_node_ms``: the coordinator's own work per chain node measured in this
  process without Ray (plan + apply + one store transaction), the part Wonder adds on top of
  Ray's task round trip.
- Between measurements the run waits for the coordinator reserve to refill (``_quiesce``).
- ``fanout_ratio_vs_plain_ray_from_actor``: the same against the 100 calls launched from a warm
  plain async actor (the coordinator's vantage point: a driver awaiting 100 refs was slower here).
- ``coordinator_start_ms``: ``start_workflow_run`` until the start tokens are dispatched, beside
  ``bare_actor_start_ms``: creating a trivial named detached actor and calling it once (the floor
  any actor-per-run design pays).

Ray kills idle workers above ``num_cpus`` after a second, so a burst of ``num_cpus=0`` executor
tasks spawns processes anew each time and that dominates both sides; ``--keep-workers-s`` (default
60) keeps idle workers that long so repetitions compare dispatch, not process start (0: Ray's
default).

Prints progress, then ONE JSON object as the last line.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.harness import local_ray

NOOP = "library.workflows.steps:noop"


def progress(message: str) -> None:
    print(f"[workflow_overhead] {message}", flush=True)


def _median(values: list[float]) -> float:
    return statistics.median(values)


def _setup(store: Any, chain_length: int) -> dict[str, str]:
    from core.domain import TaskAction, TaskDef
    from core.ids import utc_now
    from core.workflows import WorkflowDef

    task = store.tasks.put(
        TaskDef(id="bench-noop", actions=[TaskAction(kind="python", params={"callable": NOOP})]),
        utc_now(),
    )
    nodes = [{"id": f"n{i}", "kind": "task", "target_id": task.id} for i in range(chain_length)]
    edges = [{"from": f"n{i}", "to": f"n{i + 1}"} for i in range(chain_length - 1)]
    chain = WorkflowDef.model_validate({"id": "bench-chain", "nodes": nodes, "edges": edges})
    fanout = WorkflowDef.model_validate(
        {
            "id": "bench-fanout",
            "nodes": [
                {"id": "fan", "kind": "pass"},
                {"id": "work", "kind": "task", "target_id": task.id},
                {
                    "id": "join",
                    "kind": "pass",
                    "join": {"mode": "all"},
                    "input_mapping": {"n": "branches"},
                },
            ],
            "edges": [
                {"from": "fan", "to": "work", "foreach": "input.items"},
                {"from": "work", "to": "join"},
            ],
            "output_mapping": {"joined": "nodes.join.n"},
        }
    )
    store.workflows.put(chain, utc_now())
    store.workflows.put(fanout, utc_now())
    return {"task_json": task.model_dump_json()}


def _in_process_chain(store: Any, n: int) -> float:
    """Seconds per node of planning + applying + persisting a chain of ``n`` task nodes."""
    from actors.workflow_coordinator.domain import (
        CreateToken,
        DispatchTask,
        NodeSucceeded,
        RunStarted,
        RunState,
        WorkflowEvent,
    )
    from actors.workflow_coordinator.planning import apply, plan
    from actors.workflow_coordinator.records import node_record
    from core.ids import new_id, utc_now
    from core.workflows import WorkflowRun

    definition = store.workflows.get("bench-chain")
    runs = store.workflow_runs
    run_id = new_id("run")
    runs.insert(
        WorkflowRun(
            id=run_id,
            workflow_id=definition.id,
            workflow_version=definition.version,
            created_at=utc_now(),
        )
    )
    state = RunState.new(run_id, definition, {})
    event: WorkflowEvent = RunStarted(utc_now())
    t0 = time.perf_counter()
    for _ in range(n):
        decisions = plan(state, event)
        for decision in decisions:
            apply(state, decision)
        created = {d.token.id for d in decisions if isinstance(d, CreateToken)}
        touched = {getattr(d, "token_id", None) for d in decisions} - created - {None}
        runs.record(
            None,
            [node_record(run_id, state.tokens[t], "task", None) for t in created],
            [node_record(run_id, state.tokens[str(t)], "task", None) for t in touched],
        )
        dispatched = [d for d in decisions if isinstance(d, DispatchTask)]
        event = NodeSucceeded(dispatched[0].token_id, {}, utc_now())
    return (time.perf_counter() - t0) / n


async def _plain_chain(task_json: str, n: int) -> float:
    from cluster.executor import execute_task
    from cluster.executor_wiring import executor_services
    from core.ports import TaskContext

    ctx = TaskContext(settings_env=_env())
    t0 = time.perf_counter()
    for _ in range(n):
        result = await execute_task.remote(task_json, {}, ctx, executor_services)
        assert result.success, result
    return time.perf_counter() - t0


async def _plain_fanout(task_json: str, n: int) -> float:
    from cluster.executor import execute_task
    from cluster.executor_wiring import executor_services
    from core.ports import TaskContext

    ctx = TaskContext(settings_env=_env())
    t0 = time.perf_counter()
    refs = [execute_task.remote(task_json, {"item": i}, ctx, executor_services) for i in range(n)]
    results = await asyncio.gather(*refs)
    assert all(r.success for r in results)
    return time.perf_counter() - t0


async def _workflow(workflow_id: str, run_input: dict[str, Any]) -> dict[str, float]:
    from cluster import wiring
    from core.workflows import RunStatus

    runs = wiring.workflows(_env())
    t0 = time.perf_counter()
    run_id = await runs.start(workflow_id, run_input)
    t_started = time.perf_counter()
    run = await runs.wait(run_id, 600)
    t1 = time.perf_counter()
    assert run.status is RunStatus.COMPLETED, run.error
    assert run.started_at is not None and run.finished_at is not None
    return {
        "e2e": t1 - t0,
        "start": t_started - t0,
        "inside": (run.finished_at - run.started_at).total_seconds(),
    }


class _Launcher:
    """Plain Ray from inside an async actor: the coordinator's vantage point, without it."""

    async def fanout(self, task_json: str, n: int, settings_env: dict[str, str]) -> float:
        from cluster.executor import execute_task
        from cluster.executor_wiring import executor_services
        from core.ports import TaskContext

        ctx = TaskContext(settings_env=settings_env)
        t0 = time.perf_counter()
        refs = [
            execute_task.remote(task_json, {"item": i}, ctx, executor_services) for i in range(n)
        ]
        results = await asyncio.gather(*refs)
        assert all(r.success for r in results)
        return time.perf_counter() - t0


class _Bare:
    async def ping(self) -> int:
        return 1


async def _bare_actor_start() -> float:
    import ray

    from core.ids import new_id

    t0 = time.perf_counter()
    handle = (
        ray.remote(_Bare)
        .options(  # type: ignore[attr-defined]
            name=f"bench-bare:{new_id()}", namespace="wonder", lifetime="detached", num_cpus=0
        )
        .remote()
    )
    await handle.ping.remote()
    elapsed = time.perf_counter() - t0
    ray.kill(handle)
    return elapsed


async def _quiesce() -> None:
    """Wait until the coordinator reserve has replaced what the last run took.

    Starting a replacement coordinator is a process start (a CPU-second or so on 2 cores); left
    running, it would land on whichever side is measured next.
    """
    from cluster import workflows
    from cluster.naming import RESERVE_NAME, existing_actor

    reserve = existing_actor(RESERVE_NAME) if workflows.reserve_size() else None
    if reserve is None:
        await asyncio.sleep(0.5)
        return
    for _ in range(600):
        stats = await reserve.wake.remote()
        if stats["ready"] >= stats["size"] and stats["starting"] == 0:
            break
        await asyncio.sleep(0.1)
    await asyncio.sleep(0.5)  # the finished run's coordinator exits


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k.startswith("WONDER_")}


async def main_async(args: argparse.Namespace, store: Any) -> dict[str, Any]:
    setup = _setup(store, args.chain)
    task_json = setup["task_json"]
    items = {"items": list(range(args.fanout))}

    in_process = min(_in_process_chain(store, args.chain) for _ in range(3))
    progress(f"planning + store per chain node, in process: {in_process * 1000:.3f} ms")
    progress("warming up: executor workers, coordinator imports")
    for _ in range(2):
        await _plain_fanout(task_json, args.fanout)
        await _workflow("bench-fanout", items)
    await _plain_chain(task_json, 5)

    chain_plain, chain_wf = [], []
    for rep in range(args.reps):
        await _quiesce()
        chain_plain.append(await _plain_chain(task_json, args.chain))
        await _quiesce()
        chain_wf.append(await _workflow("bench-chain", {}))
        progress(
            f"chain of {args.chain} rep {rep + 1}: plain {chain_plain[-1]:.3f}s, "
            f"workflow e2e {chain_wf[-1]['e2e']:.3f}s "
            f"(inside coordinator {chain_wf[-1]['inside']:.3f}s)"
        )
    plain = _median(chain_plain)
    inside = _median([r["inside"] for r in chain_wf])
    e2e = _median([r["e2e"] for r in chain_wf])
    chain = {
        "length": args.chain,
        "plain_s": round(plain, 4),
        "workflow_e2e_s": round(e2e, 4),
        "workflow_inside_s": round(inside, 4),
        "plain_per_task_ms": round(plain / args.chain * 1000, 3),
        "node_overhead_ms": round((inside - plain) / args.chain * 1000, 3),
        "node_overhead_e2e_ms": round((e2e - plain) / args.chain * 1000, 3),
        "planning_and_store_per_node_ms": round(in_process * 1000, 3),
    }
    progress(f"chain: {chain}")

    import ray

    launcher = ray.remote(_Launcher).options(num_cpus=0).remote()
    await launcher.fanout.remote(task_json, args.fanout, _env())
    fan_plain, fan_wf, fan_actor = [], [], []
    for rep in range(args.reps):
        await _quiesce()
        fan_actor.append(await launcher.fanout.remote(task_json, args.fanout, _env()))
        await _quiesce()
        fan_plain.append(await _plain_fanout(task_json, args.fanout))
        await _quiesce()
        fan_wf.append(await _workflow("bench-fanout", items))
        progress(
            f"fan-out {args.fanout} rep {rep + 1}: plain {fan_plain[-1]:.3f}s "
            f"(from an actor {fan_actor[-1]:.3f}s), "
            f"workflow e2e {fan_wf[-1]['e2e']:.3f}s "
            f"(inside {fan_wf[-1]['inside']:.3f}s, start {fan_wf[-1]['start']:.3f}s)"
        )
    bare = [await _bare_actor_start() for _ in range(args.reps)]
    plain_fan = _median(fan_plain)
    fanout = {
        "width": args.fanout,
        "plain_s": round(plain_fan, 4),
        "workflow_e2e_s": round(_median([r["e2e"] for r in fan_wf]), 4),
        "workflow_inside_s": round(_median([r["inside"] for r in fan_wf]), 4),
        "coordinator_start_ms": round(_median([r["start"] for r in fan_wf]) * 1000, 1),
        "bare_actor_start_ms": round(_median(bare) * 1000, 1),
        "plain_from_actor_s": round(_median(fan_actor), 4),
    }
    fanout["ratio_e2e"] = round(fanout["workflow_e2e_s"] / plain_fan, 3)
    fanout["ratio_inside"] = round(fanout["workflow_inside_s"] / plain_fan, 3)
    fanout["ratio_e2e_vs_actor"] = round(fanout["workflow_e2e_s"] / _median(fan_actor), 3)
    ray.kill(launcher)
    progress(f"fan-out: {fanout}")
    return {
        "node_overhead_ms": chain["node_overhead_ms"],
        "node_overhead_e2e_ms": chain["node_overhead_e2e_ms"],
        "planning_and_store_per_node_ms": chain["planning_and_store_per_node_ms"],
        "fanout_ratio_vs_plain_ray": fanout["ratio_e2e"],
        "fanout_ratio_in_coordinator": fanout["ratio_inside"],
        "fanout_ratio_vs_plain_ray_from_actor": fanout["ratio_e2e_vs_actor"],
        "coordinator_start_ms": fanout["coordinator_start_ms"],
        "bare_actor_start_ms": fanout["bare_actor_start_ms"],
        "chain": chain,
        "fanout": fanout,
        "reps": args.reps,
        "keep_workers_s": args.keep_workers_s,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--chain", type=int, default=50, help="task nodes in the linear chain")
    parser.add_argument("--fanout", type=int, default=100, help="fan-out width")
    parser.add_argument("--reps", type=int, default=5, help="repetitions (medians reported)")
    parser.add_argument(
        "--keep-workers-s",
        type=float,
        default=60.0,
        help="keep idle Ray workers this long (0: Ray's default)",
    )
    args = parser.parse_args()

    system_config = (
        {"idle_worker_killing_time_threshold_ms": int(args.keep_workers_s * 1000)}
        if args.keep_workers_s > 0
        else {}
    )
    with local_ray(progress, system_config=system_config) as local:
        from core.store import open_store

        results = asyncio.run(main_async(args, open_store(local.env)))
    print(json.dumps(results), flush=True)


if __name__ == "__main__":
    main()
