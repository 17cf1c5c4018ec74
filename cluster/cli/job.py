"""``wonder job JOB [OPTIONS]``: a batch job over the memories, as a Ray Job on the cluster
(``cluster.jobs``).

``wonder job --help`` lists the jobs; ``wonder job JOB --help`` shows where it runs (``--address``,
``--local``, ...) and the job's own options (each job module's ``add_arguments``). The command line
is checked here first, so a mistyped option fails at once rather than in the submitted job.
"""

from __future__ import annotations

import argparse
import os
from dataclasses import dataclass
from types import ModuleType

from cluster import bootstrap
from cluster.cli.options import EXIT_CODES_HELP, HelpFormatter
from cluster.jobs import main as jobs_main
from core.settings import load_settings
from jobs import compact, consolidate, embed


@dataclass(frozen=True)
class Job:
    """A batch job as ``wonder job`` shows it: the module that runs it and what it does."""

    module: ModuleType
    summary: str
    description: str


JOBS = {
    "embed": Job(
        embed,
        "embed memories that have no vector of the model (--all: every memory)",
        "Memories whose vector another model made (or none: written with embed: false) get "
        "one from the model; --all re-embeds every memory. --output URI writes a complete new "
        "memories table there instead (a model of another dimension: point WONDER_LANCE_URI at "
        "it when done). Safe while conversations write; a rerun finishes what a cut run left.",
    ),
    "consolidate": Job(
        consolidate,
        "fold old episodes into summaries, settle duplicate facts",
        "Per agent: of the facts and decisions on one subject only the newest stays current; "
        "episodes older than --min-age-hours are summarised in groups of --group-size (by "
        "--model-profile's model, else an extractive summary) and each episode's content is "
        "archived to the object store. Every step is idempotent: rerun it at any time, also "
        "while conversations write.",
    ),
    "compact": Job(
        compact,
        "LanceDB upkeep: missing indexes, compaction, old versions",
        "Creates the memories table's missing indexes (the vector index once the table has "
        "--vector-index-min-rows rows), compacts small fragments, adds new rows to every index "
        "and removes table versions older than --keep-versions-hours. Safe while conversations "
        "write.",
    ),
}


def add_submission_options(parser: argparse.ArgumentParser) -> None:
    where = parser.add_argument_group("where it runs")
    where.add_argument(
        "--address",
        help="Ray job server (default: the head `wonder up` started, else the local dashboard)",
    )
    where.add_argument("--local", action="store_true", help="run here, not as a Ray Job")
    where.add_argument("--no-wait", action="store_true", help="submit and return")
    where.add_argument(
        "--env", action="append", default=[], metavar="KEY=VALUE", help="a variable for the job"
    )
    where.add_argument("--python", help="interpreter on the cluster (default: this one locally)")


def job_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="wonder job",
        description="Batch jobs over the memories table. Each is submitted as a Ray Job to the "
        "cluster (the head `wonder up` started, or --address) with this process's WONDER_* "
        "settings, and its log is followed until it ends; --local runs it in this process.",
        epilog="`wonder job JOB --help` shows a job's options.\n" + EXIT_CODES_HELP,
        formatter_class=HelpFormatter,
    )
    sub = parser.add_subparsers(dest="job", metavar="JOB", required=True)
    for name, spec in JOBS.items():
        job = sub.add_parser(
            name,
            help=spec.summary,
            description=spec.description,
            epilog=EXIT_CODES_HELP,
            formatter_class=HelpFormatter,
        )
        spec.module.add_arguments(job)  # listed as its options
        add_submission_options(job)
    return parser


def cmd_job(args: argparse.Namespace) -> int:
    job_args = list(args.job_args)
    job_parser().parse_args(job_args)  # --help, and every mistake, before anything is submitted
    head = bootstrap.read_head(load_settings())
    if head is not None:  # the head `wonder up` started: its job server and its token
        if head.token_path:
            os.environ.setdefault("RAY_AUTH_TOKEN_PATH", head.token_path)
        if "--address" not in job_args and "--local" not in job_args:
            job_args += ["--address", f"http://127.0.0.1:{head.dashboard_port}"]
    return int(jobs_main(job_args) or 0)
