"""``wonder chat AGENT_ID``: a conversation in the terminal, the reply streamed token by token
over the conversation's WebSocket (reconnecting with the last ``seq`` it saw).
``wonder chat --conversation ID`` resumes one, its last turns printed first."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections.abc import AsyncIterable, Callable
from dataclasses import dataclass
from typing import Any, TextIO

import httpx
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed, InvalidStatus

from cluster.cli.api_client import USER_HEADER, error_of, target_of, unreachable
from cluster.cli.output import ExitCode, fail, json_mode


class TerminalChat:
    """A conversation in the terminal: one line in, the agent's reply streamed out."""

    def __init__(
        self,
        url: str,
        key: str,
        read_line: Callable[[], str | None],
        out: TextIO,
        user: str | None = None,
    ) -> None:
        self.url = url.rstrip("/")
        self.headers = {"Authorization": f"Bearer {key}"}
        if user is not None:
            self.headers[USER_HEADER] = user
        self.read_line = read_line
        self.out = out
        self.last_seq = 0
        self.json_lines = False  # --json: each frame of the turn as one JSON line

    def write(self, text: str) -> None:
        self.out.write(text)
        self.out.flush()

    async def run(self, agent_id: str | None, conversation_id: str | None = None) -> int:
        """Chat in a new conversation with ``agent_id``, or resume ``conversation_id`` (its
        last ``RESUME_TURNS`` turns printed first)."""
        try:
            async with httpx.AsyncClient(
                base_url=self.url, headers=self.headers, timeout=30, trust_env=False
            ) as http:
                if conversation_id is not None:
                    response = await http.get(f"/v1/conversations/{conversation_id}")
                    if response.status_code == 200:
                        await self.resume(http, conversation_id)
                else:
                    response = await http.post("/v1/conversations", json={"agent_id": agent_id})
        except httpx.TransportError as exc:
            error = unreachable(self.url, exc)
            return fail(error.message, error.code)
        if response.status_code not in (200, 201):
            error = error_of(response.status_code, _json_or_none(response))
            doing = "resume the conversation" if conversation_id else "start a conversation"
            return fail(f"could not {doing}: {error.message}", error.code)
        conversation_id = str(response.json()["id"])
        if self.json_lines:
            self.write(json.dumps(response.json()) + "\n")
        else:
            self.write(f"conversation {conversation_id} (empty line or Ctrl-D to quit)\n")
        while True:
            line = await asyncio.to_thread(self.read_line)
            if line is None or not line.strip() or line.strip() in ("/quit", "/exit"):
                return 0
            await self.exchange(conversation_id, line.strip())

    async def resume(self, http: httpx.AsyncClient, conversation_id: str) -> None:
        """Print the conversation's last turns; the stream follows from its latest event."""
        base = f"/v1/conversations/{conversation_id}"
        window: dict[str, str | int] = {"tail": "true", "limit": RESUME_MESSAGES}
        messages = await http.get(f"{base}/messages", params=window)
        events = await http.get(f"{base}/events", params={"tail": "true", "limit": 1})
        if events.status_code == 200 and events.json()["items"]:
            self.last_seq = int(events.json()["items"][-1]["seq"])
        if messages.status_code != 200:
            return
        for message in last_turns(messages.json()["items"], RESUME_TURNS):
            if self.json_lines:
                self.write(json.dumps(message) + "\n")
            else:
                who = "you" if message["role"] == "user" else "agent"
                self.write(f"{who}> {message.get('content', '')}\n")

    async def exchange(self, conversation_id: str, content: str) -> None:
        """Send one message and print the reply; on a dropped socket, resume from the last seq."""
        ws_base = self.url.replace("http://", "ws://", 1).replace("https://", "wss://", 1)
        frame: dict[str, Any] | None = {"type": "message", "content": content}
        reply = Reply()
        for _attempt in range(5):
            url = f"{ws_base}/v1/conversations/{conversation_id}/stream?after_seq={self.last_seq}"
            try:
                async with connect(url, additional_headers=self.headers, proxy=None) as ws:
                    if frame is not None:
                        await ws.send(json.dumps(frame))
                        frame = None
                    if await self.print_reply(ws, reply):
                        return
            except (ConnectionClosed, OSError, InvalidStatus) as exc:
                self.write(f"\n[connection lost ({exc}); reconnecting]\n")
                await asyncio.sleep(1)
        self.write("\n[gave up reconnecting]\n")

    async def print_reply(self, ws: AsyncIterable[str | bytes], reply: Reply) -> bool:
        """Print frames of our turn until it ends; True when it did (or the server refused).

        The ack (which names our turn) can arrive after the turn's first events, so events of
        turns not yet known are held until it does.
        """
        held: list[dict[str, Any]] = []
        async for raw in ws:
            event = json.loads(raw)
            if event.get("seq") is not None:
                self.last_seq = max(self.last_seq, int(event["seq"]))
            kind = event.get("type")
            if kind == "error":
                self.write(
                    json.dumps(event) + "\n"
                    if self.json_lines
                    else f"[error: {event['error']['message']}]\n"
                )
                return True
            if kind == "ack":
                reply.turn_id = event.get("turn_id")
                self.write(json.dumps(event) + "\n" if self.json_lines else "agent> ")
                events, held = [e for e in held if turn_of(e) == reply.turn_id], []
            elif reply.turn_id is None:
                held.append(event)
                continue
            else:
                events = [event] if turn_of(event) == reply.turn_id else []
            if any(self._show(e, reply) for e in events):
                return True
        return False

    def _show(self, event: dict[str, Any], reply: Reply) -> bool:
        """Print one event of our turn; True when the turn has ended.

        An agent message whose tokens this stream never saw (the turn streamed them before the
        stream subscribed: a short reply to a message sent on connecting) is printed whole from
        its stored event."""
        kind = event.get("type")
        if self.json_lines:
            self.write(json.dumps(event) + "\n")
            return kind in ("turn.completed", "turn.failed")
        if kind == "token":
            self.write(str(event.get("delta", "")))
            reply.tokens_seen = True
        elif kind == "message" and (message := event.get("message") or {}).get("role") == "agent":
            if not reply.tokens_seen:
                self.write(str(message.get("content") or ""))
            reply.tokens_seen = False  # the next agent message's tokens are still to come
        elif kind == "turn.completed":
            self.write("\n")
            return True
        elif kind == "turn.failed":
            self.write(f"\n[the turn failed: {event.get('reason', 'unknown')}]\n")
            return True
        return False


