"""``wonder conversations tail`` resumes by ``seq``: against a stand-in for the gateway's stream
(a real WebSocket server on loopback speaking its protocol), a dropped connection is reopened
with ``after_seq`` = the last ``seq`` printed, so nothing is missed or printed twice; a refusal
(close 4404, 4401) ends it with its exit code."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any
from urllib.parse import parse_qs, urlparse

import pytest
from websockets.asyncio.server import ServerConnection, serve

from cluster.cli.api_client import Target
from cluster.cli.output import CliError, ExitCode
from cluster.cli.tail import EventPrinter, StopRule, follow

Handler = Callable[[ServerConnection, int], Any]


def message(seq: int, role: str, content: str) -> dict[str, Any]:
    stored = {"turn_id": "t1", "role": role, "author": "app", "content": content}
    return {"seq": seq, "type": "message", "message": stored}


HISTORY = [
    message(1, "user", "hello"),
    {"seq": 2, "type": "turn.started", "turn_id": "t1"},
    {"seq": None, "type": "token", "turn_id": "t1", "delta": "hi "},
    {"seq": None, "type": "token", "turn_id": "t1", "delta": "there"},
    message(3, "agent", "hi there"),
    {"seq": 4, "type": "turn.completed", "turn_id": "t1"},
]


@asynccontextmanager
async def stream_server(handle: Handler) -> AsyncIterator[tuple[str, list[int]]]:
    """A server on a free loopback port; yields its URL and the ``after_seq`` of each connection."""
    asked: list[int] = []

    async def on_connect(ws: ServerConnection) -> None:
        assert ws.request is not None
        query = parse_qs(urlparse(ws.request.path).query)
        assert ws.request.headers["Authorization"] == "Bearer wk_test"
        asked.append(int(query["after_seq"][0]))
        await handle(ws, asked[-1])

    async with serve(on_connect, "127.0.0.1", 0) as server:
        port = next(iter(server.sockets)).getsockname()[1]
        yield f"http://127.0.0.1:{port}", asked


async def run_follow(url: str, after_seq: int = 0) -> tuple[int, str, list[str]]:
    printed: list[str] = []
    notices: list[str] = []
    code = await follow(
        Target(url=url, key="wk_test"),
        "conv_1",
        after_seq,
        printed.append,
        EventPrinter(),
        StopRule(once=True),
        notices.append,
    )
    return code, "".join(printed), notices


@pytest.mark.parametrize("reply_ended_meanwhile", [False, True])
async def test_a_dropped_stream_is_resumed_after_the_last_seq(reply_ended_meanwhile: bool) -> None:
    async def handle(ws: ServerConnection, after_seq: int) -> None:
        await ws.send(json.dumps({"seq": None, "type": "subscribed", "after_seq": after_seq}))
        for event in HISTORY:
            if event["seq"] is not None and event["seq"] <= after_seq:
                continue
            if after_seq and reply_ended_meanwhile and event["seq"] is None:
                continue  # a stored reply is replayed as its message, without tokens
            await ws.send(json.dumps(event))
            if after_seq == 0 and event.get("delta") == "hi ":
                await ws.close(1011, "the node went away")  # mid-reply
                return

    async with stream_server(handle) as (url, asked):
        code, text, notices = await run_follow(url)
    assert code == ExitCode.OK
    assert asked == [0, 2]  # reconnected after the last seq it had printed
    # The cut line ends; the reply is printed again whole: the stream hands its tokens so far
    # again (a reply still streaming) or its stored message (one that ended meanwhile).
    assert text == "user app> hello\nagent> hi \nagent> hi there\n"
    assert notices[0] == "following conv_1 after seq 0; Ctrl-C stops"
    assert "reconnecting after seq 2" in notices[1]


async def test_a_refused_stream_ends_with_its_exit_code() -> None:
    async def handle(ws: ServerConnection, after_seq: int) -> None:
        error = {"code": "NOT_FOUND", "message": "conversation conv_1 not found"}
        await ws.close(4404, error["message"])

    async with stream_server(handle) as (url, asked):
        try:
            await run_follow(url)
        except CliError as exc:
            refused = exc
    assert refused.code == ExitCode.NOT_FOUND and refused.message == "conversation conv_1 not found"
    assert asked == [0]  # a refusal is not retried


async def test_an_error_frame_ends_it_as_the_error_says() -> None:
    async def handle(ws: ServerConnection, after_seq: int) -> None:
        error = {"code": "UNAUTHORIZED", "message": "API key key_1 was revoked", "retriable": False}
        await ws.send(json.dumps({"seq": None, "type": "error", "error": error}))
        await ws.close(4401, error["message"])

    async with stream_server(handle) as (url, _):
        try:
            await run_follow(url)
        except CliError as exc:
            refused = exc
    assert refused.code == ExitCode.REFUSED and "was revoked" in refused.message


async def test_a_failed_turn_ends_it_with_1() -> None:
    async def handle(ws: ServerConnection, after_seq: int) -> None:
        await ws.send(json.dumps(HISTORY[0]))
        failed = {"seq": 2, "type": "turn.failed", "turn_id": "t1", "reason": "model unavailable"}
        await ws.send(json.dumps(failed))
        await ws.wait_closed()

    async with stream_server(handle) as (url, _):
        code, text, _ = await run_follow(url)
    assert code == ExitCode.FAILURE
    assert text == "user app> hello\n[turn t1 failed: model unavailable]\n"
