"""A client of one conversation's WebSocket stream that resumes by ``seq``, as docs/api.md tells
clients to: when the connection breaks (a gateway replica or its node lost, the relay giving up),
it reconnects with ``after_seq`` = the last durable ``seq`` it saw.

It records what a client would see — every durable ``seq`` in arrival order across connections,
the node of the gateway replica behind each connection (``X-Wonder-Node``), the breaks — so the
multi-node tier (``tests/cluster``) and ``benchmarks/cluster_scale.py`` can check that a resumed
stream has no gap and no duplicate. A message is sent again only when the gateway refused it with
a retriable error frame (nothing was stored); otherwise its turn is known from its ``ack`` or,
when the connection broke before the ack came, from the stored user ``message`` event the resumed
stream replays (the gateway may still be storing it then); a message neither acknowledged nor
replayed a while after the reconnect was lost with its connection and is sent again.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidHandshake

NODE_HEADER = "x-wonder-node"
RECONNECT_PAUSE_S = 0.2
RESEND_PAUSE_S = 0.5
UNACKED_RESEND_S = 2.0  # after a reconnect, how long the replay may take to show a stored message
MAX_RESENDS = 20
BROKEN = (ConnectionClosed, InvalidHandshake, OSError, TimeoutError)


@dataclass
class TurnSeen:
    """One message's turn as the client saw it."""

    content: str
    turn_id: str | None = None
    acked: bool = False
    ended: str | None = None  # turn.completed | turn.failed
    ended_at: float | None = None  # time.monotonic() when its end arrived
    refusals: list[dict[str, Any]] = field(default_factory=list)  # error frames for it
    connection: int = 0  # the connection it was last sent on (a count of connections)


