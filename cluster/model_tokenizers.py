"""``PromptTokenizers`` on Ray Serve: the local model deployments count a recorded request's
prompt tokens with their own chat template and tokenizer (``ModelReplica.prompt_tokens``), for the
console's context-window view. The gateway asks through a deployment handle, off its event loop.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from pydantic import ValidationError
from ray import serve

from core.context_window import PromptCounts
from core.errors import InvalidInput, Unavailable
from core.jsontypes import JsonObject
from core.settings import settings_from_env
from serving.llm_client import LLM_APP_NAME
from serving.llm_config import deployment_for_model

log = logging.getLogger("wonder.gateway")


class DeployedTokenizers:
    """Counts through the deployment that served the call (or, when the record does not say,
    the one that serves its model now). ``Unavailable`` while the model application is not
    running, when that deployment is gone or does not answer within ``timeout_s``."""

    def __init__(self, settings_env: dict[str, str], timeout_s: float = 30.0) -> None:
        self.settings_env = settings_env
        self.timeout_s = timeout_s
        self._handles: dict[str, Any] = {}
        self._lock = threading.Lock()

    def count(self, deployment: str | None, model: str, bodies: list[JsonObject]) -> PromptCounts:
        target = deployment or deployment_for_model(settings_from_env(self.settings_env), model)
        try:
            app = serve.status().applications.get(LLM_APP_NAME)
            if app is None or app.status != "RUNNING":
                raise Unavailable("the local model application is not running")
            answer = (
                self._handle(target).prompt_tokens.remote(bodies).result(timeout_s=self.timeout_s)
            )
        except Unavailable:
            raise
        except Exception as exc:  # gone, unreachable, too slow: the caller estimates instead
            log.info("deployment %s did not count prompt tokens (%s)", target, exc)
            raise Unavailable(
                f"the local model deployment {target} did not answer ({type(exc).__name__})"
            ) from exc
        if not isinstance(answer, dict) or "error" in answer:
            reason = answer.get("error") if isinstance(answer, dict) else answer
            raise InvalidInput(f"the local model deployment {target} refused: {reason}"[:500])
        try:
            return PromptCounts.model_validate(answer)
        except ValidationError as exc:
            raise Unavailable(f"the local model deployment {target} answered {exc}"[:500]) from exc

    def _handle(self, deployment: str) -> Any:
        with self._lock:
            handle = self._handles.get(deployment)
            if handle is None:
                handle = serve.get_deployment_handle(deployment, app_name=LLM_APP_NAME)
                self._handles[deployment] = handle
            return handle
