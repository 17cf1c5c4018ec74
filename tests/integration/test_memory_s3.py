"""Memory on S3 (a real moto server) and on a local directory: large contents through the object
store, and two processes writing one agent's memory at once without losing a write."""

from __future__ import annotations

import asyncio
import multiprocessing
from dataclasses import dataclass
from pathlib import Path

import pytest

from core.memory import (
    HashingEmbedder,
    MemoryService,
    NewMemory,
    SearchMode,
    SearchRequest,
    open_memory_service,
)
from core.memory.filters import MemoryFilter
from core.memory.records import INLINE_LIMIT_BYTES
from core.memory.tuning import VectorTuning
from tests.integration.conftest import S3Server
from tests.unit.test_memory_resident import freshness_scenario, open_service

DIM = 64
WRITES_PER_PROCESS = 20


@dataclass(frozen=True)
class Locations:
    resolved_lance_uri: str
    resolved_object_uri: str
    s3_endpoint_url: str | None = None


def service_at(locations: Locations) -> MemoryService:
    return open_memory_service(locations, HashingEmbedder(DIM))


def test_memories_round_trip_through_s3(s3_uri: str, s3_server: S3Server) -> None:
    import s3fs

    where = Locations(f"{s3_uri}/lance", f"{s3_uri}/objects", s3_server.endpoint_url)
    service = service_at(where)
    big = "".join(f"line {i}: the quarterly report numbers\n" for i in range(400))
    assert len(big.encode()) > INLINE_LIMIT_BYTES
    small, large = asyncio.run(
        service.write(
            "agent-s3",
            [NewMemory(type="fact", content="S3 keeps this inline"), NewMemory(content=big)],
        )
    )
    assert large.memory.content_ref == f"agent-s3/{large.memory.id}"
    fs = s3fs.S3FileSystem(endpoint_url=s3_server.endpoint_url)
    stored = fs.cat_file(f"{s3_uri.removeprefix('s3://')}/objects/agent-s3/{large.memory.id}")
    assert stored.decode() == big

    # A second process-like reader (a fresh connection) sees both, with the full content.
    reader = service_at(where)
    assert asyncio.run(reader.read("agent-s3", large.memory.id)).content == big
    assert asyncio.run(reader.read("agent-s3", small.memory.id)).content == "S3 keeps this inline"
    hits = asyncio.run(
        reader.search("agent-s3", SearchRequest("inline", k=2, mode=SearchMode.HYBRID))
    )
    assert hits[0].memory.id == small.memory.id
    asyncio.run(reader.delete("agent-s3", large.memory.id))
    assert not fs.exists(f"{s3_uri.removeprefix('s3://')}/objects/agent-s3/{large.memory.id}")


def _writer(where: Locations, name: str, env: dict[str, str], out: multiprocessing.Queue) -> None:
    """One writer process: episodes one commit at a time, its own facts, and a shared fact."""
    import os

    os.environ.update(env)

    async def main() -> list[str]:
        service = service_at(where)
        ids: list[str] = []
        for i in range(WRITES_PER_PROCESS):
            outcome = await service.write(
                "agent-x", [NewMemory(type="episode", content=f"{name} episode {i}")]
            )
            ids.append(outcome[0].memory.id)
            if i % 6 == 0:
                fact = NewMemory(type="fact", subject=f"{name}.{i}", content=f"{name} fact {i}")
                ids.append((await service.write("agent-x", [fact]))[0].memory.id)
                shared = NewMemory(type="fact", subject="shared", content=f"{name} says {i}")
                await service.write("agent-x", [shared])
        return ids

    out.put(asyncio.run(main()))


@pytest.mark.parametrize("backend", ["local", "s3"])
def test_two_processes_writing_one_agent_lose_nothing(
    backend: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    if backend == "s3":
        server: S3Server = request.getfixturevalue("s3_server")
        uri = request.getfixturevalue("s3_uri")
        where = Locations(f"{uri}/lance", f"{uri}/objects", server.endpoint_url)
        env = server.env
    else:
        where = Locations(str(tmp_path / "lance"), str(tmp_path / "objects"))
        env = {}
    # Create the table first, as a running system would have; this connection holds agent-x's
    # vectors (none yet) and must see the other processes' commits.
    resident = service_at(where).ops
    assert resident.nearest(MemoryFilter("agent-x"), [1.0] * DIM, 1) == []
    spawn = multiprocessing.get_context("spawn")  # never fork after LanceDB was used
    results = spawn.Queue()
    writers = [spawn.Process(target=_writer, args=(where, n, env, results)) for n in ("p1", "p2")]
    for process in writers:
        process.start()
    written = [results.get(timeout=240) for _ in writers]
    for process in writers:
        process.join(timeout=30)
        assert process.exitcode == 0

    service = service_at(where)
    episodes = service.ops.count(MemoryFilter("agent-x", types=("episode",)))
    assert episodes == 2 * WRITES_PER_PROCESS
    ids = [memory_id for batch in written for memory_id in batch]
    assert len(service.ops.get_many("agent-x", ids)) == len(ids) == len(set(ids))
    shared = service.ops.recent(MemoryFilter("agent-x", types=("fact",), subject="shared"))
    # Both writers raced on one subject; each update landed on a row, none vanished.
    assert 1 <= len(shared) <= 2 and all(" says " in m.content for m in shared)
    held = resident.nearest(MemoryFilter("agent-x", types=("episode",)), [1.0] * DIM, 100)
    assert len(held) == episodes and resident.resident.loads == 1


def test_a_resident_reader_on_s3_sees_every_commit_of_another_connection(
    s3_uri: str, s3_server: S3Server
) -> None:
    endpoint = s3_server.endpoint_url
    writer = open_service(s3_uri, VectorTuning(resident_mib=0), endpoint)
    reader = open_service(s3_uri, VectorTuning(), endpoint)
    exact = open_service(s3_uri, VectorTuning(resident_mib=0), endpoint)
    freshness_scenario(writer, reader, exact)
