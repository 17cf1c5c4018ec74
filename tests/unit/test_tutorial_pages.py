"""How the tutorial tier reads a page (tests/tutorials/pages.py): blocks to run, files to
write, blocks kept away, expected output matched in order with ``…`` as a wildcard."""

from __future__ import annotations

from pathlib import Path

from tests.tutorials.pages import placeholders, steps, unmatched

PAGE = """# A page

```bash
export WONDER_KEY=wk_...                 # the key
echo hello
```

```text
hel…
```

<!-- file: ~/tools/x.py -->
```python
print(1)
```

<!-- not run: on another machine -->
```bash
ray start --head
```

```json
{"illustration": true}
```
"""


def test_a_page_reads_as_steps(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text(PAGE)
    found = steps(page)
    assert [s.kind for s in found] == ["run", "file", "skipped"]
    run, file, skipped = found
    assert run.expected == "hel…\n" and run.line == 3
    assert file.path == "~/tools/x.py" and file.body == "print(1)\n"
    assert "ray start" in skipped.body


def test_the_readers_placeholders_are_dropped_and_named() -> None:
    body, names = placeholders("export WONDER_KEY=wk_...   # yours\nexport A=1\necho $A\n")
    assert names == ["WONDER_KEY"]
    assert body == "export A=1\necho $A\n"


def test_expected_lines_match_in_order_with_wildcards() -> None:
    output = 'turn turn_01  (completed)\nagent> It is 84.\n{"a": 1}\n'
    assert unmatched("turn turn_…  (completed)\nagent> …84…", output) is None
    assert unmatched('{"a": 1}', output) is None
    assert unmatched("agent> …84…\nturn turn_…", output) == "turn turn_…"  # order counts
    assert unmatched("agent> …85…", output) == "agent> …85…"
