"""A real PostgreSQL server for tests: ``cluster.local_services`` (Debian's binaries, a temp data
dir, 127.0.0.1, a free port), re-exported for the tests that import it from here.

``start_postgres()`` runs ``initdb`` and ``pg_ctl start`` (as the ``postgres`` user when the tests
run as root: the server refuses to run as root); ``PostgresServer.create_database()`` makes a fresh
database per test; ``halt()``/``start()`` take the server away and bring it back with its data;
``stop()`` stops it and removes the data dir.
"""

from __future__ import annotations

from cluster.local_services import PostgresServer, postgres_bin_dir, start_postgres

__all__ = ["PostgresServer", "postgres_bin_dir", "start_postgres"]
