"""``wonder``'s entry point: parse the command line, run the command's handler, exit with its code.

A handler is imported when its command runs (``handlers.resolve``), so the command line itself
imports nothing heavy: ``wonder --help`` and the API commands never import Ray or vLLM.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from cluster.cli.handlers import resolve
from cluster.cli.output import CliError, ExitCode, exit_code_for, fail, use_json
from cluster.cli.parser import build_parser
from core.errors import WonderError


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = build_parser()
    # `wonder job ...` hands everything after `job` to the job command, options included.
    args, extra = parser.parse_known_args(argv)
    if args.command == "job":
        args.job_args = [*args.job_args, *extra]
    elif extra:
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    return args


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``wonder`` console script."""
    args = parse(argv)
    use_json(bool(getattr(args, "json", False)))
    if args.data_dir:
        os.environ["WONDER_DATA_DIR"] = str(Path(args.data_dir).resolve())
    try:
        return int(resolve(args.handler)(args))
    except CliError as exc:
        return fail(exc.message, exc.code)
    except WonderError as exc:  # raised by Wonder's own code run here (a store, a job)
        return fail(exc.message, exit_code_for(0, str(exc.code), exc.retriable))
    except KeyboardInterrupt:
        return int(ExitCode.INTERRUPTED)
