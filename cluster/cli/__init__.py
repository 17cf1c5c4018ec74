"""``wonder``: run Wonder on this machine (or attach to a cluster) and talk to it.

    wonder up | down | status | doctor   run Wonder here, stop it, see what runs and what is wrong
    wonder chat AGENT_ID                 chat in the terminal, tokens streamed over the WebSocket
    wonder agents | conversations | turns | workflows | memories | projects | library ...
                                         the API's resources from the terminal (--json: its JSON)
    wonder keys | quota | library apply  operator commands that write the store directly
    wonder job JOB | model setup         batch jobs over the memories, the local model

Modules: ``entry`` (the entry point, ``main``), ``parser``, ``api_parser`` and ``options`` (the
command line, declared without importing what runs it), ``handlers`` (a command's handler,
imported when it runs), ``output`` (printing, ``--json``, exit codes), ``api_client`` (the gateway
over HTTP, error mapping), ``state`` (what ``wonder up`` remembers), one module per command group
(``up``, ``local``, ``doctor``, ``operator``, ``chat``, ``agents``, ``conversations``, ``tail``,
``turns``, ``workflows``, ``memories``, ``projects``, ``library``, ``job``, ``model``).
Settings are ``WONDER_*`` environment variables (core/settings.py); ``--data-dir`` sets
``WONDER_DATA_DIR`` for one command.
"""

from cluster.cli.entry import main

__all__ = ["main"]
