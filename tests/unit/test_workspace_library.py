"""The library's workspace pieces: the developer persona's tools resolve, ``render_code_index``."""

from __future__ import annotations

from pathlib import Path

from core.ids import utc_now
from core.library_files import apply_library
from core.store import Store
from library.callables import render_code_index

LIBRARY = Path(__file__).resolve().parents[2] / "library"


def test_the_developer_persona_has_its_tools_and_the_code_index(tmp_path: Path) -> None:
    store = Store.open(f"sqlite:///{tmp_path / 'wonder.db'}")
    report = apply_library(store, LIBRARY, utc_now())
    assert report.warnings == []
    developer = store.personas.get("developer")
    assert developer.context_assembly_task_id == "code_index"
    kinds = {
        store.tasks.get(store.tools.get(tool_id).target_id).actions[0].kind
        for tool_id in developer.tool_ids
    }
    assert kinds == {
        "repo.tree",
        "repo.read",
        "repo.write",
        "repo.search",
        "repo.diff",
        "repo.commit",
        "shell.exec",
        "artifact.search",
        "artifact.read",
        "artifact.write",
    }


def test_render_code_index() -> None:
    index = {
        "available": True,
        "project_id": "proj_1",
        "branch": "wonder/conv-c1",
        "default_branch": "main",
        "files": ["src/", "src/app.py"],
        "files_truncated": True,
        "commits": [{"commit": "abc123", "subject": "Add app"}],
        "artifacts": [{"path": "design.md", "title": "Design"}],
    }
    tools = [{"name": "repo_read", "description": "Read a file."}]
    text = render_code_index({"previous": index, "input": {"tools": tools}})["system_context"]
    assert text.splitlines() == [
        "You work on branch wonder/conv-c1 of project proj_1 (merged into main only when the user "
        "asks).",
        "Files (more not shown): src/, src/app.py",
        "Recent commits:",
        "- abc123 Add app",
        "Project artifacts (read them with artifact_read):",
        "- design.md: Design",
        "Tools: repo_read: Read a file.",
    ]
    empty = render_code_index({"previous": {"available": False}, "input": {}})
    assert empty == {"system_context": ""}
