"""``core.library_files``: reading, validating and applying library directories."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from core.domain import Persona
from core.errors import InvalidInput
from core.library_files import apply_library, parse_object, read_library
from core.store import Store

NOW = datetime(2026, 11, 22, tzinfo=UTC)


def write(root: Path, rel: str, text: str) -> None:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


@pytest.fixture
def store(tmp_path: Path) -> Store:
    return Store.open(f"sqlite:///{tmp_path / 'wonder.db'}")


def test_id_defaults_to_the_file_name() -> None:
    persona = parse_object("personas", "personas/helper.yaml", "system_prompt: hi\n", Persona)
    assert persona.id == "helper"  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("- a\n- b\n", "expected a mapping of fields, got list"),
        ("", "expected a mapping of fields, got NoneType"),
        ("system_prompt: [\n", "personas/p.yaml:2:1: invalid YAML"),
        ("system_prompt: hi\nconstraints: {max_moves_per_turn: 0}\n", "constraints.max_moves"),
    ],
)
def test_parse_errors_name_file_and_field(text: str, fragment: str) -> None:
    with pytest.raises(InvalidInput, match=r"personas/p\.yaml") as error:
        parse_object("personas", "personas/p.yaml", text, Persona)
    assert fragment in error.value.message


def test_duplicates_and_empty_directories(tmp_path: Path, store: Store) -> None:
    models = {"personas": Persona}
    with pytest.raises(InvalidInput, match="holds no library files"):
        read_library(tmp_path, models)
    write(tmp_path, "personas/a.yaml", "id: same\nsystem_prompt: a\n")
    write(tmp_path, "personas/b.yaml", "id: same\nsystem_prompt: b\n")
    with pytest.raises(InvalidInput, match=r"also defined in personas/a\.yaml"):
        read_library(tmp_path, models)
    with pytest.raises(InvalidInput, match="is not a directory"):
        read_library(tmp_path / "missing", models)


def test_apply_versions_and_warnings(tmp_path: Path, store: Store) -> None:
    write(tmp_path, "personas/p.yaml", "system_prompt: hi\ntool_ids: [t, ghost]\n")
    write(
        tmp_path,
        "tools/t.yaml",
        "name: t\ndescription: d\ntarget_type: task\ntarget_id: missing_task\n",
    )
    report = apply_library(store, tmp_path, NOW)
    assert [(a.kind, a.id, a.version, a.changed) for a in report.applied] == [
        ("tools", "t", 1, True),
        ("personas", "p", 1, True),
    ]
    assert sorted(report.warnings) == [
        "personas/p.yaml: refers to model_profile 'local', which is not defined",
        "personas/p.yaml: refers to tool 'ghost', which is not defined",
        "tools/t.yaml: refers to task 'missing_task', which is not defined",
    ]
    write(tmp_path, "personas/p.yaml", "system_prompt: changed\n")
    again = apply_library(store, tmp_path, NOW)
    assert [(a.id, a.version, a.changed) for a in again.applied] == [
        ("t", 1, False),
        ("p", 2, True),
    ]
