"""A client's private repositories are cloned and pushed with the client's own secrets, never the
host's, and only where the operator allows; the secret's value never leaves git's environment.

The gateway is the real app over real HTTP (``test_host_projects.Gateway``); the origin is a real
``git http-backend`` behind a server on 127.0.0.1 that wants one ``Authorization`` header
(``tests.security.git_http``). The operator lists that loopback server for credentials over http
(the only http credentials may ever use).
"""

from __future__ import annotations

import base64
import json
import logging
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from core.client_secrets import new_key_text
from core.domain import Client
from core.git import EMPTY_TREE
from core.ids import new_id, utc_now
from core.store import Store
from tests.conftest import wait_for
from tests.security.git_http import GitHttpServer
from tests.security.test_host_projects import (
    Gateway,
    error_message,
    git_repository,
    operator_env,
    settled,
)

TOKEN_1 = "ghp-first-7d1c9e04b2-never-shown"
TOKEN_2 = "ghp-rotated-5a83f61c0d-never-shown"
WRONG = "ghp-wrong-90b4e2a7c1-never-shown"
TEST_GIT_ENV = {
    **os.environ,
    "GIT_CONFIG_GLOBAL": os.devnull,
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_AUTHOR_NAME": "t",
    "GIT_AUTHOR_EMAIL": "t@t",
    "GIT_COMMITTER_NAME": "t",
    "GIT_COMMITTER_EMAIL": "t@t",
}


def run_git_here(*args: str) -> str:
    done = subprocess.run(
        ["git", *args], check=True, capture_output=True, text=True, env=TEST_GIT_ENV
    )
    return done.stdout.strip()


def forms(value: str, username: str | None = None) -> list[str]:
    """The spellings of a secret a leak could take: itself, and its basic-auth encoding."""
    found = [value]
    if username is not None:
        found.append(base64.b64encode(f"{username}:{value}".encode()).decode())
    return found


def files_holding(directory: Path, texts: list[str]) -> list[Path]:
    """Every file under ``directory`` whose bytes hold one of ``texts``."""
    needles = [t.encode() for t in texts]
    return [
        path
        for path in directory.rglob("*")
        if path.is_file() and not path.is_symlink() and any(n in path.read_bytes() for n in needles)
    ]


@pytest.fixture
def origin(tmp_path: Path) -> Iterator[GitHttpServer]:
    """``private.git`` (one commit on main) served on 127.0.0.1, wanting ``Bearer TOKEN_1``."""
    served = tmp_path / "served"
    served.mkdir()
    source = git_repository(tmp_path / "source")
    run_git_here("clone", "-q", "--bare", str(source), str(served / "private.git"))
    with GitHttpServer(served, f"Bearer {TOKEN_1}") as server:
        yield server


def credentials_env(roots: Path, origin: GitHttpServer, **more: Any) -> dict[str, str]:
    settings: dict[str, Any] = {
        "project_url_schemes": ["https", "http"],
        "project_url_hosts": ["git.example.org", origin.host],
        "project_credential_hosts": [origin.host],
        "secrets_key": new_key_text(),
        **more,
    }
    return operator_env(roots, **settings)


@pytest.fixture
def roots(tmp_path: Path) -> Path:
    allowed = tmp_path / "roots"
    allowed.mkdir()
    return allowed


def put_secret(api: httpx.Client, name: str, value: str) -> None:
    stored = api.put(f"/v1/secrets/{name}", json={"value": value})
    assert stored.status_code == 200, stored.text


