"""``repo.*``'s file access (``actors.workspace.paths``) on a real directory: symlinks inside are
followed, out are refused, by ``openat2`` and by the one-directory-at-a-time fallback."""

from __future__ import annotations

import os
from pathlib import Path, PurePosixPath

import pytest

from actors.workspace.paths import (
    list_tree,
    open_beneath,
    openat2_works,
    read_file,
    walk_open,
    worktree_fd,
    write_file,
)
from core.errors import InvalidInput, NotFound, PermissionDenied


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    root = tmp_path / "tree"
    (root / "src").mkdir(parents=True)
    (root / "src" / "app.py").write_text("print(1)\n")
    (root / "inner").symlink_to("src")  # inside: fine
    (root / "abs-inner").symlink_to(root / "src")  # absolute, even to inside: refused
    (root / "out").symlink_to(tmp_path)
    (root / "passwd").symlink_to("/etc/passwd")
    (root / "climb").symlink_to("../outside.txt")
    (tmp_path / "outside.txt").write_text("host\n")
    os.mkfifo(root / "fifo")
    return root


def test_the_kernel_resolves_beneath() -> None:
    assert openat2_works()  # Linux ≥ 5.6 here; the fallback is tested below all the same


def test_reads_follow_symlinks_only_inside(tree: Path) -> None:
    assert read_file(tree, "inner/app.py", 100) == (b"print(1)\n", 9)
    for path in ("out/outside.txt", "passwd", "climb", "abs-inner/app.py", "src/../out/x"):
        with pytest.raises(PermissionDenied, match="leaves the worktree"):
            read_file(tree, path, 100)
    for path in ("../outside.txt", "/etc/passwd", ".git/config"):
        with pytest.raises(PermissionDenied):
            read_file(tree, path, 100)
    with pytest.raises(NotFound):
        read_file(tree, "fifo", 100)  # not a file, and the open does not hang
    with pytest.raises(NotFound):
        read_file(tree, "missing", 100)


def test_writes_never_follow_a_symlink_out(tree: Path, tmp_path: Path) -> None:
    write_file(tree, "inner/new/deep.txt", b"x")
    assert (tree / "src" / "new" / "deep.txt").read_bytes() == b"x"
    for path in ("out/planted.txt", "passwd", "climb", "out/new/dir/planted.txt"):
        with pytest.raises(PermissionDenied):
            write_file(tree, path, b"planted")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["outside.txt", "tree"]
    with pytest.raises(PermissionDenied):
        write_file(tree, "inner", b"x")  # the final component is never followed
    with pytest.raises(InvalidInput):
        write_file(tree, "src", b"x")  # a directory
    with pytest.raises(InvalidInput):
        write_file(tree, "fifo", b"x")


def test_listing_never_enters_a_symlink(tree: Path) -> None:
    entries, more = list_tree(tree, "", 100)
    assert "src/app.py" in entries and "out/" in entries and not more
    assert not any(
        e.startswith(("out/", "inner/")) and e not in ("out/", "inner/") for e in entries
    )
    assert list_tree(tree, "inner", 100) == (["inner/app.py"], False)
    with pytest.raises(PermissionDenied):
        list_tree(tree, "out", 100)


def test_the_fallback_walk_follows_no_symlink(tree: Path) -> None:
    with worktree_fd(tree) as root_fd:
        fd = walk_open(root_fd, "src/app.py", os.O_RDONLY, 0)
        os.close(fd)
        for path in ("inner/app.py", "out/outside.txt", "passwd"):
            with pytest.raises(OSError):
                walk_open(root_fd, path, os.O_RDONLY, 0)
        with pytest.raises(PermissionDenied):
            open_beneath(root_fd, PurePosixPath("passwd"), os.O_RDONLY)
