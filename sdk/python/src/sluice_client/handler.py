"""The receiving side of the worker's built-in http handler (`sluice worker
--http type=URL`, `sluice dev --http`), as a plain WSGI or ASGI callable
that any framework mounts, and receivers of group callbacks.

The worker POSTs a job's payload byte for byte with the headers
Sluice-Job-Id, Sluice-Job-Type, Sluice-Attempt and Sluice-Group, and reads
the answer (docs/worker.md, docs/sdk.md):

    2xx                    done; the body is the job's result
    4xx (not 408, 429)     permanent: the job is dead with the status and body
    429, 503 + Retry-After retried after that delay
    5xx, no answer         retried with the worker's backoff

The helper verifies the request is a delivery (and its token, when one is
set), decodes the payload, runs your function and answers accordingly:
the function's return value is the result (200); raise Kill to kill the
job (422), RetryLater to retry after a delay (503, or 429, with
Retry-After); any other exception is retried with the worker's backoff
(500).
"""

from __future__ import annotations

import asyncio
import hmac
import inspect
import json
import math
import socketserver
import threading
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable, Iterable, Mapping, Sequence
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from .callback import SignatureError, _keys, verify_callback

HEADER_JOB_ID = "Sluice-Job-Id"
HEADER_JOB_TYPE = "Sluice-Job-Type"
HEADER_ATTEMPT = "Sluice-Attempt"
HEADER_GROUP = "Sluice-Group"

# A token mismatch is answered 503 with this Retry-After: a worker whose
# token is out of date (a rotation half done) retries rather than killing
# its jobs; the status says nothing more to a stranger.
TOKEN_RETRY_AFTER = 60


@dataclass
class Delivery:
    """One attempt of a job, as the worker's http handler delivers it."""

    id: str
    type: str
    attempt: int
    group: str
    payload: Any
    body: bytes
    headers: Mapping[str, str] = field(repr=False)


class Kill(Exception):
    """Raise to end the job for good: answered 422, the job goes to the
    dead set with this message as its last error (replay it with sluice
    dlq replay once mended)."""


class RetryLater(Exception):
    """Raise to have the worker retry the job after `after` seconds
    (Retry-After, at least 1): answered 503, or 429 with status=429."""

    def __init__(self, message: str = "", *, after: float = 1.0, status: int = 503) -> None:
        if status not in (429, 503):
            raise ValueError("RetryLater: status must be 429 or 503")
        super().__init__(message or "retry later")
        self.after = max(1, math.ceil(after))
        self.status = status


_Response = tuple[int, list[tuple[str, str]], bytes]


def _text(status: int, msg: str, extra: Iterable[tuple[str, str]] = ()) -> _Response:
    return status, [("Content-Type", "text/plain; charset=utf-8"), *extra], msg.encode()


def _check(method: str, headers: Mapping[str, str], body: bytes, token: str | None) -> Delivery | _Response:
    """The delivery, or the answer to a request that is not one."""
    if method != "POST":
        return _text(405, "the worker's http handler POSTs jobs here", [("Allow", "POST")])
    if token is not None:
        auth = headers.get("authorization", "")
        if not hmac.compare_digest(auth.encode(), ("Bearer " + token).encode()):
            return _text(503, "Authorization does not match this handler's token: set the worker's header "
                         "Authorization: Bearer <token>", [("Retry-After", str(TOKEN_RETRY_AFTER))])
    job_id, job_type = headers.get("sluice-job-id", ""), headers.get("sluice-job-type", "")
    if not job_id or not job_type:
        return _text(400, "not a delivery of the worker's http handler: no Sluice-Job-Id or Sluice-Job-Type header")
    try:
        attempt = int(headers.get("sluice-attempt", "1") or "1")
    except ValueError:
        return _text(400, "Sluice-Attempt is not a number")
    try:
        payload = json.loads(body) if body else None
    except ValueError as e:
        # It will not decode on a later attempt either.
        return _text(400, f"job {job_id} ({job_type}): the payload is not JSON: {e}")
    return Delivery(job_id, job_type, attempt, headers.get("sluice-group", ""), payload, body, headers)


def _result(value: Any) -> _Response:
    if value is None:
        return 204, [], b""
    if isinstance(value, (bytes, bytearray)):
        return 200, [("Content-Type", "application/octet-stream")], bytes(value)
    if isinstance(value, str):
        return 200, [("Content-Type", "text/plain; charset=utf-8")], value.encode()
    return 200, [("Content-Type", "application/json")], json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode()


def _failure(e: BaseException) -> _Response:
    if isinstance(e, Kill):
        return _text(422, str(e) or "killed by the handler")
    if isinstance(e, RetryLater):
        return _text(e.status, str(e), [("Retry-After", str(e.after))])
    return _text(500, f"{type(e).__name__}: {e}")


def _wsgi_headers(environ: Mapping[str, Any]) -> dict[str, str]:
    h = {k[5:].replace("_", "-").lower(): v for k, v in environ.items() if k.startswith("HTTP_")}
    if environ.get("CONTENT_TYPE"):
        h["content-type"] = environ["CONTENT_TYPE"]
    return h


def _wsgi_body(environ: Mapping[str, Any]) -> bytes:
    try:
        n = int(environ.get("CONTENT_LENGTH") or 0)
    except ValueError:
        n = 0
    return environ["wsgi.input"].read(n) if n > 0 else b""


def _wsgi_answer(start_response: Callable[..., Any], r: _Response) -> list[bytes]:
    status, headers, body = r
    from http import HTTPStatus

    start_response(f"{status} {HTTPStatus(status).phrase}", [*headers, ("Content-Length", str(len(body)))])
    return [body]


Handler = Callable[[Delivery], Any]


