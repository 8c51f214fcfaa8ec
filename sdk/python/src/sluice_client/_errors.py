from __future__ import annotations

from http import HTTPStatus
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ._client import BatchResult


class SluiceError(Exception):
    """A gate's (or the admin API's) error answer the client raises rather
    than retries: a 4xx (fix the request: message says how, field names the
    envelope field at fault; the admin API adds fix), or a 503 or 504 still
    failing after the retry policy's sends. ids are the jobs (or the group)
    whose fate is unknown after a 504. api names who answered: "gate" or
    "admin API"."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        field: str = "",
        line: int = 0,
        column: int = 0,
        ids: list[str] | None = None,
        attempts: int = 1,
        body: dict[str, Any] | None = None,
        fix: str = "",
        api: str = "gate",
    ) -> None:
        self.status = status
        self.message = message
        self.field = field
        self.line = line
        self.column = column
        self.ids = ids or []
        self.attempts = attempts
        self.body = body or {}
        self.fix = fix
        self.api = api
        try:
            text = HTTPStatus(status).phrase
        except ValueError:
            text = ""
        s = f"sluice {api}: {status} {text}: {message}"
        if fix:
            s += f" (fix: {fix})"
        if attempts > 1:
            s += f" (after {attempts} sends)"
        super().__init__(s)

    @property
    def temporary(self) -> bool:
        """Sending the same request later may succeed (Kafka unreachable
        or slow)."""
        return self.status in (503, 504)

    @classmethod
    def from_body(cls, status: int, eb: dict[str, Any], raw: bytes, attempts: int, api: str = "gate", not_api_fix: str = "") -> "SluiceError":
        msg = eb.get("error")
        fix = eb.get("fix", "")
        if not msg:
            # Not the API answering (a proxy's page, a coordinator without
            # its console): the body is the message.
            msg = raw.decode("utf-8", "replace").strip()
            if status == 404 and not fix:
                fix = not_api_fix
        return cls(status, msg, field=eb.get("field", ""), line=eb.get("line", 0), column=eb.get("column", 0),
                   ids=eb.get("ids"), attempts=attempts, body=eb, fix=fix, api=api)


class BatchError(SluiceError):
    """enqueue_batch's error when the gate took some jobs and not others:
    result has every job's outcome; rejected lists those not taken."""

    def __init__(self, result: "BatchResult") -> None:
        self.result = result
        self.rejected = [r for r in result.results if r.error is not None]
        first = self.rejected[0]
        assert first.error is not None
        super().__init__(first.error.status, f"{len(self.rejected)} of {len(result.results)} jobs not accepted; job {first.index}: {first.error.message}",
                         field=first.error.field)


class SluiceConnectionError(ConnectionError):
    """The gate (or the admin API) could not be reached, or its answer was
    lost, and the client gave up: after its retries, or at once where a
    resend is not safe (a bulk group, or an admin change, whose answer was
    lost: look at its status)."""
