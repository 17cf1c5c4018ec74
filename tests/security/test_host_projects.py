"""Projects only where the operator allows: repository sources per client, clones without the
host's credentials and off the request path, errors that name no path of the host.

The gateway is the real app served over real HTTP (uvicorn on 127.0.0.1, in this process: the
project routes need no cluster), with the operator's settings of each test. Every remote is a
server started here on 127.0.0.1.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn

from core.store import Store
from serving.gateway.app import create_api
from serving.gateway.context import GatewayContext
from tests.conftest import free_port, wait_for
from tests.unit.test_gateway_api import NoRuntime, RecordingConversations, add_client


class Gateway:
    """The gateway app on a real port, over a store in ``data_dir`` and the operator's ``env``."""

    def __init__(self, data_dir: Path, env: dict[str, str]) -> None:
        self.store = Store.open(f"sqlite:///{data_dir / 'wonder.db'}")
        context = GatewayContext(
            store=self.store,
            conversations=RecordingConversations(),
            workflows=NoRuntime(),
            memory=NoRuntime(),
            settings_env={"WONDER_DATA_DIR": str(data_dir), **env},
        )
        self.port = free_port()
        config = uvicorn.Config(
            create_api(context), host="127.0.0.1", port=self.port, log_level="warning"
        )
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def __enter__(self) -> Gateway:
        self.thread.start()
        wait_for(lambda: self.server.started, timeout=30)
        return self

    def __exit__(self, *_: object) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=30)

    def client(self, name: str = "client", timeout: float = 30) -> httpx.Client:
        key = add_client(self.store, name)
        return httpx.Client(
            base_url=f"http://127.0.0.1:{self.port}",
            headers={"Authorization": f"Bearer {key}"},
            timeout=timeout,
            trust_env=False,
        )