RESUME_TURNS = 5
RESUME_MESSAGES = 200


def last_turns(messages: list[dict[str, Any]], turns: int) -> list[dict[str, Any]]:
    """The user and agent messages of the last ``turns`` turns of ``messages``, oldest first."""
    order = list(dict.fromkeys(str(m.get("turn_id")) for m in messages))
    kept = set(order[-turns:]) if turns > 0 else set()
    return [
        m for m in messages if str(m.get("turn_id")) in kept and m.get("role") in ("user", "agent")
    ]


@dataclass
class Reply:
    """What one exchange has seen of its turn: its id (from the ack), and whether tokens came
    since the turn's last agent message."""

    turn_id: str | None = None
    tokens_seen: bool = False


def turn_of(event: dict[str, Any]) -> str | None:
    """The turn an event belongs to (a message event names it in its message)."""
    turn_id = event.get("turn_id")
    if turn_id is None and isinstance(event.get("message"), dict):
        turn_id = event["message"].get("turn_id")
    return None if turn_id is None else str(turn_id)


def _json_or_none(response: httpx.Response) -> Any:
    try:
        return response.json()
    except ValueError:
        return None


def _stdin_line() -> str | None:
    try:
        return input("you> ")
    except EOFError:
        return None


def _bare_stdin_line() -> str | None:
    """A line without a prompt (stdout carries JSON)."""
    line = sys.stdin.readline()
    return line or None


def cmd_chat(args: argparse.Namespace) -> int:
    if (args.agent_id is None) == (args.conversation is None):
        return fail(
            "give an AGENT_ID to start a conversation, or --conversation ID to resume one",
            ExitCode.USAGE,
        )
    target = target_of(args)
    read_line = _bare_stdin_line if json_mode() else _stdin_line
    chat = TerminalChat(target.url, target.key, read_line, sys.stdout, user=target.user)
    chat.json_lines = json_mode()
    try:
        return asyncio.run(chat.run(args.agent_id, args.conversation))
    except KeyboardInterrupt:
        return int(ExitCode.INTERRUPTED)
