"""The handler helper answers the worker's http handler as the worker
reads answers (worker/httphandler.go): 2xx done, 4xx dead, 429/503 with
Retry-After retried after it, 5xx retried."""

import asyncio
import io
import json

import pytest

from sluice_client import Kill, RetryLater, asgi_handler, callback_asgi, callback_wsgi, wsgi_handler
from conftest import vectors

DELIVERY = {"Sluice-Job-Id": "grp.3", "Sluice-Job-Type": "thumb", "Sluice-Attempt": "2", "Sluice-Group": "grp"}


def call_wsgi(app, body=b'{"n": 4}', headers=DELIVERY, method="POST"):
    environ = {"REQUEST_METHOD": method, "CONTENT_LENGTH": str(len(body)), "wsgi.input": io.BytesIO(body),
               "CONTENT_TYPE": "application/json"}
    for k, v in headers.items():
        environ["HTTP_" + k.upper().replace("-", "_")] = v
    got = {}

    def start_response(status, hdrs):
        got["status"] = int(status.split()[0])
        got["headers"] = {k.lower(): v for k, v in hdrs}

    got["body"] = b"".join(app(environ, start_response))
    return got


def call_asgi(app, body=b'{"n": 4}', headers=DELIVERY, method="POST"):
    scope = {"type": "http", "method": method, "headers": [(k.lower().encode(), v.encode()) for k, v in headers.items()]}
    sent = []
    chunks = [{"type": "http.request", "body": body[:3], "more_body": True}, {"type": "http.request", "body": body[3:]}]

    async def receive():
        return chunks.pop(0)

    async def send(msg):
        sent.append(msg)

    asyncio.run(app(scope, receive, send))
    return {"status": sent[0]["status"], "headers": {k.decode(): v.decode() for k, v in sent[0]["headers"]}, "body": sent[1]["body"]}


def thumb(job):
    if job.payload["n"] == 0:
        raise Kill("n must not be 0")
    if job.payload["n"] < 0:
        raise RetryLater("the GPU is busy", after=2.5, status=429)
    if job.payload["n"] > 100:
        raise RuntimeError("boom")
    return {"id": job.id, "type": job.type, "attempt": job.attempt, "group": job.group, "double": job.payload["n"] * 2}


async def thumb_async(job):
    return thumb(job)


@pytest.fixture(params=["wsgi", "asgi", "asgi-async"])
def serve(request):
    if request.param == "wsgi":
        return lambda **kw: call_wsgi(wsgi_handler(thumb, token=kw.pop("token", None)), **kw)
    fn = thumb if request.param == "asgi" else thumb_async
    return lambda **kw: call_asgi(asgi_handler(fn, token=kw.pop("token", None)), **kw)


def test_a_result_is_a_2xx_with_the_delivery_decoded(serve):
    r = serve()
    assert r["status"] == 200
    assert json.loads(r["body"]) == {"id": "grp.3", "type": "thumb", "attempt": 2, "group": "grp", "double": 8}


def test_kill_is_a_4xx_the_worker_does_not_retry(serve):
    r = serve(body=b'{"n": 0}')
    assert r["status"] == 422 and r["body"] == b"n must not be 0"


def test_retry_later_is_429_or_503_with_retry_after(serve):
    r = serve(body=b'{"n": -1}')
    assert r["status"] == 429 and r["headers"]["retry-after"] == "3"


def test_an_exception_is_a_5xx_the_worker_retries(serve):
    r = serve(body=b'{"n": 101}')
    assert r["status"] == 500 and b"RuntimeError: boom" in r["body"]


def test_a_payload_that_is_not_json_is_killed(serve):
    r = serve(body=b"<html>")
    assert r["status"] == 400 and b"not JSON" in r["body"]


def test_a_request_without_the_delivery_headers_is_refused(serve):
    r = serve(headers={"Content-Type": "application/json"})
    assert r["status"] == 400 and b"Sluice-Job-Id" in r["body"]


def test_a_wrong_token_is_retried_not_killed(serve):
    r = serve(token="s3cret", headers={**DELIVERY, "Authorization": "Bearer other"})
    assert r["status"] == 503
    ok = serve(token="s3cret", headers={**DELIVERY, "Authorization": "Bearer s3cret"})
    assert ok["status"] == 200


def test_none_is_a_204_and_text_a_200():
    assert call_wsgi(wsgi_handler(lambda j: None))["status"] == 204
    r = call_wsgi(wsgi_handler(lambda j: "<ok> & fine"))
    assert (r["status"], r["body"]) == (200, "<ok> & fine".encode())


SIG = next(c for c in vectors("signatures.json")["cases"] if c["name"] == "v2 under the receiver's secret")


def test_callback_receivers_verify_before_acting(monkeypatch):
    import time as _time

    monkeypatch.setattr(_time, "time", lambda: SIG["now"])
    got = []
    headers = {"Sluice-Signature": SIG["header"], "Sluice-Group": SIG["group"], "Sluice-Attempt": SIG["attempt"]}
    for call, app in ((call_wsgi, callback_wsgi(got.append, secrets=SIG["secrets"])),
                      (call_asgi, callback_asgi(got.append, secrets=SIG["secrets"]))):
        assert call(app, body=SIG["body"].encode(), headers=headers)["status"] == 200
        bad = call(app, body=SIG["body"].encode(), headers={**headers, "Sluice-Group": "other"})
        assert bad["status"] == 401
    assert [g["group"] for g in got] == ["grp-1", "grp-1"]


def test_a_callback_receiver_without_a_secret_is_a_configuration_error():
    from sluice_client import ShortSecret

    with pytest.raises(ShortSecret):
        callback_wsgi(print, secrets=[""])
