"""The README's quick start as commands: its shell blocks, read from README.md itself, so the
newcomer tier breaks when the README and the code disagree."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
SECTION = "## Quick start"
BLOCK = re.compile(r"```bash\n(.*?)```", re.DOTALL)


@dataclass(frozen=True)
class QuickStart:
    """The quick start's shell blocks, in the README's order."""

    blocks: list[str]

    def block_with(self, text: str) -> str:
        """The one block that contains ``text``."""
        found = [block for block in self.blocks if text in block]
        assert len(found) == 1, f"README's quick start: {len(found)} blocks contain {text!r}"
        return found[0]

    def command(self, prefix: str) -> str:
        """The one command line starting with ``prefix``, its comment removed."""
        lines = [
            line.split("#", 1)[0].strip()
            for block in self.blocks
            for line in block.splitlines()
            if line.startswith(prefix)
        ]
        assert len(lines) == 1, f"README's quick start: {len(lines)} lines start with {prefix!r}"
        return lines[0]


def quick_start(readme: Path = README) -> QuickStart:
    text = readme.read_text()
    start = text.index(SECTION)
    end = text.find("\n## ", start + len(SECTION))
    return QuickStart(BLOCK.findall(text[start : end if end != -1 else None]))
