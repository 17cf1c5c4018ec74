"""The error tree: retryability is a property of the error, not of the caller.

``RetryableError`` covers infrastructure (timeouts, 5xx, an actor that died); ``NonRetryableError``
covers business outcomes (invalid input, permission, not found). Codes are the seeds' ToolErrorCode.
"""

from __future__ import annotations

from enum import StrEnum


class ErrorCode(StrEnum):
    EXECUTION_FAILED = "EXECUTION_FAILED"
    TIMEOUT = "TIMEOUT"
    NOT_FOUND = "NOT_FOUND"
    PERMISSION_DENIED = "PERMISSION_DENIED"
    INVALID_INPUT = "INVALID_INPUT"
    AGENT_DECLINED = "AGENT_DECLINED"
    INTERNAL_ERROR = "INTERNAL_ERROR"
    CONFLICT = "CONFLICT"
    UNAUTHORIZED = "UNAUTHORIZED"
    UNAVAILABLE = "UNAVAILABLE"
    QUOTA_EXCEEDED = "QUOTA_EXCEEDED"


class WonderError(Exception):
    """Base of every error Wonder raises on purpose."""

    code: ErrorCode = ErrorCode.INTERNAL_ERROR
    retriable: bool = False

    def __init__(self, message: str, *, code: ErrorCode | None = None) -> None:
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code

    def to_dict(self) -> dict[str, object]:
        return {"code": str(self.code), "message": self.message, "retriable": self.retriable}


class RetryableError(WonderError):
    """Infrastructure trouble: worth trying again after a backoff."""

    code = ErrorCode.EXECUTION_FAILED
    retriable = True


class NonRetryableError(WonderError):
    """A business outcome: trying again gives the same answer."""

    code = ErrorCode.EXECUTION_FAILED
    retriable = False


class NotFound(NonRetryableError):
    code = ErrorCode.NOT_FOUND


class InvalidInput(NonRetryableError):
    code = ErrorCode.INVALID_INPUT


class PermissionDenied(NonRetryableError):
    code = ErrorCode.PERMISSION_DENIED


class Conflict(NonRetryableError):
    code = ErrorCode.CONFLICT


class Unauthorized(NonRetryableError):
    code = ErrorCode.UNAUTHORIZED


class Timeout(RetryableError):
    code = ErrorCode.TIMEOUT


class Unavailable(RetryableError):
    """Not now (a database away, every resident conversation busy); ``retry_after_s``: when
    trying again may succeed (HTTP ``Retry-After``), if known."""

    code = ErrorCode.UNAVAILABLE

    def __init__(self, message: str, *, retry_after_s: float | None = None) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s


class QuotaExceeded(WonderError):
    """A client's quota refused the request (HTTP 429): the same request may succeed after
    ``retry_after_s`` — neither an infrastructure failure nor a final business answer."""

    code = ErrorCode.QUOTA_EXCEEDED
    retriable = True

    def __init__(self, message: str, *, retry_after_s: float) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s
