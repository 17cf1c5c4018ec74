"""The default library's workflows (library/workflows/*.yaml), end to end with scripted models."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from core.ids import utc_now
from core.library_files import apply_library
from core.workflows import RunStatus
from tests.conftest import Cluster
from tests.factories import scripted_profile
from tests.integration.access import get_history, start_workflow_run, wait_for_run

pytestmark = pytest.mark.timeout(240)

LIBRARY = Path(__file__).resolve().parents[2] / "library"


@pytest.fixture(scope="module")
def library(ray_cluster: Cluster) -> None:
    apply_library(ray_cluster.store, LIBRARY, utc_now())


def rules(*pairs: tuple[str, str]) -> list[dict[str, Any]]:
    """A rule-style script: the first step whose ``match`` is in the last message answers."""
    return [{"match": match, "reply": reply} for match, reply in pairs]


async def run(workflow_id: str, run_input: dict[str, Any]) -> Any:
    return await wait_for_run(await start_workflow_run(workflow_id, run_input), 120)


async def test_research_fanout(ray_cluster: Cluster, library: None) -> None:
    profile = scripted_profile(
        ray_cluster.store,
        rules(("Findings:", "Owls are quiet hunters."), ("Question:", "An answer.")),
    )
    result = await run(
        "research_fanout", {"topic": "owls", "questions": 5, "model_profile": profile.id}
    )
    assert result.status is RunStatus.COMPLETED, result.error
    assert result.output["summary"] == "Owls are quiet hunters."
    assert result.output["findings"] == 5
    assert result.output["digest"].count("An answer.") == 5
    nodes = [r.node_id for r in get_history(result.id)]
    assert nodes == ["plan"] + ["answer"] * 5 + ["collect", "summarize"]


COVE: list[tuple[str, str, str, bool]] = [
    # (case, reply to the second check, expected answer, verified)
    ("checks pass: the draft stands", "yes, it is", "The sky is blue.", True),
    ("a check fails: the draft is revised", "no, it is not", "Revised: blue by day.", False),
]


@pytest.mark.parametrize(("case", "second", "answer", "verified"), COVE, ids=[c[0] for c in COVE])
async def test_chain_of_verification(
    ray_cluster: Cluster, library: None, case: str, second: str, answer: str, verified: bool
) -> None:
    profile = scripted_profile(
        ray_cluster.store,
        rules(
            ("Checks:", "Revised: blue by day."),
            ("Draft:", '{"checks": ["Is the sky blue?", "Is it blue at noon?"]}'),
            ("Is the sky blue?", "yes"),
            ("Is it blue at noon?", second),
            ("", "The sky is blue."),
        ),
    )
    result = await run(
        "chain_of_verification",
        {"question": "What colour is the sky?", "model_profile": profile.id},
    )
    assert result.status is RunStatus.COMPLETED, result.error
    assert result.output == {"answer": answer, "verified": verified}


async def test_debate(ray_cluster: Cluster, library: None) -> None:
    profile = scripted_profile(
        ray_cluster.store,
        rules(("against: ", "Verdict: {{last_user}}"), ("", "A strong point.")),
    )
    result = await run("debate", {"proposition": "Tabs beat spaces", "model_profile": profile.id})
    assert result.status is RunStatus.COMPLETED, result.error
    verdict = result.output["verdict"]
    assert verdict.startswith("Verdict: Proposition: Tabs beat spaces")
    assert "for: A strong point." in verdict and "against: A strong point." in verdict
