"""The console's pure functions (line diffs of library versions, threads nested by the turn each
replies to, a trace's waterfall rows), run under Node (Debian's nodejs, a system package) as the
browser would run the modules the gateway serves."""

from __future__ import annotations

import json
import subprocess
from typing import Any

from serving.gateway.console import ASSETS

SCRIPT = """
globalThis.localStorage = { getItem: () => null, setItem() {}, removeItem() {} };
const diff = await import(process.argv[1]);
const conversation = await import(process.argv[2]);
const turn = await import(process.argv[3]);
const callTools = await import(process.argv[4]);
const turns = [
  { id: "t1", parent_turn_id: null }, { id: "t2", parent_turn_id: "t1" },
  { id: "t3", parent_turn_id: "t1" }, { id: "t4", parent_turn_id: "elsewhere" },
];
const tree = conversation.threadTree(turns);
const spans = { name: "root", children: [{ name: "a", children: [{ name: "b" }] }, { name: "c" }] };
console.log(JSON.stringify({
  diff: diff.lineDiff("a\\nb\\nc", "a\\nc\\nd"),
  same: diff.lineDiff("x", "x"),
  threads: Object.fromEntries([...tree.entries()].map(([k, v]) => [String(k), v.map((t) => t.id)])),
  waterfall: turn.flattenSpans(spans).map((r) => [r.span.name, r.depth]),
  counted: [
    callTools.countedBy({ counted_by: "tokenizer", tokenizer: "smol", total_tokens: 42 }),
    callTools.countedBy({ counted_by: "estimate", count_note: "an openai model",
      total_tokens: 40 }),
  ],
}));
"""


def run_console_logic() -> dict[str, Any]:
    modules = [
        ASSETS[name].as_uri()
        for name in ("diff.js", "views/conversation.js", "views/turn.js", "views/call_tools.js")
    ]
    done = subprocess.run(
        ["node", "--input-type=module", "-e", SCRIPT, *modules],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    result: dict[str, Any] = json.loads(done.stdout)
    return result


def test_the_consoles_pure_functions() -> None:
    result = run_console_logic()
    assert result["diff"] == [[" ", "a"], ["-", "b"], [" ", "c"], ["+", "d"]]
    assert result["same"] == [[" ", "x"]]
    # A turn whose parent is not among the conversation's turns starts a thread of its own.
    assert result["threads"] == {"null": ["t1", "t4"], "t1": ["t2", "t3"]}
    assert result["waterfall"] == [["root", 0], ["a", 1], ["b", 2], ["c", 1]]
    # A context window counted by the model's tokenizer says so, an estimate says why.
    exact, estimated = result["counted"]
    assert exact == {
        "exact": True,
        "text": "42 tokens, counted by the tokenizer and chat template of smol. ",
    }
    assert estimated["exact"] is False and "estimated" in estimated["text"]
    assert estimated["text"].startswith("≈ 40 tokens") and "an openai model" in estimated["text"]
