"""Paths inside a worktree: everything ``repo.*`` touches is confined to it.

A path is relative to the worktree. Absolute paths, ``..`` that climbs out, a symlink that leads
out (anywhere along the path) and the worktree's ``.git`` are refused with ``PermissionDenied``,
whose message says which rule the path broke.
"""

from __future__ import annotations

from pathlib import Path, PurePosixPath

from core.errors import InvalidInput, PermissionDenied


def confined(root: Path, relative: str) -> Path:
    """``root / relative`` once it is known to stay inside ``root`` (symlinks resolved)."""
    if "\0" in relative:
        raise InvalidInput("path contains a NUL byte")
    pure = PurePosixPath(relative or ".")
    if pure.is_absolute():
        raise PermissionDenied(f"path {relative!r} is absolute: give a path inside the worktree")
    if ".git" in pure.parts:
        raise PermissionDenied(f"path {relative!r} is inside .git: use repo.commit and repo.diff")
    base = root.resolve()
    target = (base / pure).resolve()
    if target != base and base not in target.parents:
        why = "a symlink leads" if ".." not in pure.parts else "'..' leads"
        raise PermissionDenied(f"path {relative!r} leaves the worktree ({why} outside it)")
    return target


def relative_to_root(root: Path, path: Path) -> str:
    return path.relative_to(root.resolve()).as_posix() or "."