def wsgi_handler(fn: Handler, *, token: str | None = None) -> Callable[..., list[bytes]]:
    """A WSGI application serving the worker's http handler with fn. token,
    when set, must come as "Authorization: Bearer <token>" (the worker's
    HTTPHandler.Header)."""

    def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> list[bytes]:
        d = _check(environ.get("REQUEST_METHOD", ""), _wsgi_headers(environ), _wsgi_body(environ), token)
        if not isinstance(d, Delivery):
            return _wsgi_answer(start_response, d)
        try:
            r = _result(fn(d))
        except Exception as e:  # noqa: BLE001 - every failure is an answer
            r = _failure(e)
        return _wsgi_answer(start_response, r)

    return app


async def _asgi_read(scope: dict[str, Any], receive: Callable[[], Awaitable[dict[str, Any]]]) -> tuple[dict[str, str], bytes]:
    headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}
    chunks = []
    while True:
        msg = await receive()
        chunks.append(msg.get("body", b""))
        if not msg.get("more_body"):
            break
    return headers, b"".join(chunks)


async def _asgi_answer(send: Callable[[dict[str, Any]], Awaitable[None]], r: _Response) -> None:
    status, headers, body = r
    raw = [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in headers]
    raw.append((b"content-length", str(len(body)).encode()))
    await send({"type": "http.response.start", "status": status, "headers": raw})
    await send({"type": "http.response.body", "body": body})


async def _lifespan(receive: Callable[[], Awaitable[dict[str, Any]]], send: Callable[[dict[str, Any]], Awaitable[None]]) -> None:
    while True:
        msg = await receive()
        if msg["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif msg["type"] == "lifespan.shutdown":
            await send({"type": "lifespan.shutdown.complete"})
            return


def asgi_handler(fn: Callable[[Delivery], Any], *, token: str | None = None) -> Callable[..., Awaitable[None]]:
    """An ASGI application serving the worker's http handler with fn, an
    async function or a plain one (run in a thread, not to block the
    loop). token as in wsgi_handler."""

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            return await _lifespan(receive, send)
        headers, body = await _asgi_read(scope, receive)
        d = _check(scope.get("method", ""), headers, body, token)
        if not isinstance(d, Delivery):
            return await _asgi_answer(send, d)
        try:
            if inspect.iscoroutinefunction(fn):
                value = await fn(d)
            else:
                value = await asyncio.to_thread(fn, d)
                if inspect.isawaitable(value):
                    value = await value
            r = _result(value)
        except Exception as e:  # noqa: BLE001
            r = _failure(e)
        await _asgi_answer(send, r)

    return app


def _callback_answer(headers: Mapping[str, str], body: bytes, keys: list[bytes] | None, v2_only: bool) -> tuple[Any, _Response | None]:
    if keys is not None:
        try:
            verify_callback(headers, body, keys, v2_only=v2_only)
        except SignatureError as e:
            return None, _text(401, str(e))
    try:
        return json.loads(body), None
    except ValueError as e:
        return None, _text(400, f"the callback is not JSON: {e}")


def callback_wsgi(
    fn: Callable[[dict[str, Any]], Any], *, secrets: Sequence[str | bytes] | None, v2_only: bool = False
) -> Callable[..., list[bytes]]:
    """A WSGI application receiving a group's callback: verified against
    secrets (401 when it does not verify), decoded, given to fn, answered
    200 (an exception in fn answers 500, and the coordinator delivers it
    again). secrets=None takes unsigned callbacks: only for a coordinator
    without --callback-secret-file, such as plain sluice dev."""
    keys = None if secrets is None else _keys(secrets)

    def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> list[bytes]:
        if environ.get("REQUEST_METHOD") != "POST":
            return _wsgi_answer(start_response, _text(405, "callbacks are POSTed", [("Allow", "POST")]))
        cb, bad = _callback_answer(_wsgi_headers(environ), _wsgi_body(environ), keys, v2_only)
        if bad:
            return _wsgi_answer(start_response, bad)
        try:
            fn(cb)
        except Exception as e:  # noqa: BLE001
            return _wsgi_answer(start_response, _failure(e))
        return _wsgi_answer(start_response, _text(200, "ok"))

    return app


def callback_asgi(
    fn: Callable[[dict[str, Any]], Any], *, secrets: Sequence[str | bytes] | None, v2_only: bool = False
) -> Callable[..., Awaitable[None]]:
    """callback_wsgi as an ASGI application; fn may be async."""
    keys = None if secrets is None else _keys(secrets)

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            return await _lifespan(receive, send)
        if scope.get("method") != "POST":
            return await _asgi_answer(send, _text(405, "callbacks are POSTed", [("Allow", "POST")]))
        headers, body = await _asgi_read(scope, receive)
        cb, bad = _callback_answer(headers, body, keys, v2_only)
        if bad:
            return await _asgi_answer(send, bad)
        try:
            v = fn(cb)
            if inspect.isawaitable(v):
                await v
        except Exception as e:  # noqa: BLE001
            return await _asgi_answer(send, _failure(e))
        await _asgi_answer(send, _text(200, "ok"))

    return app


class _ThreadingWSGIServer(socketserver.ThreadingMixIn, WSGIServer):
    daemon_threads = True
    allow_reuse_address = True


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
        pass


def serve(app: Callable[..., Any], host: str = "127.0.0.1", port: int = 0) -> WSGIServer:
    """Serves a WSGI app (a thread per request) from a background thread,
    for examples and tests; production mounts the app in its own server.
    Port 0 picks a free one: server.server_address tells which. Stop it
    with server.shutdown()."""
    srv = make_server(host, port, app, server_class=_ThreadingWSGIServer, handler_class=_QuietHandler)
    threading.Thread(target=srv.serve_forever, name="sluice-serve", daemon=True).start()
    return srv
