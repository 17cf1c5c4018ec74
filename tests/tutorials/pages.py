"""A tutorial page as steps: its shell blocks to run, the files it has you write, and the output
it promises, read from the markdown itself so that a page that stops working fails the tier.

The conventions a page follows (docs/tutorials/README.md says them to writers):

- a ```` ```bash ```` block is run, in the page's order, in one shell session per page (variables
  set in one block are there in the next);
- a ```` ```text ```` block right after a ``bash`` block is that block's expected output: each of
  its lines must appear in the output, in order; ``…`` stands for any text (ids, times, words
  the model chooses);
- ``<!-- file: PATH -->`` on the line before a block means "save this as PATH" (``~`` is your
  home): the runner writes it there;
- ``<!-- not run: REASON -->`` on the line before a block keeps the runner away from it (a
  restart of your own deployment, a command on another machine); the reason is the page's;
- ``export NAME=...`` lines with a placeholder value (``...``) are the reader's to fill in (the
  key ``make up`` printed): the runner provides those variables instead.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

FENCE = re.compile(r"^```(?P<lang>[a-z]*)\n(?P<body>.*?)^```\s*$", re.DOTALL | re.MULTILINE)
FILE_MARK = re.compile(r"<!-- file: (?P<path>\S+) -->\s*$")
NOT_RUN_MARK = re.compile(r"<!-- not run: [^>]+-->\s*$")
PLACEHOLDER = re.compile(r"^export (?P<name>[A-Z_][A-Z0-9_]*)=\S*(\.\.\.|…)\S*(\s+#.*)?$")
ANY = "…"


@dataclass(frozen=True)
class Step:
    """One thing the page has the reader do."""

    kind: str  # "run" | "file" | "skipped"
    body: str
    line: int  # where the block starts in the page (1-based), for messages
    path: str = ""  # for "file"
    expected: str | None = None  # for "run": the text block after it


def _mark_before(text: str, start: int) -> str:
    """The last non-blank line before ``start``."""
    lines = [line for line in text[:start].splitlines() if line.strip()]
    return lines[-1] if lines else ""


def steps(page: Path) -> list[Step]:
    """The page's steps, in order."""
    text = page.read_text()
    found: list[Step] = []
    fences = list(FENCE.finditer(text))
    for index, fence in enumerate(fences):
        lang, body = fence.group("lang"), fence.group("body")
        line = text.count("\n", 0, fence.start()) + 1
        mark = _mark_before(text, fence.start())
        if NOT_RUN_MARK.search(mark):
            found.append(Step("skipped", body, line))
            continue
        file_mark = FILE_MARK.search(mark)
        if file_mark is not None:
            found.append(Step("file", body, line, path=file_mark.group("path")))
            continue
        if lang != "bash":
            continue  # expected output (taken below), or an illustration
        expected = None
        after = fences[index + 1] if index + 1 < len(fences) else None
        if after is not None and after.group("lang") == "text":
            if not text[fence.end() : after.start()].strip():
                expected = after.group("body")
        found.append(Step("run", body, line, expected=expected))
    return found


def placeholders(body: str) -> tuple[str, list[str]]:
    """``body`` without its reader-filled ``export NAME=...`` lines, and those names."""
    kept, names = [], []
    for line in body.splitlines():
        match = PLACEHOLDER.match(line.strip())
        if match is not None:
            names.append(match.group("name"))
        else:
            kept.append(line)
    return "\n".join(kept) + "\n", names


def unmatched(expected: str, output: str) -> str | None:
    """The first expected line that the output lacks (in order), or None when all are there."""
    lines = output.splitlines()
    position = 0
    for wanted in (line.strip() for line in expected.splitlines()):
        if not wanted:
            continue
        pattern = re.compile(".*".join(re.escape(part) for part in wanted.split(ANY)))
        while position < len(lines) and not pattern.search(lines[position]):
            position += 1
        if position == len(lines):
            return wanted
        position += 1
    return None
