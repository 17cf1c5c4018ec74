"""Building blocks of the command line: the options every command shares and a small builder
for command groups.

``--json``, ``--url``, ``--api-key`` and ``--user`` may come before the command (``wonder --json
agents list``) or after it (``wonder agents list --json``): each command repeats them with no
default of its own, so a value given before the command is not overwritten.
"""

from __future__ import annotations

import argparse
import textwrap
from typing import Any

EXIT_CODES_HELP = (
    "Exit codes: 0 ok, 1 failure, 2 usage or invalid input, 3 not found, "
    "4 refused (no key, bad key, not allowed), 5 unavailable (try again), 130 interrupted."
)


class HelpFormatter(argparse.HelpFormatter):
    """Wraps prose, keeps example lines: a line of a description or epilog that starts with two
    spaces is printed as it is."""

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        lines: list[str] = []
        for line in text.splitlines():
            if line.startswith("  ") or not line:
                lines.append(indent + line)
            else:
                lines.extend(
                    textwrap.wrap(line, width, initial_indent=indent, subsequent_indent=indent)
                )
        return "\n".join(lines)


def json_option() -> argparse.ArgumentParser:
    parent = argparse.ArgumentParser(add_help=False)
    parent.add_argument(
        "--json",
        action="store_true",
        default=argparse.SUPPRESS,
        help="machine-readable output (JSON)",
    )
    return parent


def api_options() -> argparse.ArgumentParser:
    parent = argparse.ArgumentParser(add_help=False)
    group = parent.add_argument_group("gateway")
    group.add_argument(
        "--url",
        default=argparse.SUPPRESS,
        help="gateway URL (default from WONDER_GATEWAY_HOST/PORT)",
    )
    group.add_argument(
        "--api-key",
        default=argparse.SUPPRESS,
        help="API key (default WONDER_API_KEY, then the key `wonder up` made)",
    )
    group.add_argument(
        "--user",
        default=argparse.SUPPRESS,
        help="act as this user of your app (sent as X-Wonder-User)",
    )
    return parent


JSON_OPTION = json_option()
API_OPTIONS = api_options()


class Commands:
    """One level of subcommands: ``leaf`` adds a command with a handler, ``group`` a level."""

    def __init__(self, sub: Any) -> None:
        self.sub = sub  # argparse's private _SubParsersAction

    def leaf(
        self,
        name: str,
        handler: str,
        *,
        help: str,
        description: str | None = None,
        epilog: str | None = None,
        api: bool = False,
        with_json: bool = True,
        add_help: bool = True,
    ) -> argparse.ArgumentParser:
        """A command run by ``handler`` (``"module:function"``); ``api``: it calls the gateway."""
        parents = ([JSON_OPTION] if with_json else []) + ([API_OPTIONS] if api else [])
        parser: argparse.ArgumentParser = self.sub.add_parser(
            name,
            help=help,
            description=description or help,
            epilog=f"{epilog}\n{EXIT_CODES_HELP}" if epilog else EXIT_CODES_HELP,
            parents=parents,
            add_help=add_help,
            formatter_class=HelpFormatter,
        )
        parser.set_defaults(handler=handler)
        return parser

    def group(self, name: str, *, help: str, description: str | None = None) -> Commands:
        parser = self.sub.add_parser(
            name, help=help, description=description or help, formatter_class=HelpFormatter
        )
        return Commands(
            parser.add_subparsers(dest=f"{name}_command", required=True, metavar="ACTION")
        )