def command_lines() -> dict[int, str]:
    """Every process's argument vector (what ``ps`` shows any local user)."""
    found: dict[int, str] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                found[int(entry.name)] = (
                    (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
                )
            except OSError:
                continue
    return found


def test_a_private_repository_is_cloned_and_pushed_with_the_clients_secret(
    tmp_path: Path, roots: Path, origin: GitHttpServer, caplog: pytest.LogCaptureFixture
) -> None:
    """Clone with the secret (202, then ready), the value only ever in git's environment; a
    rotation is used by the next push; the value is in no file of the data dir, no response, no
    argument vector and no log."""
    caplog.set_level(logging.DEBUG)
    seen_lines: list[str] = []
    seen_env: list[bytes] = []

    def look_at_processes() -> None:  # while git waits for this answer
        for pid, line in command_lines().items():
            seen_lines.append(line)
            if "remote-http" in line:
                try:
                    seen_env.append((Path("/proc") / str(pid) / "environ").read_bytes())
                except OSError:
                    pass

    origin.on_request = look_at_processes
    data_dir = tmp_path / "data"
    url = origin.url("private")
    with (
        Gateway(data_dir, credentials_env(roots, origin)) as gateway,
        gateway.client() as api,
    ):
        put_secret(api, "gh-token", TOKEN_1)
        body = {"name": "private", "repository": url, "credentials": {"secret": "gh-token"}}
        started = api.post("/v1/projects", json=body)
        assert started.status_code == 202, started.text
        project = settled(api, started)
        assert project["status"] == "ready", project
        assert project["credentials"] == {
            "secret": "gh-token",
            "scheme": "bearer",
        }
        assert origin.authorizations() and set(origin.authorizations()) == {f"Bearer {TOKEN_1}"}

        # The value was in git's environment, never in any process's argument vector.
        assert any(TOKEN_1.encode() in env for env in seen_env), "no git process was seen"
        assert [line for line in seen_lines if TOKEN_1 in line] == []

        # A commit of the project's, pushed with the rotated secret.
        code = Path(project["repository"])
        tip = run_git_here(
            "--git-dir", str(code), "commit-tree", EMPTY_TREE, "-p", "main", "-m", "y"
        )
        run_git_here("--git-dir", str(code), "update-ref", "refs/heads/main", tip)
        put_secret(api, "gh-token", TOKEN_2)
        origin.authorization = f"Bearer {TOKEN_2}"
        origin.requests.clear()
        pushed = api.post(f"/v1/projects/{project['id']}/push")
        assert pushed.status_code == 200, pushed.text
        assert pushed.json()["commit"] == tip
        assert set(origin.authorizations()) == {f"Bearer {TOKEN_2}"}
        served = origin.root / "private.git"
        assert run_git_here("--git-dir", str(served), "rev-parse", "main") == tip

        texts = [
            started.text,
            pushed.text,
            api.get(f"/v1/projects/{project['id']}").text,
            api.get("/v1/projects").text,
            api.get("/v1/audit", params={"limit": 500}).text,
        ]
    for value in (TOKEN_1, TOKEN_2):
        assert not [t for t in texts if value in t]
        assert files_holding(data_dir, [value]) == []  # git's config files, the store, all
        assert value not in caplog.text
    config = (code / "config").read_text()
    assert "extraheader" not in config.lower() and "authorization" not in config.lower()


def test_basic_credentials_from_the_command_line_send_the_username_and_the_secret(
    tmp_path: Path, roots: Path, origin: GitHttpServer
) -> None:
    pair = base64.b64encode(f"deploy-bot:{TOKEN_1}".encode()).decode()
    origin.authorization = f"Basic {pair}"
    data_dir = tmp_path / "data"
    with (
        Gateway(data_dir, credentials_env(roots, origin)) as gateway,
        gateway.client() as api,
    ):
        put_secret(api, "deploy", TOKEN_1)
        key = str(api.headers["Authorization"]).split(" ", 1)[1]
        cli = [sys.executable, "-m", "cluster.cli", "--url", str(api.base_url), "--api-key", key]
        create = ["projects", "create", "p", "--repository", origin.url("private")]
        credentials = ["--secret", "deploy", "--username", "deploy-bot", "--json"]
        done = subprocess.run(
            [*cli, *create, *credentials],
            env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "PYTHONPATH": os.getcwd()},
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert done.returncode == 0, done.stderr
        created = json.loads(done.stdout)
        assert created["credentials"] == {
            "secret": "deploy",
            "scheme": "basic",
            "username": "deploy-bot",
        }
        project = wait_for(
            lambda: (
                (p := api.get(f"/v1/projects/{created['id']}").json())["status"] != "cloning" and p
            ),
            timeout=60,
        )
    assert project["status"] == "ready", project
    assert set(origin.authorizations()) == {f"Basic {pair}"}
    assert files_holding(data_dir, forms(TOKEN_1, "deploy-bot")) == []


@pytest.mark.parametrize("refusal", [401, 403])
def test_wrong_or_absent_credentials_fail_clearly_without_the_value(
    tmp_path: Path,
    roots: Path,
    origin: GitHttpServer,
    caplog: pytest.LogCaptureFixture,
    refusal: int,
) -> None:
    """The origin refuses (and echoes the header it got, which git repeats): the project fails
    with an error that says why, names the secret, and holds neither its value nor a path of the
    host."""
    caplog.set_level(logging.DEBUG)
    origin.refusal = refusal
    data_dir = tmp_path / "data"
    url = origin.url("private")
    with (
        Gateway(data_dir, credentials_env(roots, origin)) as gateway,
        gateway.client() as api,
    ):
        put_secret(api, "gh-token", WRONG)
        wrong = {"name": "w", "repository": url, "credentials": {"secret": "gh-token"}}
        refused = settled(api, api.post("/v1/projects", json=wrong))
        absent = settled(api, api.post("/v1/projects", json={"name": "a", "repository": url}))
        listed = api.get("/v1/projects").text
    assert f"Bearer {WRONG}" in origin.authorizations()  # it was sent, and refused
    assert refused["status"] == "failed" and absent["status"] == "failed"
    assert "refused the credentials of secret gh-token" in refused["error"], refused
    assert "asks for credentials" in absent["error"], absent
    for text in (refused["error"], absent["error"], listed, caplog.text):
        assert WRONG not in text
    for error in (refused["error"], absent["error"]):
        assert str(tmp_path) not in error and url in error  # the client's URL, no path of ours
    assert files_holding(data_dir, [WRONG]) == []
    if refusal == 403:  # git repeated what the server said, with the value taken out
        assert "access denied for Authorization: [secret]" in refused["error"], refused


def test_only_the_clients_own_secrets_by_a_valid_shape(
    tmp_path: Path, roots: Path, origin: GitHttpServer
) -> None:
    data_dir = tmp_path / "data"
    url = origin.url("private")
    with (
        Gateway(data_dir, credentials_env(roots, origin)) as gateway,
        gateway.client("alice") as alice,
        gateway.client("mallory") as mallory,
    ):
        put_secret(alice, "gh-token", TOKEN_1)
        for name in ("gh-token", "missing"):  # alice's is no different from none at all
            body = {"name": "x", "repository": url, "credentials": {"secret": name}}
            refused = mallory.post("/v1/projects", json=body)
            assert refused.status_code == 404, refused.text
            assert error_message(refused) == f"credentials: secret {name} not found"
        for credentials, why in (
            ({"secret": "gh-token", "scheme": "basic"}, "username"),
            ({"secret": "gh-token", "username": "u"}, "scheme"),
            ({"secret": "gh-token", "scheme": "digest"}, "scheme"),
            ({"secret": "gh-token", "value": TOKEN_1}, "value"),
            ({"secret": "../etc/passwd"}, "secret"),
            ({"secret": "gh-token", "scheme": "basic", "username": "a:b"}, "username"),
        ):
            body = {"name": "x", "repository": url, "credentials": credentials}
            invalid = alice.post("/v1/projects", json=body)
            assert invalid.status_code == 422 and why in invalid.text, (credentials, invalid.text)
        local = alice.post(
            "/v1/projects", json={"name": "x", "credentials": {"secret": "gh-token"}}
        )
        assert local.status_code == 422 and "has an origin" in error_message(local)
        assert mallory.get("/v1/projects").json()["items"] == []
        assert alice.get("/v1/projects").json()["items"] == []
    assert origin.requests == []  # nothing was cloned


def test_credentials_go_only_where_the_operator_allows(
    tmp_path: Path, roots: Path, origin: GitHttpServer
) -> None:
    """Per client, as the operator says: no credentials by default; over https only to hosts
    listed for them; over http only to a loopback address the operator names (``*`` or a name
    does not); never over ssh. A policy withdrawn after creation stops the next push before
    anything is sent. Every refusal comes before a connection (no name here is resolved)."""
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    url = origin.url("private")
    hosts = ["git.example.org", "*.example.com", origin.host]
    cases: list[tuple[list[str], str, str]] = [
        ([], "https://git.example.org/r.git", "may not send credentials to git.example.org"),
        (["*.example.com"], "https://git.example.org/r.git", "may not send credentials to"),
        ([], url, "only over https"),
        (["*"], url, "only over https"),
        (["localhost"], url, "only over https"),
        (["git.example.org", "*"], "http://git.example.org/r.git", "only over https"),
        (["git.example.org", "*"], "ssh://git@git.example.org/r.git", "only over https"),
    ]
    store = Store.open(f"sqlite:///{data_dir / 'wonder.db'}")
    clients = [new_id("client") for _ in cases]
    for client_id in clients:
        store.clients.insert(Client(id=client_id, name=client_id, created_at=utc_now()))
    policies = {
        client_id: {
            "url_schemes": ["https", "http", "ssh"],
            "url_hosts": hosts,
            "credential_hosts": credential_hosts,
        }
        for client_id, (credential_hosts, _, _) in zip(clients, cases, strict=True)
    }
    env = credentials_env(roots, origin, project_client_sources=policies)
    with Gateway(data_dir, env) as gateway:
        for client_id, (credential_hosts, location, why) in zip(clients, cases, strict=True):
            with key_of(gateway, client_id) as api:
                put_secret(api, "gh-token", TOKEN_1)
                body = {"name": "x", "repository": location, "credentials": {"secret": "gh-token"}}
                refused = api.post("/v1/projects", json=body)
                assert refused.status_code == 403, (credential_hosts, location, refused.text)
                assert why in error_message(refused), (credential_hosts, location, refused.text)
                assert api.get("/v1/projects").json()["items"] == []
        assert origin.requests == []

        # The operator's settings for every other client allow this origin.
        with gateway.client() as api:
            put_secret(api, "gh-token", TOKEN_1)
            body = {"name": "ok", "repository": url, "credentials": {"secret": "gh-token"}}
            project = settled(api, api.post("/v1/projects", json=body))
            assert project["status"] == "ready", project
    # Then the operator withdraws credentials.
    origin.requests.clear()
    withdrawn = credentials_env(roots, origin, project_credential_hosts=[])
    with Gateway(data_dir, withdrawn) as gateway, key_of(gateway, project["client_id"]) as api:
        refused = api.post(f"/v1/projects/{project['id']}/push")
    assert refused.status_code == 403, refused.text
    assert "only over https" in error_message(refused)
    assert origin.requests == []


def key_of(gateway: Gateway, client_id: str) -> httpx.Client:
    """A client of the gateway with a new key of ``client_id``."""
    key = f"wk_{new_id()}"
    gateway.store.clients.add_api_key(client_id, key, utc_now())
    return httpx.Client(
        base_url=f"http://127.0.0.1:{gateway.port}",
        headers={"Authorization": f"Bearer {key}"},
        trust_env=False,
        timeout=30,
    )


def test_a_redirect_never_carries_the_credentials(
    tmp_path: Path, roots: Path, origin: GitHttpServer
) -> None:
    """The origin answers a redirect to another server: git does not follow it (not on a clone,
    not on a push), so the other server never hears from it, let alone gets the header."""
    elsewhere_root = tmp_path / "elsewhere"
    elsewhere_root.mkdir()
    data_dir = tmp_path / "data"
    url = origin.url("private")
    with (
        GitHttpServer(elsewhere_root, None) as elsewhere,
        Gateway(data_dir, credentials_env(roots, origin)) as gateway,
        gateway.client() as api,
    ):
        put_secret(api, "gh-token", TOKEN_1)
        body = {"name": "x", "repository": url, "credentials": {"secret": "gh-token"}}
        ready = settled(api, api.post("/v1/projects", json=body))
        assert ready["status"] == "ready", ready
        origin.redirect_to = f"http://{elsewhere.host}"
        redirected = settled(api, api.post("/v1/projects", json=body))
        pushed = api.post(f"/v1/projects/{ready['id']}/push")
        assert elsewhere.requests == []
    assert redirected["status"] == "failed" and "302" in redirected["error"], redirected
    assert pushed.status_code == 503 and TOKEN_1 not in pushed.text, pushed.text


def test_a_secret_gone_after_creation_fails_the_push_by_name(
    tmp_path: Path, roots: Path, origin: GitHttpServer
) -> None:
    data_dir = tmp_path / "data"
    with (
        Gateway(data_dir, credentials_env(roots, origin)) as gateway,
        gateway.client() as api,
    ):
        put_secret(api, "gh-token", TOKEN_1)
        body = {
            "name": "x",
            "repository": origin.url("private"),
            "credentials": {"secret": "gh-token"},
        }
        project = settled(api, api.post("/v1/projects", json=body))
        assert api.delete("/v1/secrets/gh-token").status_code == 204
        origin.requests.clear()
        pushed = api.post(f"/v1/projects/{project['id']}/push")
        assert pushed.status_code == 409, pushed.text
        assert "secret gh-token not found" in error_message(pushed)
        # Credentials can be dropped or replaced (checked like at creation).
        put_secret(api, "other", TOKEN_1)
        path = f"/v1/projects/{project['id']}"
        swapped = api.patch(path, json={"credentials": {"secret": "other"}})
        assert swapped.status_code == 200 and swapped.json()["credentials"]["secret"] == "other"
        unknown = api.patch(path, json={"credentials": {"secret": "nope"}})
        assert unknown.status_code == 404, unknown.text
        assert api.post(f"{path}/push").status_code == 200  # "other" holds the right value
        dropped = api.patch(path, json={"credentials": None})
        assert dropped.status_code == 200 and dropped.json()["credentials"] is None
        origin.requests.clear()
        refused = api.post(f"{path}/push")
        assert refused.status_code == 503 and "asks for credentials" in error_message(refused)
        assert origin.authorizations() == [None]
