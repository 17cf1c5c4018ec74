"""``wonder job embed|consolidate|compact [ARGS...]``: submit a memory batch job as a Ray Job.

``main(argv)`` is what the ``wonder`` CLI calls. By default it submits ``python -m cluster.jobs
<name> --local ARGS`` (the job's driver runs it, wired here) to the cluster's job server
(``--address``, default the local dashboard from settings), passing this process's ``WONDER_*``
settings (and any ``--env KEY=VALUE``) in the job's runtime environment, then follows the job's
log until it ends; ``--no-wait`` returns after submitting. ``--local`` runs the job in this process
instead (no Ray Job; useful on a laptop).
"""

from __future__ import annotations

import argparse
import asyncio
import shlex
import sys
import time
from typing import Any
from urllib.parse import urlparse

from cluster.memory_access import ServedEmbedders
from cluster.models import ServedChatModels
from core.settings import Settings, settings_from_env
from jobs import compact, consolidate, embed

JOBS = ("embed", "consolidate", "compact")
TERMINAL = {"SUCCEEDED", "FAILED", "STOPPED"}
SUBMIT_PATIENCE_S = 60.0


def entrypoint(job: str, args: list[str], python: str) -> str:
    command = [shlex.quote(python), "-m", "cluster.jobs", job, "--local"]
    return " ".join([*command, *(shlex.quote(a) for a in args)])


def consolidation_ports(settings_env: dict[str, str]) -> consolidate.ConsolidationPorts:
    """What consolidation uses in each process that runs it (travels by reference)."""
    return consolidate.ConsolidationPorts(
        chat_models=ServedChatModels(settings_from_env(settings_env)),
        embedders=ServedEmbedders(settings_env),
    )


def run_here(job: str, args: list[str]) -> int:
    """Run ``job`` in this process (a Ray Job's driver, or ``--local``)."""
    match job:
        case "embed":
            return embed.main(args, ServedEmbedders(Settings().env()))
        case "consolidate":
            return consolidate.main(args, consolidation_ports)
        case "compact":
            return compact.main(args)
        case _:
            raise SystemExit(f"unknown job {job!r}; known: {', '.join(JOBS)}")


def default_python(address: str) -> str:
    """This interpreter for a cluster on this machine (same venv); ``python`` elsewhere."""
    host = urlparse(address).hostname or ""
    return sys.executable if host in ("127.0.0.1", "localhost", "::1") else "python"


def runtime_env(settings: Settings, extra: list[str]) -> dict[str, Any]:
    env = settings.env()
    for item in extra:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise SystemExit(f"--env takes KEY=VALUE, got {item!r}")
        env[key] = value
    return {"env_vars": env}


def submit(
    address: str, job: str, args: list[str], env: dict[str, Any], python: str | None = None
) -> str:
    """Submit one job; returns its submission id."""
    from ray.job_submission import JobSubmissionClient

    client = JobSubmissionClient(address)
    command = entrypoint(job, args, python or default_python(address))
    deadline = time.monotonic() + SUBMIT_PATIENCE_S
    while True:
        try:
            return str(client.submit_job(entrypoint=command, runtime_env=env))
        except RuntimeError as exc:
            # A freshly started head answers 500 until its job agent is up: "try again later".
            if "try again later" not in str(exc) or time.monotonic() > deadline:
                raise
            time.sleep(1.0)


async def follow(address: str, submission_id: str) -> str:
    """Print the job's log as it grows; returns its final status."""
    from ray.job_submission import JobSubmissionClient

    client = JobSubmissionClient(address)
    async for lines in client.tail_job_logs(submission_id):
        print(lines, end="", flush=True)
    status = str(client.get_job_status(submission_id))
    while status.split(".")[-1] not in TERMINAL:
        await asyncio.sleep(0.5)
        status = str(client.get_job_status(submission_id))
    return status.split(".")[-1]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="wonder job", description=__doc__)
    parser.add_argument("job", choices=JOBS)
    parser.add_argument("--address", help="Ray job server (default: the local dashboard)")
    parser.add_argument("--local", action="store_true", help="run here, not as a Ray Job")
    parser.add_argument("--no-wait", action="store_true", help="submit and return")
    parser.add_argument("--env", action="append", default=[], help="KEY=VALUE for the job")
    parser.add_argument("--python", help="interpreter on the cluster (default: see docs)")
    options, job_args = parser.parse_known_args(argv)
    if options.local:
        return run_here(options.job, job_args)
    settings = Settings()
    address = options.address or f"http://127.0.0.1:{settings.dashboard_port}"
    submission_id = submit(
        address, options.job, job_args, runtime_env(settings, options.env), options.python
    )
    print(f"submitted {options.job} as {submission_id} to {address}", flush=True)
    if options.no_wait:
        return 0
    status = asyncio.run(follow(address, submission_id))
    print(f"{submission_id}: {status}", flush=True)
    return 0 if status == "SUCCEEDED" else 1


if __name__ == "__main__":
    raise SystemExit(main())
