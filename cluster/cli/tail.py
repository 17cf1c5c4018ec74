"""Following a conversation from the terminal (``wonder conversations tail``, ``send --wait``).

``EventPrinter`` turns the stream's frames into lines for a person (pure: a frame in, text out);
``follow`` reads the conversation's WebSocket from a ``seq`` on, reconnecting from the last
``seq`` it saw when the connection drops (the server then replays exactly what was missed), until
a ``StopRule`` says the turn it waits for ended, or Ctrl-C.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed, InvalidStatus

from cluster.cli.api_client import ApiClient, Target, segment
from cluster.cli.output import CliError, ExitCode, exit_code_for

# Close codes the stream refuses with (serving.gateway.stream): a refusal is final, not a drop.
REFUSALS = {4400: ExitCode.USAGE, 4401: ExitCode.REFUSED, 4404: ExitCode.NOT_FOUND}
RETRIABLE_REFUSALS = {4429}
MAX_RECONNECTS = 30  # in a row, a second or more apart
NOT_EVENTS = {"subscribed", "pong", "ack"}  # frames about the socket, not the conversation
TOOL_INPUT_CHARS = 120


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


@dataclass
class EventPrinter:
    """Frames to text: messages as ``role author> content``, the agent's tokens as they come (its
    stored message then only ends the line), tool calls and failures in brackets.

    ``json_lines``: every event as one JSON line instead. ``hide_user``: leave out user messages
    (``send --wait`` prints only the reply)."""

    json_lines: bool = False
    hide_user: bool = False
    streaming: set[str] = field(default_factory=set)  # turns whose tokens were printed
    mid_line: bool = False

    def render(self, event: dict[str, Any]) -> str:
        kind = str(event.get("type"))
        if kind in NOT_EVENTS:
            return ""
        if self.json_lines:
            return json.dumps(event) + "\n"
        text = self._text(kind, event)
        if text and not text.endswith("\n") and kind != "token":
            text += "\n"
        if text:
            self.mid_line = not text.endswith("\n")
        return text

    def _text(self, kind: str, event: dict[str, Any]) -> str:
        match kind:
            case "token":
                return self._token(event)
            case "message":
                return self._message(event.get("message") or {})
            case "move":
                return self._move(event.get("move") or {})
            case "turn.failed":
                return (
                    self._break() + f"[turn {event.get('turn_id')} failed: {event.get('reason')}]"
                )
            case "tool.failed":
                return (
                    self._break() + f"[tool failed: {_clip(json.dumps(event.get('error')), 200)}]"
                )
            case "conversation_ended":
                return self._break() + "[conversation ended]"
            case _:
                return ""

    def interrupted(self) -> str:
        """The connection dropped: end an open line and forget which replies were streaming (the
        stream hands a reply's tokens so far again, or its stored message, on reconnecting)."""
        ended = "\n" if self.mid_line and not self.json_lines else ""
        self.streaming.clear()
        self.mid_line = False
        return ended

    def _break(self) -> str:
        """A newline first when a streamed reply left the line open."""
        return "\n" if self.mid_line else ""

    def _token(self, event: dict[str, Any]) -> str:
        turn = str(event.get("turn_id"))
        prefix = "" if turn in self.streaming else self._break() + "agent> "
        self.streaming.add(turn)
        return prefix + str(event.get("delta", ""))

    def _message(self, message: dict[str, Any]) -> str:
        role, turn = str(message.get("role")), str(message.get("turn_id"))
        if role == "agent" and turn in self.streaming:
            self.streaming.discard(turn)  # its tokens were printed: end the line
            return "\n"
        if role == "user" and self.hide_user:
            return ""
        author = "" if role == "agent" else f" {message.get('author')}"
        return self._break() + f"{role}{author}> {message.get('content', '')}"

    def _move(self, move: dict[str, Any]) -> str:
        call = move.get("tool_call")
        if not isinstance(call, dict):
            return ""
        given = _clip(json.dumps(call.get("input"), sort_keys=True), TOOL_INPUT_CHARS)
        return self._break() + f"[tool {call.get('name')} {given}]"


@dataclass
class StopRule:
    """When following ends by itself: at a turn's end (``once``; only ``turn_id``'s if given),
    exit 0 when it completed, 1 when it failed. Without ``once`` it never does."""

    once: bool = False
    turn_id: str | None = None

    def outcome(self, event: dict[str, Any]) -> ExitCode | None:
        if not self.once or event.get("type") not in ("turn.completed", "turn.failed"):
            return None
        if self.turn_id is not None and event.get("turn_id") != self.turn_id:
            return None
        return ExitCode.OK if event["type"] == "turn.completed" else ExitCode.FAILURE


def refusal(exc: ConnectionClosed) -> CliError | None:
    """The error a close frame means, when it is a refusal rather than a dropped connection."""
    received = exc.rcvd
    if received is None:
        return None
    if received.code in REFUSALS:
        return CliError(received.reason or "the stream was refused", REFUSALS[received.code])
    if received.code in RETRIABLE_REFUSALS:
        return CliError(received.reason or "too many open streams", ExitCode.UNAVAILABLE)
    return None


def error_frame(event: dict[str, Any]) -> CliError:
    error = event.get("error") or {}
    code = str(error.get("code") or "ERROR")
    message = f"{error.get('message', 'the stream refused')} ({code})"
    return CliError(message, exit_code_for(0, code, bool(error.get("retriable"))))


async def follow(
    target: Target,
    conversation_id: str,
    after_seq: int,
    write: Callable[[str], None],
    printer: EventPrinter,
    stop: StopRule,
    notice: Callable[[str], None],
) -> int:
    """Print the conversation's events after ``after_seq`` and follow it live; reconnect from the
    last ``seq`` after a drop. Returns an exit code when ``stop`` says so; raises ``CliError``
    when the stream is refused or cannot be reached."""
    last, failures = after_seq, 0
    while True:
        path = f"/v1/conversations/{segment(conversation_id)}/stream?after_seq={last}"
        try:
            async with connect(
                target.websocket_url(path),
                additional_headers=target.headers(),
                proxy=None,
                open_timeout=30,
            ) as ws:
                async for raw in ws:
                    event = json.loads(raw)
                    failures = 0
                    if event.get("type") == "error":
                        raise error_frame(event)
                    if event.get("type") == "subscribed":  # live: nothing can be missed now
                        notice(f"following {conversation_id} after seq {last}; Ctrl-C stops")
                    if isinstance(event.get("seq"), int):
                        last = max(last, event["seq"])
                    write(printer.render(event))
                    ended = stop.outcome(event)
                    if ended is not None:
                        return int(ended)
        except ConnectionClosed as exc:
            refused = refusal(exc)
            if refused is not None:
                raise refused from None
            reason = f"connection closed ({exc})"
        except (OSError, InvalidStatus, TimeoutError) as exc:
            reason = f"cannot connect ({exc})"
        write(printer.interrupted())
        failures += 1
        if failures > MAX_RECONNECTS:
            raise CliError(f"gave up following {conversation_id}: {reason}", ExitCode.UNAVAILABLE)
        notice(f"{reason}; reconnecting after seq {last}")
        await asyncio.sleep(min(failures, 5))


def recent_events(api: ApiClient, conversation_id: str, count: int) -> list[dict[str, Any]]:
    """The newest ``count`` durable events (at least one: the last ``seq`` is where to go on)."""
    params = {"tail": "true", "limit": max(count, 1)}
    items: list[dict[str, Any]] = api.get(
        f"/v1/conversations/{segment(conversation_id)}/events", params
    )["items"]
    return items


def events_after(api: ApiClient, conversation_id: str, after_seq: int) -> list[dict[str, Any]]:
    """Every durable event after ``after_seq``, a page at a time."""
    found: list[dict[str, Any]] = []
    while True:
        params = {"after_seq": after_seq, "limit": 1000}
        items = api.get(f"/v1/conversations/{segment(conversation_id)}/events", params)["items"]
        found += items
        if len(items) < 1000:
            return found
        after_seq = int(items[-1]["seq"])
