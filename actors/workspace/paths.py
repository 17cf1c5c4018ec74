"""Paths inside a worktree: everything ``repo.*`` touches is confined to it, races included.

A path is relative to the worktree. Absolute paths, ``..`` that climbs out and the worktree's
``.git`` are refused up front (``confined``) with ``PermissionDenied``, whose message says which
rule the path broke. Then the file is opened by the kernel relative to the worktree's directory
with ``openat2(RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS)``: every component, symlinks included,
is resolved inside the worktree at the moment of the open, so a symlink a sandboxed command swaps
in after the check cannot lead out (the open fails with ``EXDEV``). Where the kernel has no
``openat2`` (before Linux 5.6, or a seccomp filter forbids it), the path is walked one directory
at a time with ``O_NOFOLLOW``: no symlink is followed at all.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import functools
import os
import stat
from collections.abc import Iterator
from pathlib import Path, PurePosixPath

from core.errors import InvalidInput, NotFound, PermissionDenied

SYS_OPENAT2 = 437  # the same number on x86-64, arm64 and every architecture since 5.6
RESOLVE_NO_MAGICLINKS = 0x02
RESOLVE_BENEATH = 0x08


class OpenHow(ctypes.Structure):
    _fields_ = (("flags", ctypes.c_uint64), ("mode", ctypes.c_uint64), ("resolve", ctypes.c_uint64))


_libc = ctypes.CDLL(None, use_errno=True)


def confined(root: Path, relative: str) -> PurePosixPath:
    """``relative`` once it is a path inside ``root`` by its spelling (no absolute path, no
    ``..`` that climbs out, nothing under ``.git``); the open decides the rest."""
    if "\0" in relative:
        raise InvalidInput("path contains a NUL byte")
    pure = PurePosixPath(relative or ".")
    if pure.is_absolute():
        raise PermissionDenied(f"path {relative!r} is absolute: give a path inside the worktree")
    if ".git" in pure.parts:
        raise PermissionDenied(f"path {relative!r} is inside .git: use repo.commit and repo.diff")
    depth = 0
    for part in pure.parts:
        depth += -1 if part == ".." else 0 if part == "." else 1
        if depth < 0:
            raise PermissionDenied(f"path {relative!r} leaves the worktree ('..' leads outside it)")
    return pure


def _openat2(dir_fd: int, path: str, flags: int, mode: int) -> int:
    # openat2 is strict: a mode without O_CREAT is EINVAL.
    mode = mode if flags & os.O_CREAT else 0
    how = OpenHow(flags | os.O_CLOEXEC, mode, RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS)
    fd = int(
        _libc.syscall(
            SYS_OPENAT2,
            ctypes.c_int(dir_fd),
            ctypes.c_char_p(os.fsencode(path)),
            ctypes.byref(how),
            ctypes.c_size_t(ctypes.sizeof(how)),
        )
    )
    if fd < 0:
        code = ctypes.get_errno()
        raise OSError(code, os.strerror(code), path)
    return fd


@functools.cache
def openat2_works() -> bool:
    """Whether this kernel (and its seccomp filter, if any) lets us call ``openat2``."""
    try:
        fd = _openat2(os.open("/", os.O_PATH | os.O_CLOEXEC), ".", os.O_PATH, 0)
    except OSError as exc:
        return exc.errno not in (errno.ENOSYS, errno.EPERM)
    os.close(fd)
    return True


def walk_open(dir_fd: int, path: str, flags: int, mode: int) -> int:
    """The fallback: one directory at a time, no symlink followed."""
    parts = [p for p in PurePosixPath(path).parts if p != "."]
    current = os.dup(dir_fd)
    try:
        for part in parts[:-1]:
            step = os.open(part, os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=current)
            os.close(current)
            current = step
        last = parts[-1] if parts else "."
        return os.open(last, flags | os.O_NOFOLLOW | os.O_CLOEXEC, mode, dir_fd=current)
    finally:
        os.close(current)


def open_beneath(root_fd: int, path: PurePosixPath, flags: int, mode: int = 0o644) -> int:
    """``path`` opened relative to ``root_fd``, never resolving outside it (see the module doc).

    Raises:
        PermissionDenied: the path leads outside the worktree (a symlink, or ``..`` through one).
        NotFound: nothing is there.
    """
    text = str(path)
    try:
        if openat2_works():
            return _openat2(root_fd, text, flags, mode)
        return walk_open(root_fd, text, flags, mode)
    except OSError as exc:
        raise _refusal(exc, text) from None


def _refusal(exc: OSError, path: str) -> Exception:
    if exc.errno in (errno.EXDEV, errno.ELOOP):
        return PermissionDenied(f"path {path!r} leaves the worktree (a symlink leads outside it)")
    if exc.errno in (errno.ENOENT, errno.ENOTDIR):
        return NotFound(f"{path!r} does not exist in the worktree")
    if exc.errno == errno.EISDIR:
        return InvalidInput(f"{path!r} is a directory")
    return InvalidInput(f"{path!r} cannot be opened: {exc.strerror}")


@contextlib.contextmanager
def worktree_fd(root: Path) -> Iterator[int]:
    """The worktree's directory, held open for one operation."""
    fd = os.open(root, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        yield fd
    finally:
        os.close(fd)


def read_file(root: Path, relative: str, max_bytes: int) -> tuple[bytes, int]:
    """The first ``max_bytes`` of a regular file of the worktree, and its size."""
    path = confined(root, relative)
    with worktree_fd(root) as root_fd:
        # O_NONBLOCK: a FIFO swapped in must not hang the open (regular files ignore it).
        fd = open_beneath(root_fd, path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY)
    with os.fdopen(fd, "rb") as handle:
        info = os.fstat(handle.fileno())
        if not stat.S_ISREG(info.st_mode):
            raise NotFound(f"{relative!r} is not a file of the worktree")
        return handle.read(max_bytes), info.st_size


def _directory(root_fd: int, path: PurePosixPath, create: bool) -> int:
    """An ``O_PATH`` descriptor of the directory ``path`` (made, parents too, when ``create``)."""
    current = PurePosixPath(".")
    fd = open_beneath(root_fd, current, os.O_PATH | os.O_DIRECTORY)
    for part in path.parts:
        if part == ".":
            continue
        current = current / part
        try:
            step = open_beneath(root_fd, current, os.O_PATH | os.O_DIRECTORY)
        except NotFound:
            if not create:
                raise
            with contextlib.suppress(FileExistsError):
                os.mkdir(part, 0o755, dir_fd=fd)
            step = open_beneath(root_fd, current, os.O_PATH | os.O_DIRECTORY)
        os.close(fd)
        fd = step
    return fd


def write_file(root: Path, relative: str, data: bytes) -> None:
    """Replace (or create) a regular file of the worktree, its parents made as needed; a
    symlink in its place is refused, not followed."""
    path = confined(root, relative)
    if path.name in ("", ".", ".."):
        raise InvalidInput(f"{relative!r} is a directory")
    with worktree_fd(root) as root_fd:
        parent = _directory(root_fd, path.parent, create=True)
        try:
            flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_NONBLOCK
            fd = open_beneath(parent, PurePosixPath(path.name), flags)
        finally:
            os.close(parent)
    with os.fdopen(fd, "wb") as handle:
        if not stat.S_ISREG(os.fstat(handle.fileno()).st_mode):
            raise InvalidInput(f"{relative!r} is not a regular file")
        handle.write(data)


def list_tree(root: Path, relative: str, max_entries: int) -> tuple[list[str], bool]:
    """Files and directories under ``relative`` (directories end in ``/``; ``.git`` left out),
    walked by descriptor: a directory swapped for a symlink is never entered."""
    path = confined(root, relative)
    prefix = "" if str(path) == "." else f"{path}/"
    entries: list[str] = []
    with worktree_fd(root) as root_fd:
        start = open_beneath(root_fd, path, os.O_RDONLY | os.O_DIRECTORY)
        try:
            for folder, dirs, files, _ in os.fwalk(".", dir_fd=start):
                dirs[:] = sorted(d for d in dirs if d != ".git")
                here = "" if folder == "." else folder.removeprefix("./") + "/"
                names = [f"{prefix}{here}{d}/" for d in dirs]
                names += [f"{prefix}{here}{f}" for f in sorted(files) if f != ".git"]
                for name in names:
                    entries.append(name)
                    if len(entries) >= max_entries:
                        return entries, True
        finally:
            os.close(start)
    return entries, False