def git_repository(path: Path, config: dict[str, str] | None = None) -> Path:
    """A checkout with one commit on ``main`` (made with the test's own git)."""
    path.mkdir(parents=True)
    env = {**os.environ, "GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1"}
    for args in (
        ["init", "-q", "-b", "main"],
        ["-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "--allow-empty", "-m", "x"],
        *(["config", key, value] for key, value in (config or {}).items()),
    ):
        subprocess.run(["git", "-C", str(path), *args], check=True, env=env)
    return path


@pytest.fixture
def roots(tmp_path: Path) -> Path:
    allowed = tmp_path / "roots"
    allowed.mkdir()
    return allowed


def operator_env(roots: Path, **more: Any) -> dict[str, str]:
    env = {
        "WONDER_PROJECT_PATH_ROOTS": json.dumps([str(roots)]),
        "WONDER_PROJECT_URL_SCHEMES": json.dumps(["https", "file"]),
        "WONDER_PROJECT_URL_HOSTS": json.dumps(["git.example.org"]),
    }
    env.update(
        {f"WONDER_{k.upper()}": v if isinstance(v, str) else json.dumps(v) for k, v in more.items()}
    )
    return env


def settled(api: httpx.Client, response: httpx.Response) -> dict[str, Any]:
    """Where a project's creation ended: the answer itself, or (a ``202``) the project once its
    clone is over."""
    if response.status_code != 202:
        return dict(response.json())
    location = response.headers["Location"]

    def over() -> dict[str, Any] | None:
        project: dict[str, Any] = api.get(location).json()
        return project if project["status"] != "cloning" else None

    return wait_for(over, timeout=60)


def error_message(response: httpx.Response) -> str:
    return str(response.json()["error"]["message"])


def test_local_repositories_only_under_the_operators_roots(tmp_path: Path, roots: Path) -> None:
    inside = git_repository(roots / "app")
    outside = git_repository(tmp_path / "elsewhere" / "secret-repo")
    (roots / "link").symlink_to(outside)
    (roots / "nested").mkdir()
    (roots / "nested" / "up").symlink_to(tmp_path)
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    with Gateway(data_dir, operator_env(roots)) as gateway, gateway.client() as api:
        accepted = api.post("/v1/projects", json={"name": "ok", "repository": str(inside)})
        assert accepted.status_code == 201, accepted.text
        for location in (
            "/",
            "/etc",
            str(tmp_path),
            str(outside),
            str(roots / "link"),  # a symlink inside the roots to a repository outside them
            str(roots / "nested" / "up" / "elsewhere" / "secret-repo"),
            str(roots / ".." / "elsewhere" / "secret-repo"),
            str(data_dir),
            f"file://{outside}",
            f"file://{roots / 'link'}",
            "file:///",
        ):
            refused = api.post("/v1/projects", json={"name": "x", "repository": location})
            assert refused.status_code == 403, (location, refused.text)
            if "elsewhere" not in location:  # where a symlink leads is never said
                assert "elsewhere" not in error_message(refused), (location, refused.text)
        # Only repositories: a directory inside the roots that is none is a 404 naming the input.
        (roots / "plain").mkdir()
        missing = api.post("/v1/projects", json={"name": "x", "repository": str(roots / "plain")})
        assert missing.status_code == 404 and str(roots / "plain") in error_message(missing)
    # Nothing was made for the refused ones.
    assert sorted(p.name for p in (data_dir / "projects").iterdir()) == [accepted.json()["id"]]


def test_no_local_repositories_when_the_operator_names_no_roots(
    tmp_path: Path, roots: Path
) -> None:
    inside = git_repository(roots / "app")
    data_dir = tmp_path / "data"
    env = {  # the defaults, said out loud (this process may hold other settings)
        "WONDER_PROJECT_PATH_ROOTS": "[]",
        "WONDER_PROJECT_URL_SCHEMES": '["https"]',
        "WONDER_PROJECT_URL_HOSTS": "[]",
    }
    with Gateway(data_dir, env) as gateway, gateway.client() as api:
        for location in (str(inside), "/", f"file://{inside}"):
            refused = api.post("/v1/projects", json={"name": "x", "repository": location})
            assert refused.status_code == 403, (location, refused.text)
        fresh = api.post("/v1/projects", json={"name": "new"})  # a new repository is fine
        assert fresh.status_code == 201, fresh.text


def test_urls_only_over_the_operators_schemes_and_hosts(tmp_path: Path, roots: Path) -> None:
    """Every URL here names the loopback (nothing may leave the machine, even where Wonder
    would refuse it anyway); the policy allows https to git.example.org only."""
    data_dir = tmp_path / "data"
    with Gateway(data_dir, operator_env(roots)) as gateway, gateway.client() as api:
        for location in (
            "http://127.0.0.1:9/repo.git",  # scheme not allowed
            "ssh://git@127.0.0.1:9/repo.git",
            "git@localhost:repo.git",  # scp-like is ssh
            "git://127.0.0.1:9/repo.git",
            "https://127.0.0.1:9/repo.git",  # host not allowed
            "https://[::1]:9/repo.git",
            "https://localhost:9/repo.git",
        ):
            refused = api.post("/v1/projects", json={"name": "x", "repository": location})
            assert refused.status_code == 403, (location, refused.text)
        for location in (
            "https://user:hunter2@127.0.0.1:9/repo.git",  # a password would be stored
            "ext::sh -c touch% /tmp/x",
            "-uhttps://127.0.0.1:9/x",
        ):
            refused = api.post("/v1/projects", json={"name": "x", "repository": location})
            assert refused.status_code in (400, 422), (location, refused.text)
        assert not (data_dir / "projects").exists() or not any((data_dir / "projects").iterdir())


def test_a_repository_that_configures_commands_is_refused(tmp_path: Path, roots: Path) -> None:
    marker = tmp_path / "ran"
    for key in ("core.fsmonitor", "core.hooksPath", "include.path", "filter.x.clean"):
        git_repository(roots / key.replace(".", "-"), {key: f"touch {marker}"})
    with Gateway(tmp_path / "data", operator_env(roots)) as gateway, gateway.client() as api:
        for key in ("core.fsmonitor", "core.hooksPath", "include.path", "filter.x.clean"):
            location = str(roots / key.replace(".", "-"))
            refused = api.post("/v1/projects", json={"name": "x", "repository": location})
            assert refused.status_code == 403 and key.lower() in error_message(refused), key
    assert not marker.exists()


class StallingServer:
    """A TCP server on 127.0.0.1 that accepts connections and never answers (a slow remote)."""

    def __init__(self) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = int(self.listener.getsockname()[1])
        self.held: list[socket.socket] = []
        self.lock = threading.Lock()
        self.closed = False
        self.thread = threading.Thread(target=self._accept, daemon=True)
        self.thread.start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            with self.lock:
                if self.closed:
                    conn.close()
                    return
                self.held.append(conn)

    def close(self) -> None:
        with self.lock:
            self.closed = True
            for conn in self.held:
                conn.close()
        with contextlib.suppress(OSError):
            self.listener.shutdown(socket.SHUT_RDWR)  # wakes the accept
        self.listener.close()
        self.thread.join(timeout=10)


@pytest.fixture
def stalling() -> Iterator[StallingServer]:
    server = StallingServer()
    yield server
    server.close()


def test_slow_clones_do_not_stall_the_gateway(
    tmp_path: Path, roots: Path, stalling: StallingServer
) -> None:
    """Forty-five clones of a remote that never answers: each POST is a 202 at once, and every
    other route (the key check included) keeps answering while they hang."""
    url = f"http://127.0.0.1:{stalling.port}/repo.git"
    env = operator_env(
        roots,
        project_url_schemes=["http"],
        project_url_hosts=[f"127.0.0.1:{stalling.port}"],
        project_clones_per_client=100,
    )
    with Gateway(tmp_path / "data", env) as gateway, gateway.client(timeout=60) as api:
        with ThreadPoolExecutor(45) as pool:
            posts = list(
                pool.map(
                    lambda i: api.post(
                        "/v1/projects", json={"name": f"slow{i}", "repository": url}
                    ),
                    range(45),
                )
            )
        assert [p.status_code for p in posts] == [202] * 45, posts[0].text
        wait_for(lambda: len(stalling.held) >= 2, timeout=30)  # clones are hanging on it
        with gateway.client(timeout=30) as other:  # another client, meanwhile
            listed = other.get("/v1/projects")
            assert listed.status_code == 200 and listed.json()["items"] == []
            assert other.post("/v1/projects", json={"name": "fine"}).status_code == 201
        mine = api.get("/v1/projects").json()["items"]
        assert {p["status"] for p in mine} == {"cloning"}
        stalling.close()  # the remote goes away: the clones fail, one after another

        def settled() -> bool:
            return all(p["status"] == "failed" for p in api.get("/v1/projects").json()["items"])

        wait_for(settled, timeout=120, interval=0.5)
        failed = api.get(f"/v1/projects/{posts[0].json()['id']}").json()
        assert failed["error"].startswith(f"cannot clone {url}")
        errors = [p["error"] for p in api.get("/v1/projects").json()["items"]]
        assert not [e for e in errors if str(tmp_path / "data") in e], errors


def test_clones_are_limited_per_client(
    tmp_path: Path, roots: Path, stalling: StallingServer
) -> None:
    url = f"http://127.0.0.1:{stalling.port}/repo.git"
    env = operator_env(
        roots,
        project_url_schemes=["http"],
        project_url_hosts=[f"127.0.0.1:{stalling.port}"],
        project_clones_per_client=2,
    )
    with Gateway(tmp_path / "data", env) as gateway, gateway.client() as api:
        for _ in range(2):
            assert (
                api.post("/v1/projects", json={"name": "s", "repository": url}).status_code == 202
            )
        third = api.post("/v1/projects", json={"name": "s", "repository": url})
        assert third.status_code == 429 and "still cloning" in error_message(third)
        stalling.close()


class AuthAsking(threading.Thread):
    """An HTTP server on 127.0.0.1 that asks every request for credentials (a private repo)."""

    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = int(self.listener.getsockname()[1])
        self.authorizations: list[str] = []

    def run(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            with conn:
                head = conn.recv(65536).decode(errors="replace")
                self.authorizations += [
                    line for line in head.split("\r\n") if line.lower().startswith("authorization")
                ]
                conn.sendall(
                    b'HTTP/1.1 401 Unauthorized\r\nWWW-Authenticate: Basic realm="r"\r\n'
                    b"Content-Length: 0\r\nConnection: close\r\n\r\n"
                )


def test_a_clone_gets_none_of_the_hosts_credentials(
    tmp_path: Path, roots: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The gateway's user has a credential helper, an ssh agent and a ``.git-credentials``: a
    clone of a private repository never uses them (the helper never runs, no Authorization
    header reaches the server)."""
    home = tmp_path / "home"
    home.mkdir()
    marker = tmp_path / "helper-ran"
    helper = f"!f() {{ touch {marker}; echo username=host-user; echo password=host-secret; }}; f"
    (home / ".gitconfig").write_text(f'[credential]\n\thelper = "{helper}"\n')
    (home / ".git-credentials").write_text("http://host-user:host-secret@127.0.0.1\n")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("SSH_AUTH_SOCK", str(tmp_path / "agent.sock"))
    monkeypatch.delenv("GIT_CONFIG_GLOBAL", raising=False)
    server = AuthAsking()
    server.start()
    url = f"http://127.0.0.1:{server.port}/private.git"
    env = operator_env(
        roots, project_url_schemes=["http"], project_url_hosts=[f"127.0.0.1:{server.port}"]
    )
    try:
        with Gateway(tmp_path / "data", env) as gateway, gateway.client() as api:
            started = api.post("/v1/projects", json={"name": "private", "repository": url})
            done = settled(api, started)
    finally:
        server.listener.close()
    assert not marker.exists()  # the helper of the gateway's user never ran
    assert server.authorizations == []  # and no credentials reached the server
    assert started.status_code == 202, started.text
    assert done["status"] == "failed" and "host-secret" not in json.dumps(done), done