@dataclass
class ResumingStream:
    """One conversation's stream through the gateway at ``base_url`` (``http://host:port``)."""

    base_url: str
    key: str
    conversation_id: str
    max_reconnects: int = 200
    seqs: list[int] = field(default_factory=list)  # durable seqs, in arrival order
    nodes: list[str] = field(default_factory=list)  # the replica's node, per connection
    breaks: list[float] = field(default_factory=list)  # time.monotonic() of each break
    turns: dict[str, TurnSeen] = field(default_factory=dict)  # by the frame id we sent
    _ws: ClientConnection | None = None
    _counter: int = 0
    _opened_at: float = 0.0

    @property
    def last_seq(self) -> int:
        return max(self.seqs, default=0)

    @property
    def node(self) -> str:
        """The node of the replica serving the current (or last) connection."""
        return self.nodes[-1] if self.nodes else ""

    async def open(self, timeout_s: float = 30.0) -> None:
        """Connect (or reconnect after the last seq seen) and wait for ``subscribed`` (which
        waits for the conversation's actor: many opened at once start many actors)."""
        url = self.base_url.replace("http://", "ws://", 1)
        self._ws = await connect(
            f"{url}/v1/conversations/{self.conversation_id}/stream?after_seq={self.last_seq}",
            additional_headers={"Authorization": f"Bearer {self.key}"},
            proxy=None,
            open_timeout=timeout_s,
        )
        response = self._ws.response
        self.nodes.append(response.headers.get(NODE_HEADER, "") if response else "")
        self._opened_at = time.monotonic()
        while (await self._receive(timeout_s)).get("type") != "subscribed":
            pass

    async def close(self) -> None:
        if self._ws is not None:
            await self._ws.close()
            self._ws = None

    async def send(self, content: str) -> str:
        """Send a message (reconnecting first if the stream is broken); its frame id."""
        self._counter += 1
        frame_id = f"m{self._counter}"
        self.turns[frame_id] = TurnSeen(content)
        await self._send(frame_id)
        return frame_id

    async def _send(self, frame_id: str) -> None:
        content = self.turns[frame_id].content
        frame = json.dumps({"type": "message", "content": content, "id": frame_id})
        while True:
            try:
                if self._ws is None:
                    await self.open()
                assert self._ws is not None
                await self._ws.send(frame)
                self.turns[frame_id].connection = len(self.nodes)
                return
            except BROKEN:
                await self._broke()

    async def _resend_refused(self, seen: TurnSeen, frame_id: str) -> None:
        """A message the gateway refused with a retriable error (a conversation restarting
        longer than its retries) was not stored: send it again, a while later."""
        if not seen.refusals or seen.acked or len(seen.refusals) > MAX_RESENDS:
            return
        last = seen.refusals[-1]
        if not last.get("retriable") or last.get("resent"):
            return
        last["resent"] = True
        await asyncio.sleep(RESEND_PAUSE_S)
        await self._send(frame_id)

    async def _resend_lost(self, seen: TurnSeen, frame_id: str) -> None:
        """A message sent on a connection that broke before its ack (its gateway replica's node
        lost) and that the resumed stream's replay does not show stored was not stored: send it
        again on this connection, once the replay has had ``UNACKED_RESEND_S``."""
        if seen.acked or seen.turn_id is not None or seen.connection >= len(self.nodes):
            return
        if time.monotonic() - self._opened_at >= UNACKED_RESEND_S:
            await self._send(frame_id)

    async def wait_turn(self, frame_id: str, timeout_s: float) -> TurnSeen:
        """Read (reconnecting, resending a refused message) until the turn of ``frame_id`` has
        ended."""
        seen = self.turns[frame_id]
        await self._read_until(
            lambda: seen.ended is not None, timeout_s, f"{seen.content!r} end", frame_id
        )
        return seen

    async def wait_acked(self, frame_id: str, timeout_s: float) -> TurnSeen:
        """Read (reconnecting, resending a refused message) until the message of ``frame_id``
        is acknowledged."""
        seen = self.turns[frame_id]
        await self._read_until(
            lambda: seen.acked, timeout_s, f"{seen.content!r} acknowledged", frame_id
        )
        return seen

    async def wait_seq(self, seq: int, timeout_s: float) -> None:
        """Read (reconnecting as needed) until durable event ``seq`` has arrived."""
        await self._read_until(lambda: self.last_seq >= seq, timeout_s, f"seq {seq}")

    async def _read_until(
        self, done: Callable[[], bool], timeout_s: float, what: str, frame_id: str | None = None
    ) -> None:
        deadline = time.monotonic() + timeout_s
        while not done():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError(f"{self.conversation_id}: no {what} in {timeout_s}s")
            try:
                if self._ws is None:
                    await self.open()
                wait = remaining if frame_id is None else min(remaining, UNACKED_RESEND_S)
                try:
                    await self._receive(wait)
                except TimeoutError:
                    if wait >= remaining:
                        raise
                if frame_id is not None:
                    await self._resend_refused(self.turns[frame_id], frame_id)
                    await self._resend_lost(self.turns[frame_id], frame_id)
            except BROKEN:
                await self._broke()

    async def _broke(self) -> None:
        self.breaks.append(time.monotonic())
        if self._ws is not None:
            await self._ws.close()
        self._ws = None
        if len(self.breaks) > self.max_reconnects:
            raise ConnectionError(
                f"stream of {self.conversation_id} broke {len(self.breaks)} times"
            )
        await asyncio.sleep(RECONNECT_PAUSE_S)

    async def receive(self, timeout_s: float) -> dict[str, Any]:
        """The next frame of the open connection (no reconnecting: a break raises)."""
        return await self._receive(timeout_s)

    async def send_raw(self, text: str) -> None:
        """Send a frame as it is, on the open connection."""
        assert self._ws is not None
        await self._ws.send(text)

    async def _receive(self, timeout_s: float) -> dict[str, Any]:
        assert self._ws is not None
        frame: dict[str, Any] = json.loads(await asyncio.wait_for(self._ws.recv(), timeout_s))
        self._observe(frame)
        return frame

    def _observe(self, frame: dict[str, Any]) -> None:
        seq = frame.get("seq")
        if seq is not None:
            self.seqs.append(int(seq))
        match frame.get("type"):
            case "ack":
                seen = self.turns.get(str(frame.get("id")))
                if seen is not None:
                    seen.turn_id, seen.acked = str(frame["turn_id"]), True
            case "message":
                message = frame.get("message") or {}
                for seen in self.turns.values():  # stored before its ack reached us
                    if (
                        seen.turn_id is None
                        and message.get("role") == "user"
                        and message.get("content") == seen.content
                    ):
                        seen.turn_id = str(message.get("turn_id"))
                        break
            case "error":
                seen = self.turns.get(str(frame.get("id")))
                if seen is not None:
                    seen.refusals.append(dict(frame.get("error") or {}))
            case "turn.completed" | "turn.failed":
                for seen in self.turns.values():
                    if seen.turn_id == frame.get("turn_id") and seen.ended is None:
                        seen.ended, seen.ended_at = str(frame["type"]), time.monotonic()
            case _:
                pass

    def gaps_and_duplicates(self) -> tuple[int, int]:
        """Durable seqs missing between 1 and the last seen, and seqs seen more than once."""
        seen = set(self.seqs)
        missing = sum(1 for s in range(1, self.last_seq + 1) if s not in seen)
        return missing, len(self.seqs) - len(seen)
