"""How a model stream's token deltas are batched on their way out of the replica (no Ray, no
vLLM: an async generator stands in for the engine's payloads, with real timing)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from core.llm.protocol import ModelFinished, TextDelta, ToolCallRequested
from serving.llm import StreamPacing, coalesce
from serving.llm_client import merge_text


async def paced(items: list[str], gap_s: float) -> AsyncIterator[str]:
    """``items``, one every ``gap_s`` seconds (the first at once)."""
    for index, item in enumerate(items):
        if index:
            await asyncio.sleep(gap_s)
        yield item


async def batches_of(source: AsyncIterator[str], interval_s: float) -> list[list[str]]:
    return [batch async for batch in coalesce(source, lambda: interval_s)]


def test_without_an_interval_each_paced_item_is_its_own_batch() -> None:
    batches = asyncio.run(batches_of(paced(list("abcd"), 0.02), 0.0))
    assert batches == [["a"], ["b"], ["c"], ["d"]]


def test_an_interval_groups_what_arrives_within_it_and_keeps_every_item_in_order() -> None:
    items = [str(n) for n in range(30)]
    batches = asyncio.run(batches_of(paced(items, 0.01), 0.1))
    assert [item for batch in batches for item in batch] == items
    assert batches[0] == ["0"]  # the first token is not held back
    assert len(batches) < len(items) / 3  # ≈ 0.3 s of items in 0.1 s windows


def test_the_end_of_the_stream_is_not_held_for_the_window() -> None:
    async def run() -> tuple[list[list[str]], float]:
        loop = asyncio.get_running_loop()
        started = loop.time()
        batches = await batches_of(paced(["a", "b"], 0.0), 5.0)
        return batches, loop.time() - started

    batches, took = asyncio.run(run())
    assert batches == [["a"], ["b"]] or batches == [["a", "b"]]
    assert took < 5.0  # ended by the source, not by the 5 s window


def test_an_error_of_the_source_reaches_the_consumer_after_what_came_before() -> None:
    async def failing() -> AsyncIterator[str]:
        yield "a"
        raise RuntimeError("engine died")

    async def run() -> list[list[str]]:
        seen: list[list[str]] = []
        with pytest.raises(RuntimeError, match="engine died"):
            async for batch in coalesce(failing(), lambda: 0.05):
                seen.append(batch)
        return seen

    assert asyncio.run(run()) == [["a"]]


def test_consecutive_text_deltas_become_one_and_other_chunks_keep_their_place() -> None:
    call = ToolCallRequested(id="c1", name="lookup", arguments="{}")
    finished = ModelFinished(prompt_tokens=3, completion_tokens=4)
    chunks = [TextDelta("a"), TextDelta("b"), call, TextDelta("c"), finished]
    assert list(merge_text(chunks)) == [TextDelta("ab"), call, TextDelta("c"), finished]
    assert list(merge_text([TextDelta("x"), TextDelta("y")])) == [TextDelta("xy")]
    assert list(merge_text([])) == []


def test_a_replica_shares_its_frame_budget_between_its_open_streams() -> None:
    pacing = StreamPacing(frames_per_s=64, max_interval_s=0.25)
    assert pacing.interval_s(1) == 1 / 64
    assert pacing.interval_s(8) == 8 / 64
    assert pacing.interval_s(16) == 0.25
    assert pacing.interval_s(64) == 0.25  # never held longer than the cap
    assert StreamPacing(frames_per_s=0, max_interval_s=0.25).interval_s(16) == 0.0
