"""The object store: large memory contents and archived episodes, keyed ``<agent_id>/<memory_id>``.

Two implementations behind one protocol: a local directory (the embedded default) and S3 through
s3fs (clusters; any S3-compatible endpoint via ``endpoint_url``). Writes are whole-object puts, so a
reader never sees half an object.
"""

from __future__ import annotations

import os
import re
import tempfile
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from core.errors import InvalidInput, NotFound, RetryableError

_KEY = re.compile(r"^[A-Za-z0-9_.:-]+(/[A-Za-z0-9_.:-]+)*$")


def object_key(agent_id: str, memory_id: str) -> str:
    """Where a memory's content lives in the object store."""
    return f"{agent_id}/{memory_id}"


def _checked(key: str) -> str:
    if not _KEY.match(key) or ".." in key.split("/"):
        raise InvalidInput(f"invalid object key {key!r}")
    return key


@runtime_checkable
class ObjectStore(Protocol):
    """Whole-object get/put/delete by key."""

    def put(self, key: str, data: bytes) -> None: ...

    def get(self, key: str) -> bytes: ...

    def exists(self, key: str) -> bool: ...

    def delete(self, key: str) -> None: ...


class LocalObjectStore:
    """Objects as files under ``root`` (written to a temp file, then renamed: atomic)."""

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)

    def _path(self, key: str) -> Path:
        return self.root / _checked(key)

    def put(self, key: str, data: bytes) -> None:
        path = self._path(key)
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
        try:
            with os.fdopen(fd, "wb") as handle:
                handle.write(data)
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise

    def get(self, key: str) -> bytes:
        try:
            return self._path(key).read_bytes()
        except FileNotFoundError:
            raise NotFound(f"object {key} not found") from None

    def exists(self, key: str) -> bool:
        return self._path(key).is_file()

    def delete(self, key: str) -> None:
        self._path(key).unlink(missing_ok=True)


class S3ObjectStore:
    """Objects in ``s3://bucket/prefix`` through s3fs (credentials from the usual AWS variables)."""

    def __init__(self, uri: str, endpoint_url: str | None = None) -> None:
        import s3fs

        if not uri.startswith("s3://"):
            raise InvalidInput(f"S3ObjectStore needs an s3:// URI, got {uri!r}")
        self.prefix = uri.removeprefix("s3://").rstrip("/")
        # No region in client_kwargs: s3fs's mkdir sends a LocationConstraint that S3-compatible
        # servers (moto) reject for us-east-1.
        # No listings cache: another process may have written the key since we last looked.
        kwargs: dict[str, Any] = {"use_listings_cache": False}
        if endpoint_url:
            kwargs["endpoint_url"] = endpoint_url
        self.fs: Any = s3fs.S3FileSystem(**kwargs)
        bucket = self.prefix.split("/", 1)[0]
        if not self.fs.exists(bucket):
            try:
                self.fs.mkdir(bucket)
            except FileExistsError:
                pass  # another process created it first

    def _path(self, key: str) -> str:
        return f"{self.prefix}/{_checked(key)}"

    def put(self, key: str, data: bytes) -> None:
        try:
            self.fs.pipe_file(self._path(key), data)
        except OSError as exc:
            raise RetryableError(f"object store put {key} failed: {exc}") from exc

    def get(self, key: str) -> bytes:
        try:
            return bytes(self.fs.cat_file(self._path(key)))
        except FileNotFoundError:
            raise NotFound(f"object {key} not found") from None
        except OSError as exc:
            raise RetryableError(f"object store get {key} failed: {exc}") from exc

    def exists(self, key: str) -> bool:
        return bool(self.fs.exists(self._path(key)))

    def delete(self, key: str) -> None:
        try:
            self.fs.rm_file(self._path(key))
        except FileNotFoundError:
            pass


def open_object_store(uri: str, endpoint_url: str | None = None) -> ObjectStore:
    """The object store at ``uri``: ``s3://bucket/prefix`` or a local directory."""
    if uri.startswith("s3://"):
        return S3ObjectStore(uri, endpoint_url)
    return LocalObjectStore(uri.removeprefix("file://"))
