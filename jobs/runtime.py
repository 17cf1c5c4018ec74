"""What every batch job shares: its settings, its Ray connection and its progress lines.

A job runs as a Ray Job driver (``ray job submit -- python -m jobs.embed ...`` or
``wonder job embed ...``): ``RAY_ADDRESS`` is set by the job supervisor and ``connect_ray`` attaches
to that cluster. Progress goes to stdout, which is the job's log (``ray job logs``, dashboard); the
last line a job prints is one JSON object with its totals.
"""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Any

from core.settings import Settings


def job_settings() -> Settings:
    """The stores this job works on (``WONDER_*`` variables of the job's runtime environment)."""
    return Settings()


def connect_ray() -> bool:
    """Attach to the job's cluster (or start a local one for a bare ``python -m``); returns
    whether this call connected (and so should disconnect)."""
    import ray

    if ray.is_initialized():
        return False
    address = os.environ.get("RAY_ADDRESS")
    ray.init(address=address or None, namespace=job_settings().ray_namespace, log_to_driver=True)
    return True


class Progress:
    """Timestamped progress lines with a rate, flushed at once (they are the job's log)."""

    def __init__(self, job: str) -> None:
        self.job = job
        self.started = time.monotonic()

    def elapsed(self) -> float:
        return time.monotonic() - self.started

    def say(self, message: str) -> None:
        print(f"[{self.job} {self.elapsed():7.1f}s] {message}", flush=True)

    def rate(self, done: int) -> float:
        return done / max(self.elapsed(), 1e-9)


def print_result(result: dict[str, Any]) -> None:
    """The job's last line: one JSON object."""
    sys.stdout.flush()
    print(json.dumps(result, sort_keys=True, default=str), flush=True)
