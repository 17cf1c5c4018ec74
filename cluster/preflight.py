"""Checks ``wonder up`` makes before it deploys: each failure names the setting that is wrong.

A wrong setting must fail fast with a sentence a person can act on, never hang: every check
here has its own short timeout.
"""

from __future__ import annotations

from typing import Any

import ray
from sqlalchemy import create_engine, make_url, text
from sqlalchemy.exc import ArgumentError, DBAPIError, NoSuchModuleError
from sqlalchemy.pool import NullPool

from cluster import placement
from core.settings import Settings


class SetupError(Exception):
    """The cluster or a setting cannot work as configured; the message says what to change."""


def live_nodes() -> list[placement.NodeView]:
    """The connected cluster's live nodes, as placement sees them."""
    nodes: list[dict[str, Any]] = ray.nodes()  # type: ignore[no-untyped-call]
    return [
        placement.NodeView(
            node_id=str(node["NodeID"]),
            resources=dict(node.get("Resources") or {}),
            labels=dict(node.get("Labels") or {}),
        )
        for node in nodes
        if node.get("Alive")
    ]


def check_placement(settings: Settings) -> None:
    """Raise ``SetupError`` when the nodes cannot host what the placement settings ask for."""
    problems = placement.check_nodes(settings, live_nodes())
    if problems:
        raise SetupError("the cluster cannot place Wonder's processes:\n  " + "\n  ".join(problems))


def check_database(settings: Settings, timeout_s: int = 5) -> None:
    """Raise ``SetupError`` unless ``WONDER_DATABASE_URL`` names a database that answers."""
    if not settings.database_url:
        return  # the embedded SQLite file in the data dir
    try:
        url = make_url(settings.database_url)
    except ArgumentError as exc:
        raise SetupError(
            f"WONDER_DATABASE_URL is not a database URL ({exc}); expected e.g. "
            "postgresql+psycopg2://USER:PASSWORD@HOST:5432/DB"
        ) from None
    shown = url.render_as_string(hide_password=True)
    connect_args: dict[str, Any] = {}
    if url.get_backend_name() == "postgresql":
        connect_args["connect_timeout"] = timeout_s
    try:
        engine = create_engine(url, connect_args=connect_args, poolclass=NullPool)
    except (NoSuchModuleError, ImportError) as exc:
        raise SetupError(
            f"WONDER_DATABASE_URL {shown}: no driver for '{url.drivername}' ({exc}); "
            "install the postgres extra (psycopg2) or fix the URL's scheme"
        ) from None
    try:
        with engine.connect() as conn:
            conn.execute(text("SELECT 1"))
    except DBAPIError as exc:
        reason = str(exc.orig).strip().splitlines()[0] if exc.orig else str(exc)
        raise SetupError(f"WONDER_DATABASE_URL {shown}: cannot connect: {reason}") from None
    finally:
        engine.dispose()


def _s3_settings(settings: Settings) -> list[tuple[str, str]]:
    named = [("WONDER_OBJECT_URI", settings.object_uri), ("WONDER_LANCE_URI", settings.lance_uri)]
    return [(name, uri) for name, uri in named if uri and uri.startswith("s3://")]


def check_object_store(settings: Settings, timeout_s: int = 5) -> None:
    """Raise ``SetupError`` unless every ``s3://`` location's bucket answers (short timeouts)."""
    locations = _s3_settings(settings)
    if not locations:
        return
    try:
        import botocore.session
        from botocore.config import Config
        from botocore.exceptions import BotoCoreError, ClientError
    except ImportError:
        raise SetupError(
            f"{locations[0][0]} is an s3:// URI but botocore/s3fs are not installed (memory extra)"
        ) from None
    client = botocore.session.get_session().create_client(
        "s3",
        endpoint_url=settings.s3_endpoint_url,
        config=Config(
            connect_timeout=timeout_s, read_timeout=timeout_s, retries={"max_attempts": 1}
        ),
    )
    endpoint = settings.s3_endpoint_url or "AWS S3"
    for name, uri in locations:
        bucket = uri.removeprefix("s3://").split("/", 1)[0]
        try:
            client.head_bucket(Bucket=bucket)
        except ClientError as exc:
            status = exc.response.get("Error", {}).get("Code", "")
            problem = (
                f"bucket '{bucket}' does not exist at {endpoint} (create it first)"
                if status in ("404", "NoSuchBucket", "NotFound")
                else f"bucket '{bucket}' at {endpoint} refused access ({status}): check the "
                "credentials (AWS_* variables or the instance role)"
            )
            raise SetupError(f"{name} {uri}: {problem}") from None
        except BotoCoreError as exc:
            raise SetupError(
                f"{name} {uri}: cannot reach the S3 endpoint {endpoint} "
                f"(WONDER_S3_ENDPOINT_URL): {exc}"
            ) from None
