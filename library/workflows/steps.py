"""Python steps for workflow tasks (``python`` action, ``library.workflows.steps:<name>``).

Each takes the task data (the node input merged with ``input`` and ``previous``) and returns JSON.
They are deliberately small and deterministic: the example workflows use them for planning and
collecting, and tests and benchmarks use ``noop`` / ``echo`` / ``fail`` as stand-in work.
"""

from __future__ import annotations

from typing import Any

from core.callables import library_callable
from core.errors import InvalidInput, NonRetryableError

MAX_QUESTIONS = 20
QUESTION_TEMPLATES = (
    "What is {topic}?",
    "Why does {topic} matter?",
    "How does {topic} work in practice?",
    "What are the main risks or limits of {topic}?",
    "What alternatives to {topic} exist?",
    "What changed recently about {topic}?",
)


@library_callable
def noop(data: dict[str, Any]) -> dict[str, Any]:
    """Do nothing (benchmarks measure the coordinator around it)."""
    return {}


@library_callable
def echo(data: dict[str, Any]) -> Any:
    """Return the node input unchanged."""
    return data.get("input")


@library_callable
def fail(data: dict[str, Any]) -> Any:
    """Fail with a business error (``message`` from the input): exercises error paths."""
    raise NonRetryableError(str(data.get("message") or "step failed on purpose"))


@library_callable
def plan_questions(data: dict[str, Any]) -> dict[str, Any]:
    """``{topic, n}`` → ``{"questions": [...]}``: n research questions about the topic."""
    topic = str(data.get("topic") or "").strip()
    if not topic:
        raise InvalidInput("plan_questions needs a topic")
    n = int(data.get("n") or 3)
    if not 1 <= n <= MAX_QUESTIONS:
        raise InvalidInput(f"n must be between 1 and {MAX_QUESTIONS}")
    questions = [
        QUESTION_TEMPLATES[i % len(QUESTION_TEMPLATES)].format(topic=topic)
        + (f" (angle {i // len(QUESTION_TEMPLATES) + 1})" if i >= len(QUESTION_TEMPLATES) else "")
        for i in range(n)
    ]
    return {"topic": topic, "questions": questions}


@library_callable
def collect_findings(data: dict[str, Any]) -> dict[str, Any]:
    """``{topic, findings: [{question, answer}]}`` → a plain-text digest and the count."""
    findings = [f for f in data.get("findings") or [] if isinstance(f, dict)]
    lines = [f"- {f.get('question', '?')}: {str(f.get('answer', '')).strip()}" for f in findings]
    return {
        "topic": data.get("topic"),
        "count": len(findings),
        "digest": "\n".join(lines),
    }


@library_callable
def pick_verdict(data: dict[str, Any]) -> dict[str, Any]:
    """``{checks: [{check, answer}]}`` → verified when every answer starts with ``yes``."""
    checks = [c for c in data.get("checks") or [] if isinstance(c, dict)]
    answers = [str(c.get("answer", "")).strip().lower() for c in checks]
    report = "\n".join(f"- {c.get('check', '?')}: {c.get('answer', '')}" for c in checks)
    return {
        "verified": bool(answers) and all(a.startswith("yes") for a in answers),
        "count": len(checks),
        "report": report,
    }


MAX_PAUSE_S = 30.0


@library_callable
async def pause(data: dict[str, Any]) -> dict[str, Any]:
    """Wait ``seconds`` (at most 30) and return them: stand-in for slow work in demos and tests."""
    import asyncio

    seconds = min(float(data.get("seconds") or 0), MAX_PAUSE_S)
    await asyncio.sleep(seconds)
    return {"slept": seconds}
