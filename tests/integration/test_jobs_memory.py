"""The memory batch jobs, submitted as real Ray Jobs to the session cluster's job server (through
``cluster.jobs.main``, what ``wonder job`` runs), on a local LanceDB directory and on S3 (moto)."""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import sys
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import ray

from cluster import jobs as cli
from cluster.local_cluster import LocalCluster
from core.memory import (
    HashingEmbedder,
    MemoryFilter,
    MemoryService,
    NewMemory,
    SearchRequest,
    SentenceTransformerEmbedder,
    open_memory_service,
)
from jobs.consolidate import ConsolidateOptions, consolidate_one
from tests.conftest import Cluster
from tests.integration.conftest import S3Server

OFFLINE = ["HF_HUB_OFFLINE=1", "TRANSFORMERS_OFFLINE=1", "WONDER_EMBEDDER=local"]


@dataclass(frozen=True)
class Locations:
    resolved_lance_uri: str
    resolved_object_uri: str
    s3_endpoint_url: str | None = None


def clock_from(start: datetime) -> Callable[[], datetime]:
    state = {"now": start}

    def tick() -> datetime:
        state["now"] += timedelta(minutes=1)
        return state["now"]

    return tick


def run_job(ray_cluster: Cluster, job: str, env: list[str], *args: str) -> dict[str, Any]:
    """Submit ``job`` through the CLI, wait for it, and return the JSON its last line printed."""
    from ray.job_submission import JobSubmissionClient

    address = ray_cluster.dashboard_url
    envs = [f"--env={e}" for e in [*OFFLINE, *env]]
    code = cli.main([job, "--address", address, "--python", sys.executable, *envs, *args])
    client = JobSubmissionClient(address)
    latest = max(client.list_jobs(), key=lambda j: j.start_time or 0)
    logs = client.get_job_logs(latest.submission_id)
    assert code == 0, logs[-3000:]
    result_lines = [line for line in logs.splitlines() if line.startswith('{"')]
    return dict(json.loads(result_lines[-1]))


@pytest.fixture
def another_ray() -> Iterator[LocalCluster]:
    """A second Ray on the machine (a `ray start` head of its own), as when another session or a
    `wonder up` runs beside the tests."""
    scrubbed = {k: v for k, v in os.environ.items() if not k.startswith(("RAY_ADDRESS", "WONDER_"))}
    other = LocalCluster(tempfile.mkdtemp(prefix="wo", dir="/tmp"), scrubbed)
    try:
        other.start_head(num_cpus=1)
        yield other
    finally:
        other.shutdown()
        shutil.rmtree(other.temp_dir, ignore_errors=True)


