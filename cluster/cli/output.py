"""What ``wonder`` prints and how it exits: progress lines, ``--json``, tables, exit codes.

Every command prints its result on stdout: lines for a person, or with ``--json`` one JSON
document (the API's own JSON for a read) and nothing else there; progress and errors go to
stderr in JSON mode. A failure is one line on stderr, ``wonder: <message>``, and an exit code
that says what kind of failure it was (``ExitCode``; docs/reference/cli.md lists them).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from enum import IntEnum
from typing import Any, TextIO

import yaml


class ExitCode(IntEnum):
    """The exit codes of every ``wonder`` command."""

    OK = 0
    FAILURE = 1  # anything else: a conflict, a failed turn or run, a server error, a local failure
    USAGE = 2  # the command line, or input the API refused as invalid (400, 422)
    NOT_FOUND = 3  # no such resource (404), or not one this key may see
    REFUSED = 4  # no key, a bad key (401), or not allowed (403)
    UNAVAILABLE = 5  # try again: unreachable, busy, over quota (429, 503, retriable errors)
    INTERRUPTED = 130  # Ctrl-C


class CliError(Exception):
    """A failure a command reports as one line and an exit code."""

    def __init__(self, message: str, code: ExitCode = ExitCode.FAILURE) -> None:
        super().__init__(message)
        self.message = message
        self.code = code


def exit_code_for(status: int, code: str | None = None, retriable: bool = False) -> ExitCode:
    """The exit code for an API error: its HTTP status, refined by its error code."""
    if status == 404 or code == "NOT_FOUND":
        return ExitCode.NOT_FOUND
    if status in (401, 403) or code in ("UNAUTHORIZED", "PERMISSION_DENIED"):
        return ExitCode.REFUSED
    if status in (429, 502, 503, 504) or retriable:
        return ExitCode.UNAVAILABLE
    if status in (400, 413, 415, 422) or code == "INVALID_INPUT":
        return ExitCode.USAGE
    return ExitCode.FAILURE


@dataclass
class Mode:
    """How this process prints: ``json`` is set once, from the command line, by ``entry.main``."""

    json: bool = False


MODE = Mode()


def use_json(enabled: bool) -> None:
    MODE.json = enabled


def json_mode() -> bool:
    return MODE.json


def progress_stream() -> TextIO:
    """Where progress lines go: stdout, or stderr when stdout carries JSON."""
    return sys.stderr if MODE.json else sys.stdout


def say(message: str) -> None:
    """A progress line: ``==> message``."""
    print(f"==> {message}", file=progress_stream(), flush=True)


def fail(message: str, code: int = ExitCode.FAILURE) -> int:
    """Print ``wonder: message`` on stderr; returns ``code`` for the command to exit with."""
    print(f"wonder: {message}", file=sys.stderr, flush=True)
    return int(code)


def warn(message: str) -> None:
    print(f"wonder: {message}", file=sys.stderr, flush=True)


def print_json(value: Any) -> None:
    print(json.dumps(value, indent=2, default=str), flush=True)


def print_document(value: Any) -> None:
    """A single object for a person: YAML, in the API's field order."""
    print(
        yaml.safe_dump(value, sort_keys=False, allow_unicode=True, width=100).rstrip(), flush=True
    )


def table(headers: Sequence[str], rows: Iterable[Sequence[Any]], out: TextIO | None = None) -> str:
    """Rows in aligned columns (the last column is not padded); returns the text it printed."""
    cells = [[_cell(v) for v in row] for row in rows]
    widths = [len(h) for h in headers]
    for row in cells:
        for i, value in enumerate(row[:-1]):
            widths[i] = max(widths[i], len(value))
    lines = [_line(headers, widths)] + [_line(row, widths) for row in cells]
    text = "\n".join(lines)
    print(text, file=out or sys.stdout, flush=True)
    return text


def _line(values: Sequence[str], widths: Sequence[int]) -> str:
    padded = [v.ljust(widths[i]) for i, v in enumerate(values[:-1])]
    return "  ".join([*padded, values[-1]]).rstrip()


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    text = str(value).replace("\n", " ")
    return text if len(text) <= 60 else text[:57] + "..."
