"""Where projects may come from, and how git runs on the host (pure rules, plus the builder of
git's arguments and environment)."""

from __future__ import annotations

import os
from datetime import timedelta
from pathlib import Path

import pytest

from core.domain import Project
from core.errors import InvalidInput, PermissionDenied
from core.git import RemoteAccess, git_invocation, unsafe_config_keys
from core.ids import utc_now
from core.project_clones import redact
from core.project_sources import (
    address_problem,
    check_local,
    check_remote,
    needs_public_address,
    parse_remote,
    sources_for,
)
from core.projects import project_view
from core.settings import ProjectSources, Settings

SOURCES = ProjectSources(
    path_roots=[], url_schemes=["https", "ssh"], url_hosts=["github.com", "*.corp.example:8443"]
)


@pytest.mark.parametrize(
    ("location", "scheme", "host", "port"),
    [
        ("https://github.com/a/b.git", "https", "github.com", None),
        ("https://GitHub.com:443/a/b.git", "https", "github.com", 443),
        ("git@github.com:a/b.git", "ssh", "github.com", None),
        ("ssh://git@github.com/a/b.git", "ssh", "github.com", None),
        ("file:///srv/repos/a", "file", "", None),
        ("file://localhost/srv/repos/a", "file", "", None),
    ],
)
def test_remote_locations(location: str, scheme: str, host: str, port: int | None) -> None:
    source = parse_remote(location)
    assert (source.scheme, source.host, source.port) == (scheme, host, port)


@pytest.mark.parametrize(
    "location",
    [
        "https://user:token@github.com/a/b.git",  # a password would be stored
        "https://github.com:99999/a.git",
        "https:///a.git",
        "file://otherhost/srv/a",
        "git@-oProxyCommand=x:a.git",
        "ssh://-oProxyCommand=x/a.git",
    ],
)
def test_remote_locations_refused(location: str) -> None:
    with pytest.raises(InvalidInput):
        parse_remote(location)


@pytest.mark.parametrize(
    ("location", "allowed"),
    [
        ("https://github.com/a/b.git", True),
        ("git@github.com:a/b.git", True),
        ("https://github.com.evil.test/a.git", False),
        ("https://evilgithub.com/a.git", False),
        ("http://github.com/a/b.git", False),  # scheme
        ("git://github.com/a/b.git", False),
        ("https://git.corp.example:8443/a.git", True),
        ("https://git.corp.example/a.git", False),  # pinned port
        ("https://corp.example:8443/a.git", False),  # *.domain: under it, not itself
    ],
)
def test_urls_against_the_operators_policy(location: str, allowed: bool) -> None:
    source = parse_remote(location)
    if allowed:
        check_remote(SOURCES, source)
    else:
        with pytest.raises(PermissionDenied):
            check_remote(SOURCES, source)


def test_any_host_must_be_public() -> None:
    anywhere = SOURCES.model_copy(update={"url_hosts": ["github.com", "*"]})
    assert not needs_public_address(anywhere, parse_remote("https://github.com/a.git"))
    assert needs_public_address(anywhere, parse_remote("https://gitlab.example/a.git"))
    assert address_problem("gitlab.example", ["140.82.121.4"]) is None
    assert "loopback" in (address_problem("gitlab.example", ["127.0.0.1"]) or "")
    assert "private" in (address_problem("10.0.0.7", []) or "")


def test_local_paths_against_the_roots(tmp_path: Path) -> None:
    roots = SOURCES.model_copy(update={"path_roots": [str(tmp_path / "repos")]})
    data = tmp_path / "data"
    check_local(roots, "x", tmp_path / "repos" / "a", [data])
    for resolved in (tmp_path / "elsewhere", Path("/"), Path("/etc"), tmp_path, data / "p"):
        with pytest.raises(PermissionDenied) as refused:
            check_local(roots, "the-input", resolved, [data])
        assert str(resolved) not in refused.value.message or resolved == Path("/")
    with pytest.raises(PermissionDenied, match="not allowed for this client"):
        check_local(SOURCES, "x", tmp_path / "repos" / "a", [data])  # no roots: no local paths