def test_embed_job_backfills_vectors_with_the_model(
    ray_cluster: Cluster,
    another_ray: LocalCluster,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    where = Locations(str(tmp_path / "lance"), str(tmp_path / "objects"))
    # Written with a stand-in embedder (same dimension, useless vectors): a backfill case.
    stand_in = open_memory_service(where, HashingEmbedder(384, name="stand-in"))
    texts = [f"note {i}: the {kind} is {i}" for i in range(40) for kind in ("colour",)]
    texts += ["The wifi password is hunter2", "x" * 5000 + " the quarterly report"]
    asyncio.run(stand_in.write("agent-e", [NewMemory(content=t) for t in texts], dedupe="none"))

    env = [f"WONDER_DATA_DIR={tmp_path}"]
    pool = ["--actors", "1", "--in-process-max-rows", "0"]  # the Ray Data path, however small
    batches = ["--batch-size", "16", "--write-chunk", "16"]  # 3 batches: a steady rate to time
    result = run_job(ray_cluster, "embed", env, *pool, *batches)
    assert result["selected"] == result["written"] == len(texts)
    assert result["mode"] == "ray_data" and result["steady_rows_per_s"] > 0
    out = capsys.readouterr().out
    assert "embedded 16/42" in out  # progress in the job log, followed by the CLI
    # The job's Ray Data pool ran on the cluster it was submitted to, not the other one.
    session_gcs = ray.get_runtime_context().gcs_address
    assert f"Connecting to existing Ray cluster at address: {session_gcs}" in out
    # (Ray names the other head by the machine's address, not the 127.0.0.1 it was started on.)
    other = rf"Connecting to existing Ray cluster at address: [^\s]+:{another_ray.gcs_port}\b"
    assert re.search(other, out) is None

    real = open_memory_service(where, SentenceTransformerEmbedder())
    assert real.ops.count(MemoryFilter("agent-e")) == len(texts)
    rows = real.ops.list_all(MemoryFilter("agent-e"))
    assert {m.embedding_model for m in rows} == {"all-MiniLM-L6-v2"}
    hits = asyncio.run(real.search("agent-e", SearchRequest("what is the wifi password", k=1)))
    assert hits[0].memory.content == "The wifi password is hunter2"

    again = run_job(ray_cluster, "embed", env, *pool)
    assert again["selected"] == 0  # idempotent: nothing left to do


def test_embed_job_embeds_a_small_selection_in_its_own_process(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from core.memory.embedding import encode_texts, load_sentence_transformer
    from jobs.embed import EmbedOptions, run_embed

    where = Locations(str(tmp_path / "lance"), str(tmp_path / "objects"))
    stand_in = open_memory_service(where, HashingEmbedder(384, name="stand-in"))
    texts = [f"fact {i}: the build takes {i} minutes" for i in range(20)]
    texts.append("y" * 5000 + " an archived design note")  # content in the object store
    asyncio.run(stand_in.write("agent-p", [NewMemory(content=t) for t in texts], dedupe="none"))
    monkeypatch.setenv("WONDER_DATA_DIR", str(tmp_path))
    result = run_embed(EmbedOptions(write_chunk=8))  # 21 rows: under --in-process-max-rows
    assert result["mode"] == "in_process" and result["written"] == len(texts)

    stored = stand_in.ops.list_all(MemoryFilter("agent-p"))
    assert {m.embedding_model for m in stored} == {"all-MiniLM-L6-v2"}
    vectors = stand_in.ops.vectors("agent-p", [m.id for m in stored])
    expected = dict(zip(texts, encode_texts(load_sentence_transformer(), texts), strict=True))
    for memory in stored:
        want = expected[stand_in.ops.content(memory)]
        got = vectors[memory.id]
        assert sum(a * b for a, b in zip(got, want, strict=True)) > 0.999  # the model's vector


def seed_history(service: MemoryService, agent: str) -> list[str]:
    episodes = [
        NewMemory(
            type="episode",
            content=f"Day {i}: we worked on the migration, step {i}.",
            significance=0.3 + i / 20,
        )
        for i in range(7)
    ]
    ids = [o.memory.id for o in asyncio.run(service.write(agent, episodes))]
    # Two racing writers left two facts on one subject (the write-time check cannot see both).
    for city in ("Paris", "Berlin"):
        fact = NewMemory(type="fact", subject="user.city", content=f"The user lives in {city}.")
        asyncio.run(service.write(agent, [fact], dedupe="none"))
    return ids


def test_consolidate_job_on_s3_folds_episodes_and_archives_them(
    ray_cluster: Cluster, s3_server: S3Server, s3_uri: str
) -> None:
    import s3fs

    where = Locations(f"{s3_uri}/lance", f"{s3_uri}/objects", s3_server.endpoint_url)
    writer = open_memory_service(where, SentenceTransformerEmbedder())
    writer.clock = clock_from(datetime.now(UTC) - timedelta(days=3))
    episode_ids = seed_history(writer, "agent-c")
    writer.clock = lambda: datetime.now(UTC)
    (recent,) = asyncio.run(writer.write("agent-c", [NewMemory(type="episode", content="Today.")]))

    env = [
        f"WONDER_LANCE_URI={where.resolved_lance_uri}",
        f"WONDER_OBJECT_URI={where.resolved_object_uri}",
        f"WONDER_S3_ENDPOINT_URL={s3_server.endpoint_url}",
        *(f"{k}={v}" for k, v in s3_server.env.items()),
    ]
    args = ("--min-age-hours", "24", "--group-size", "5")
    result = run_job(ray_cluster, "consolidate", env, *args)
    assert (result["summaries"], result["episodes_folded"], result["facts_merged"]) == (2, 7, 1)

    ops = writer.ops
    summaries = ops.list_all(MemoryFilter("agent-c", types=("summary",)))
    assert [s.metadata["sources"] for s in summaries] == [episode_ids[:5], episode_ids[5:]]
    assert summaries[0].content.startswith("Summary of 5 episodes")
    fs = s3fs.S3FileSystem(endpoint_url=s3_server.endpoint_url)
    bucket = s3_uri.removeprefix("s3://")
    for episode_id, summary in zip(
        episode_ids, [summaries[0]] * 5 + [summaries[1]] * 2, strict=True
    ):
        row = ops.get("agent-c", episode_id)
        assert (row.content, row.consolidated_into) == ("", summary.id)
        archived = fs.cat_file(f"{bucket}/objects/agent-c/{episode_id}").decode()
        assert archived.startswith("Day ") and ops.content(row) == archived
    remaining = ops.list_all(MemoryFilter("agent-c", types=("episode", "fact")))
    assert [m.content for m in remaining] == ["The user lives in Berlin.", "Today."]
    assert recent.memory.id in {m.id for m in remaining}

    # Search sees the summary, not the folded episodes; a rerun changes nothing.
    hits = asyncio.run(writer.search("agent-c", SearchRequest("the migration work", k=3)))
    assert hits[0].memory.type == "summary"
    # A rerun (here in-process, same code as the job's) finds nothing left to do.
    settings_env = {
        "WONDER_LANCE_URI": where.resolved_lance_uri,
        "WONDER_OBJECT_URI": where.resolved_object_uri,
        "WONDER_S3_ENDPOINT_URL": s3_server.endpoint_url,
        "WONDER_EMBEDDER": "local",
    }
    options = ConsolidateOptions(min_age=timedelta(hours=24), group_size=5)
    now = datetime.now(UTC)
    report = asyncio.run(
        consolidate_one("agent-c", options, settings_env, now, cli.consolidation_ports)
    )
    assert (report.summaries, report.episodes_folded, report.facts_merged) == (0, 0, 0)


def test_compact_job_builds_indexes_and_compacts_fragments(
    ray_cluster: Cluster, tmp_path: Path
) -> None:
    where = Locations(str(tmp_path / "lance"), str(tmp_path / "objects"))
    service = open_memory_service(where, HashingEmbedder(384))
    for i in range(30):  # one commit each: one small fragment each
        asyncio.run(service.write("agent-k", [NewMemory(content=f"small write {i}")]))
    env = [f"WONDER_DATA_DIR={tmp_path}"]
    result = run_job(ray_cluster, "compact", env, "--vector-index-min-rows", "1000000")
    assert set(result["created_indexes"]) == {
        "agent_id",
        "type",
        "consolidated_into",
        "id",
        "content",
    }
    assert result["before"]["fragments"] == 30 and result["after"]["fragments"] == 1
    assert result["after"]["rows"] == 30
    hits = asyncio.run(service.search("agent-k", SearchRequest("small write 7", k=1)))
    assert hits[0].memory.content == "small write 7"


def test_embed_job_output_writes_a_new_table_with_write_lance(
    ray_cluster: Cluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from core.memory import MemoryTable
    from jobs.embed import EmbedOptions, run_embed

    where = Locations(str(tmp_path / "lance"), str(tmp_path / "objects"))
    stand_in = open_memory_service(where, HashingEmbedder(384, name="stand-in"))
    texts = ["Ship the release on Monday", "x" * 5000 + " a long design document"]
    asyncio.run(stand_in.write("agent-o", [NewMemory(content=t) for t in texts]))
    monkeypatch.setenv("WONDER_DATA_DIR", str(tmp_path))  # the job reads its settings from env
    output = str(tmp_path / "lance-v2")
    result = run_embed(EmbedOptions(actors=1, output=output))
    assert result["written"] == 2

    new = MemoryTable.open_existing(output)
    rows = new.table.to_arrow().to_pylist()
    assert sorted(r["content"][:20] for r in rows) == sorted(t[:20] for t in ["", texts[0]])
    assert {r["embedding_model"] for r in rows} == {"all-MiniLM-L6-v2"}
    assert all(len(r["vector"]) == 384 and r["agent_id"] == "agent-o" for r in rows)
