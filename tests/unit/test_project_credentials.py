"""A project's credentials, the pure parts: their shape, where the operator's policy lets them go,
the header they make, and what is taken out of git's messages."""

from __future__ import annotations

import base64
from pathlib import Path

import pytest
from pydantic import TypeAdapter, ValidationError

from core.domain import BasicCredentials, BearerCredentials, ProjectCredentials
from core.errors import InvalidInput, Unavailable
from core.git import RemoteAccess, git_invocation
from core.project_credentials import HIDDEN, OriginAccess, authorization, hidden_forms
from core.project_sources import credentials_refusal, parse_remote
from core.settings import ProjectSources

SOURCES = ProjectSources(
    url_schemes=["https", "http", "ssh"],
    url_hosts=["*"],
    credential_hosts=["github.com", "*.corp.example:8443", "127.0.0.1:8080", "*"],
)
VALUE = "tok/en+with=odd&chars"
SHAPE: TypeAdapter[ProjectCredentials] = TypeAdapter(ProjectCredentials)


@pytest.mark.parametrize(
    ("credential_hosts", "location", "refused"),
    [
        (["github.com"], "https://github.com/a/b.git", None),
        (["github.com"], "https://gitlab.com/a/b.git", "may not send credentials to gitlab.com"),
        ([], "https://github.com/a/b.git", "may not send credentials to github.com"),
        (["*"], "https://anything.example/a.git", None),
        (["*.corp.example:8443"], "https://git.corp.example:8443/a.git", None),
        (["*.corp.example:8443"], "https://git.corp.example/a.git", "may not send"),
        (["127.0.0.1:8080"], "http://127.0.0.1:8080/a.git", None),
        (["127.0.0.1:8080"], "http://127.0.0.1:8081/a.git", "only over https"),
        (["::1"], "http://[::1]:8080/a.git", None),
        (["*"], "http://127.0.0.1:8080/a.git", "only over https"),  # * names no http host
        (["localhost"], "http://localhost/a.git", "only over https"),  # a name, not an address
        (["10.0.0.5"], "http://10.0.0.5/a.git", "only over https"),  # not loopback
        (["github.com"], "http://github.com/a.git", "only over https"),
        (["github.com"], "ssh://git@github.com/a.git", "only over https, not ssh"),
        (["github.com"], "git@github.com:a.git", "only over https, not ssh"),
    ],
)
def test_where_credentials_may_go(
    credential_hosts: list[str], location: str, refused: str | None
) -> None:
    sources = SOURCES.model_copy(update={"credential_hosts": credential_hosts})
    refusal = credentials_refusal(sources, parse_remote(location))
    if refused is None:
        assert refusal is None
    else:
        assert refusal is not None and refused in refusal


def test_the_header_of_each_scheme() -> None:
    bearer = BearerCredentials(secret="t")
    assert authorization(bearer, "abc.DEF-123") == "Bearer abc.DEF-123"
    basic = BasicCredentials(secret="t", scheme="basic", username="bot")
    pair = base64.b64encode(b"bot:pa ss\nword").decode()
    assert authorization(basic, "pa ss\nword") == f"Basic {pair}"  # encoded: any value is safe


@pytest.mark.parametrize("value", ["a\r\nX-Injected: 1", "with space", "tab\there", "é"])
def test_a_bearer_token_that_would_break_the_header_is_refused_by_name(value: str) -> None:
    with pytest.raises(InvalidInput) as refused:
        authorization(BearerCredentials(secret="gh-token"), value)
    assert "secret gh-token" in refused.value.message and value not in refused.value.message


@pytest.mark.parametrize(
    "shape",
    [
        {"secret": "t", "scheme": "basic"},
        {"secret": "t", "username": "u"},
        {"secret": "t", "scheme": "basic", "username": "a:b"},
        {"secret": "t", "scheme": "basic", "username": "a b"},
        {"secret": "t", "scheme": "basic", "username": ""},
        {"secret": "", "scheme": "bearer"},
        {"secret": "-x"},
        {"secret": "t", "value": "v"},
        {"secret": "t", "scheme": "token"},
    ],
)
def test_credentials_shapes_that_are_refused(shape: dict[str, str]) -> None:
    with pytest.raises(ValidationError):
        SHAPE.validate_python(shape)


@pytest.mark.parametrize("scheme", ["bearer", "basic"])
def test_every_spelling_of_the_secret_is_taken_out_of_gits_messages(scheme: str) -> None:
    credentials = SHAPE.validate_python(
        {"secret": "gh", "scheme": scheme, **({"username": "bot"} if scheme == "basic" else {})}
    )
    value = "tok.en-VALUE_1"
    header = authorization(credentials, value)
    access = OriginAccess(
        RemoteAccess(("https",), header), "gh", hidden_forms(credentials, value, header)
    )
    token = header.split(" ", 1)[1]
    said = (
        f"remote: you sent {header}; token {token}; raw {value}; quoted {value}; "
        "pair bot:tok.en-VALUE_1\nfatal: unable to access 'https://h/r.git/': "
        "The requested URL returned error: 403"
    )
    cleaned = access.failure(said)
    assert value not in cleaned and token not in cleaned and HIDDEN in cleaned
    assert cleaned.startswith("the origin refused the credentials of secret gh")
    error = access.scrubbed(Unavailable(said))
    assert error.retriable and value not in error.message and error.__cause__ is None


def test_a_percent_encoded_secret_is_taken_out_too() -> None:
    credentials = BasicCredentials(secret="gh", scheme="basic", username="bot")
    header = authorization(credentials, VALUE)
    forms = hidden_forms(credentials, VALUE, header)
    access = OriginAccess(RemoteAccess(("https",), header), "gh", forms)
    cleaned = access.failure("echo tok%2Fen%2Bwith%3Dodd%26chars and bot:" + VALUE)
    assert "tok%2Fen" not in cleaned and VALUE not in cleaned


def test_an_unrelated_failure_is_left_as_it_is() -> None:
    access = OriginAccess(RemoteAccess(("https",)))
    error = Unavailable("git clone took longer than 600s")
    assert access.scrubbed(error) is error
    asked = access.failure("fatal: could not read Username for 'https://h': terminal prompts")
    assert asked.startswith("the origin asks for credentials")


def test_the_header_travels_in_gits_environment_only() -> None:
    header = "Bearer " + VALUE
    call = git_invocation(
        ["clone", "https://h/r.git"],
        cwd=Path("/tmp"),
        remote=RemoteAccess(("https",), header),
    )
    assert not [arg for arg in call.argv if VALUE in arg]
    assert call.env["GIT_CONFIG_VALUE_0"] == f"Authorization: {header}"
    assert "http.followRedirects=false" in call.argv  # a redirect is never followed with it
    assert VALUE not in repr(RemoteAccess(("https",), header))