def test_sources_per_client() -> None:
    settings = Settings(  # type: ignore[call-arg]
        project_url_hosts=["github.com"],
        project_client_sources={"trusted": {"url_hosts": ["*"], "url_schemes": ["https", "ssh"]}},
    )
    assert sources_for(settings, "anyone").url_hosts == ["github.com"]
    assert sources_for(settings, "trusted").url_schemes == ["https", "ssh"]
    with pytest.raises(ValueError, match="unknown URL schemes"):
        Settings(project_url_schemes=["ext"])  # type: ignore[call-arg]


def test_a_clone_that_should_have_ended_reads_as_failed() -> None:
    now = utc_now()
    project = Project(
        id="p",
        client_id="c",
        name="n",
        repository="/r",
        artifacts_repository="/a",
        created_at=now,
        status="cloning",
    )
    assert project_view(project, now + timedelta(seconds=10), 600).status == "cloning"
    late = project_view(project, now + timedelta(seconds=3600), 600)
    assert late.status == "failed" and "did not finish" in (late.error or "")


def test_errors_are_redacted_of_wonders_paths(tmp_path: Path) -> None:
    data = tmp_path / "data"
    text = f"fatal: could not create work tree dir '{data}/projects/p/code.git'"
    assert str(data) not in redact(text, [data]) and "/projects/p/code.git" in redact(text, [data])


@pytest.mark.parametrize(
    ("names", "unsafe"),
    [
        (["core.bare", "core.repositoryformatversion", "remote.origin.url"], []),
        (["core.fsmonitor"], ["core.fsmonitor"]),
        (["core.hooksPath", "include.path"], ["core.hooksPath", "include.path"]),
        (["includeIf.gitdir:/x/.path"], ["includeIf.gitdir:/x/.path"]),
        (["filter.lfs.clean", "filter.lfs.required"], ["filter.lfs.clean"]),
        (["diff.pdf.textconv", "diff.external"], ["diff.external", "diff.pdf.textconv"]),
        (["credential.https://x.helper", "url.https://evil/.insteadOf"], None),
        (["remote.origin.uploadpack", "core.sshCommand", "gpg.program"], None),
    ],
)
def test_repository_configuration_that_runs_or_redirects(
    names: list[str], unsafe: list[str] | None
) -> None:
    found = unsafe_config_keys(names)
    assert found == (unsafe if unsafe is not None else sorted(names))


def test_git_runs_with_its_places_named_and_nothing_of_the_hosts(tmp_path: Path) -> None:
    call = git_invocation(
        ("status",), cwd=tmp_path, git_dir=tmp_path / "g", work_tree=tmp_path / "w"
    )
    assert call.argv[:3] == ["git", f"--git-dir={tmp_path / 'g'}", f"--work-tree={tmp_path / 'w'}"]
    pinned = [call.argv[i + 1] for i, arg in enumerate(call.argv) if arg == "-c"]
    for setting in ("core.hooksPath=/dev/null", "core.fsmonitor=false", "credential.helper="):
        assert setting in pinned
    env = call.env
    assert env["GIT_CONFIG_GLOBAL"] == os.devnull and env["GIT_CONFIG_NOSYSTEM"] == "1"
    assert env["HOME"] != os.environ.get("HOME") and os.listdir(env["HOME"]) == []
    assert env["GIT_ALLOW_PROTOCOL"] == ""  # no transport at all without a remote
    assert "SSH_AUTH_SOCK" not in env and "IdentityAgent=none" in env["GIT_SSH_COMMAND"]
    assert not [name for name in env if name.startswith("GIT_") and name in os.environ]


def test_a_remotes_transport_and_credentials_stay_out_of_the_command_line(tmp_path: Path) -> None:
    access = RemoteAccess(protocols=("https",), http_authorization="Bearer s3cret")
    call = git_invocation(
        ("clone", "--bare", "--", "https://x/y", "z"), cwd=tmp_path, remote=access
    )
    assert call.env["GIT_ALLOW_PROTOCOL"] == "https"
    assert call.env["GIT_CONFIG_VALUE_0"] == "Authorization: Bearer s3cret"
    assert "s3cret" not in " ".join(call.argv)
    assert call.env["GIT_CEILING_DIRECTORIES"] == str(tmp_path.resolve().parent)
    with pytest.raises(ValueError, match="not for callers"):
        git_invocation(("status",), cwd=tmp_path, env={"GIT_DIR": "/elsewhere"})
