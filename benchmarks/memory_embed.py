"""The embed job against plain ``encode`` on the same texts: several designs in one run.

    .venv/bin/python benchmarks/memory_embed.py              # 2,000 texts
    .venv/bin/python benchmarks/memory_embed.py --texts 300  # quicker

Plain: ``SentenceTransformer.encode`` in this process, model loaded first (its load, imports
included, is reported as ``model_load_s``), measured before and after the jobs (their mean is
the baseline). Each job design re-embeds the same rows (``--all``) of a LanceDB table on a local
Ray this script starts (2 CPUs here) and merges the vectors back:

- ``before``: Ray Data as it was: one 2-CPU actor, batches of 64, Ray Data's default read split
  (a small selection becomes 200 blocks of a few rows);
- Ray Data with about one read block per batch, batches of 64 or 256, one 2-thread actor or two
  1-thread actors;
- ``in_process``: the job's own process embeds (what a selection of at most
  ``--in-process-max-rows`` rows gets), run as ``python -m jobs.embed`` in a fresh process: the
  interpreter start, imports and model load are all counted;
- ``in_process`` through the warm Embedder deployment (``wonder up`` deploys it; here Serve is
  started on a free port and the app deployed before the job, outside its timing): the job's
  batches go to the replica, whose model is already loaded.

``whole`` = plain seconds ÷ job seconds (end to end); ``steady`` = the job's rate after its first
embedded batch ÷ plain's rate. The fixed costs are measured on their own in the same run: a bare
actor's start (to its first call) and a fresh process's imports + model load.

Progress goes to stderr; the last stdout line is one JSON object.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from core.memory import HashingEmbedder, NewMemory, open_memory_service
from core.memory.embedding import DEFAULT_DIM, encode_texts, load_sentence_transformer

ROOT = Path(__file__).resolve().parents[1]


def say(message: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def sentences(n: int) -> list[str]:
    """Memory-like texts of 30-40 words (what extraction writes: a few sentences each)."""
    subjects = ["The user", "Our team", "The customer", "My manager", "The new intern"]
    verbs = ["prefers", "asked about", "decided on", "complained about", "wants to learn"]
    objects = ["green tea", "the Q3 roadmap", "PostgreSQL", "weekly demos", "Rust", "hiking"]
    tails = [
        "because the previous approach kept failing during the quarterly review",
        "and wants a short written summary before the planning meeting on Thursday",
        "after a long discussion about costs, deadlines and who owns the follow-up work",
    ]
    return [
        f"{subjects[i % 5]} {verbs[(i // 5) % 5]} {objects[(i // 25) % 6]} {tails[i % 3]}. "
        f"This came up in conversation {i} and should be remembered when similar questions "
        f"come back later."
        for i in range(n)
    ]


@dataclass(frozen=True)
class Where:
    resolved_lance_uri: str
    resolved_object_uri: str
    s3_endpoint_url: str | None = None


@dataclass
class Design:
    name: str
    options: dict[str, Any] = field(default_factory=dict)
    default_split: bool = False  # Ray Data's own read split (before this change)
    subprocess: bool = False
    deployment: bool = False
    result: dict[str, Any] = field(default_factory=dict)


DESIGNS = [
    Design(
        "before: Ray Data, 1 actor x 2 threads, batch 64, default read split",
        {"cpus_per_actor": 2, "in_process_max_rows": 0},
        default_split=True,
    ),
    Design(
        "Ray Data, 1 actor x 2 threads, batch 64", {"cpus_per_actor": 2, "in_process_max_rows": 0}
    ),
    Design(
        "Ray Data, 1 actor x 2 threads, batch 256",
        {"cpus_per_actor": 2, "batch_size": 256, "in_process_max_rows": 0},
    ),
    Design(
        "Ray Data, 2 actors x 1 thread, batch 64", {"cpus_per_actor": 1, "in_process_max_rows": 0}
    ),
    Design("in process (default up to 10k rows), fresh process", subprocess=True),
    Design("in process, through the warm Embedder deployment", deployment=True),
]


def plain_seconds(model: Any, texts: list[str]) -> float:
    started = time.perf_counter()
    encode_texts(model, texts, batch_size=64)
    return time.perf_counter() - started


@contextmanager
def default_read_split() -> Iterator[None]:
    """``read_lance`` without the block count the job now passes (the job as it was)."""
    import ray.data

    original: Callable[..., Any] = ray.data.read_lance

    def read_lance(*args: Any, **kwargs: Any) -> Any:
        kwargs.pop("override_num_blocks", None)
        return original(*args, **kwargs)

    ray.data.read_lance = read_lance
    try:
        yield
    finally:
        ray.data.read_lance = original


def run_in_ray(design: Design, env: dict[str, str]) -> dict[str, Any]:
    from cluster.memory_access import ServedEmbedders
    from jobs.embed import EmbedOptions, run_embed

    options = EmbedOptions(all_rows=True, **design.options)
    embedders = ServedEmbedders(env) if design.deployment else None
    started = time.perf_counter()
    if design.default_split:
        with default_read_split():
            result = run_embed(options)
    else:
        result = run_embed(options, embedders)
    return {**result, "wall_s": time.perf_counter() - started}


def start_embedder_deployment() -> float:
    """Serve on a free loopback port and the embedder app; returns how long that took."""
    import socket

    from ray import serve

    from serving.embedder_app import deploy_embedder

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    started = time.perf_counter()
    serve.start(http_options={"host": "127.0.0.1", "port": port})
    deploy_embedder()
    return time.perf_counter() - started


def run_fresh_process(env: dict[str, str]) -> dict[str, Any]:
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "jobs.embed", "--all"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    wall = time.perf_counter() - started
    return {**json.loads(done.stdout.strip().splitlines()[-1]), "wall_s": wall}


def fresh_model_load_s() -> float:
    """Interpreter start, imports and model load in a new process (what a job worker pays)."""
    code = (
        "import time; t = time.perf_counter(); "
        "from core.memory.embedding import load_sentence_transformer; "
        "load_sentence_transformer(); print(time.perf_counter() - t)"
    )
    started = time.perf_counter()
    subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, check=True)
    return time.perf_counter() - started


def bare_actor_start_s() -> float:
    import ray

    @ray.remote(num_cpus=0)
    class Bare:
        def ping(self) -> int:
            return os.getpid()

    started = time.perf_counter()
    actor = Bare.remote()  # type: ignore[attr-defined]
    ray.get(actor.ping.remote())
    elapsed = time.perf_counter() - started
    ray.kill(actor)
    return elapsed


def main(argv: list[str] | None = None) -> int:
    import ray

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--texts", type=int, default=2000)
    args = parser.parse_args(argv)
    n = args.texts
    texts = sentences(n)
    load_at_start = os.getloadavg()[0]

    started = time.perf_counter()
    model = load_sentence_transformer()
    model_load_s = time.perf_counter() - started
    plain_before = plain_seconds(model, texts)
    say(f"plain encode {n} texts: {plain_before:.1f}s ({n / plain_before:.0f}/s)")

    root = Path(tempfile.mkdtemp(prefix="wonder-bench-embed-"))
    ray_tmp = tempfile.mkdtemp(prefix="wbe", dir="/tmp")
    env = {**os.environ, "WONDER_DATA_DIR": str(root)}
    env.pop("RAY_ADDRESS", None)
    os.environ["WONDER_DATA_DIR"] = str(root)
    os.environ.pop("RAY_ADDRESS", None)
    fixed: dict[str, float] = {}
    failed: dict[str, str] = {}
    try:
        where = Where(str(root / "lance"), str(root / "objects"))
        stand_in = open_memory_service(where, HashingEmbedder(DEFAULT_DIM, name="stand-in"))
        memories = [NewMemory(content=t) for t in texts]
        asyncio.run(stand_in.write("agent-embed", memories, dedupe="none"))
        ray.init(
            num_cpus=os.cpu_count() or 1,
            include_dashboard=False,
            _temp_dir=ray_tmp,
            log_to_driver=False,
            runtime_env={"env_vars": {"WONDER_DATA_DIR": str(root)}},
        )
        fixed["bare_actor_start_s"] = round(bare_actor_start_s(), 2)
        fixed["fresh_process_model_load_s"] = round(fresh_model_load_s(), 2)
        say(f"fixed costs: {fixed}")
        for design in DESIGNS:
            try:
                if design.deployment:
                    fixed["deployment_start_s"] = round(start_embedder_deployment(), 2)
                result = run_fresh_process(env) if design.subprocess else run_in_ray(design, env)
            except Exception as error:
                # A design that fails (Serve's proxy timing out under load) is reported; the
                # others' figures are kept.
                failed[design.name] = repr(error)[:300]
                say(f"{design.name}: FAILED {error!r}")
                continue
            assert result["written"] == n, result
            design.result = result
            say(f"{design.name}: {result['wall_s']:.1f}s, {result}")
    finally:
        if ray.is_initialized():
            from ray import serve

            serve.shutdown()
            ray.shutdown()
        shutil.rmtree(root, ignore_errors=True)
        shutil.rmtree(ray_tmp, ignore_errors=True)
    plain_after = plain_seconds(model, texts)
    plain_s = statistics.mean([plain_before, plain_after])
    say(f"plain encode again: {plain_after:.1f}s; baseline {plain_s:.1f}s ({n / plain_s:.0f}/s)")

    designs = {}
    for design in DESIGNS:
        r = design.result
        if not r:
            continue
        steady = r.get("steady_rows_per_s")
        designs[design.name] = {
            "mode": r["mode"],
            "wall_s": round(r["wall_s"], 2),
            "whole_ratio": round(plain_s / r["wall_s"], 3),
            "steady_rows_per_s": steady,
            "steady_ratio": round(steady / (n / plain_s), 3) if steady else None,
            "first_batch_s": r.get("first_batch_s"),
        }
        say(
            f"  {design.name:60s} whole {designs[design.name]['whole_ratio']:.2f} "
            f"steady {designs[design.name]['steady_ratio']} "
            f"first batch {designs[design.name]['first_batch_s']}s"
        )
    result = {
        "texts": n,
        "plain_rows_per_s": round(n / plain_s, 1),
        "plain_seconds": [round(plain_before, 2), round(plain_after, 2)],
        "model_load_s_in_this_process": round(model_load_s, 2),
        **fixed,
        "designs": designs,
        "failed": failed,
        "cpus": os.cpu_count(),
        "load_avg_1m_at_start": round(load_at_start, 1),
        "load_avg_1m_at_end": round(os.getloadavg()[0], 1),
    }
    print(json.dumps(result, sort_keys=True), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
