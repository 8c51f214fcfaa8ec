"""The shared vectors under sdk/testdata: the same files the Go client's
tests (client/sdkvectors_test.go) and the TypeScript SDK's read."""

import json
import re
import threading
from datetime import datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from conftest import vectors
from sluice_client import (
    BadSignature,
    BatchError,
    Client,
    Job,
    NoSignature,
    NoV2Signature,
    Raw,
    RetryPolicy,
    ShortSecret,
    SluiceError,
    StaleSignature,
    verify_callback,
)

ULID = re.compile(r"^[0-9A-HJKMNP-TV-Z]{26}$")


class Gate:
    """A loopback server that answers from a script and keeps the bodies."""

    def __init__(self, answers):
        self.answers = answers
        self.bodies = []
        gate = self

        class H(BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def _serve(self):
                n = int(self.headers.get("Content-Length") or 0)
                gate.bodies.append(self.rfile.read(n))
                i = len(gate.bodies) - 1
                if i >= len(gate.answers):
                    self.send_response(418)
                    self.end_headers()
                    return
                a = gate.answers[i]
                body = a["body_text"].encode() if "body_text" in a else json.dumps(a.get("body")).encode()
                self.send_response(a["status"])
                for k, v in a.get("headers", {}).items():
                    self.send_header(k, v)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            do_POST = do_GET = _serve

        self.srv = ThreadingHTTPServer(("127.0.0.1", 0), H)
        threading.Thread(target=self.srv.serve_forever, args=(0.01,), daemon=True).start()
        self.url = "http://127.0.0.1:%d" % self.srv.server_address[1]

    def close(self):
        self.srv.shutdown()
        self.srv.server_close()


def options(o):
    out = {}
    for k, v in o.items():
        if k == "run_at":
            out[k] = datetime.fromisoformat(v.replace("Z", "+00:00"))
        elif k.endswith("_ms"):
            out[k[:-3]] = v / 1000
        else:
            out[k] = v
    return out


ENV = vectors("envelopes.json")


@pytest.mark.parametrize("case", ENV["cases"], ids=lambda c: c["name"])
def test_envelope(case):
    g = Gate([{"status": 202, "body": {"id": "x", "topic": "jobs", "partition": 0, "offset": 0}}])
    try:
        payload = Raw(case["payload_raw"]) if "payload_raw" in case else case.get("payload")
        Client(g.url).enqueue("jobs", case["type"], payload, **options(case["options"]))
    finally:
        g.close()
    body = g.bodies[0]
    got = json.loads(body)
    if case.get("generated_id"):
        assert ULID.match(got.pop("id")), "the client assigns a ULID"
    assert got == case["envelope"]
    if "payload_bytes" in case:
        assert b'"payload":' + case["payload_bytes"].encode() in body, body


@pytest.mark.parametrize("case", ENV["groups"], ids=lambda c: c["name"])
def test_group_body(case):
    g = Gate([{"status": 202, "body": {"group": "x", "topic": "jobs", "count": 0, "status": ""}}])
    try:
        Client(g.url).enqueue_group("jobs", case["type"], case["items"], **options(case["options"]))
    finally:
        g.close()
    lines = g.bodies[0].decode().removesuffix("\n").split("\n")
    assert json.loads(lines[0]) == case["fields"]
    assert lines[1:] == case["item_lines"]


@pytest.mark.parametrize("case", vectors("answers.json")["cases"], ids=lambda c: c["name"])
def test_gate_answers(case):
    g = Gate(case["answers"])
    c = Client(g.url, retry=RetryPolicy(max_attempts=case.get("retry", {}).get("max_attempts", 10), min_backoff=0.001, max_backoff=0.02))
    e = case["expect"]
    res = err = None
    try:
        call = case["call"]
        if call == "enqueue":
            res = c.enqueue("jobs", "hello", {"n": 1})
        elif call == "batch":
            res = c.enqueue_batch("jobs", [Job("a"), Job("b"), Job("c")])
        elif call == "group":
            res = c.enqueue_group("jobs", "thumb", [1, 2], id="grp-9")
        elif call == "lookup":
            res = c.lookup_job("jobs", "X")
        elif call == "group_status":
            res = c.group_status("jobs", "grp-1")
        else:
            pytest.fail(f"a call this test does not know: {call}")
    except SluiceError as ex:
        err = ex
    finally:
        g.close()
    assert len(g.bodies) == e["sends"], err
    if e.get("same_body"):
        assert all(b == g.bodies[0] for b in g.bodies)
    if "error" in e:
        assert err is not None and not isinstance(err, BatchError), res
        assert (err.status, err.message, err.field, err.ids) == (
            e["error"]["status"], e["error"]["message"], e["error"].get("field", ""), e["error"].get("ids", []))
        return
    if "batch" in e:
        b = e["batch"]
        if b["rejected"]:
            assert isinstance(err, BatchError)
            res = err.result
        else:
            assert err is None
        assert (res.accepted, res.rejected) == (b["accepted"], b["rejected"])
        ids = [j["id"] for j in json.loads(g.bodies[0])]
        for body, want in zip(g.bodies, b["sent"]):
            assert [ids.index(j["id"]) for j in json.loads(body)] == want
        for r in res.results:
            want = b["item_errors"].get(str(r.index))
            if want:
                assert r.error is not None and (r.error.status, r.error.field) == (want["status"], want["field"])
            else:
                assert r.error is None
        return
    assert err is None
    if "state" in e:
        assert res.state == e["state"]
    for k, v in e.get("result", {}).items():
        assert getattr(res, k) == v, k


ERRORS = {"bad": BadSignature, "stale": StaleSignature, "no_signature": NoSignature, "no_v2": NoV2Signature, "short_secret": ShortSecret}


@pytest.mark.parametrize("case", vectors("signatures.json")["cases"], ids=lambda c: c["name"])
def test_signatures(case):
    headers = {"sluice-signature": case["header"], "Sluice-Group": case["group"], "SLUICE-ATTEMPT": case["attempt"]}
    body = case["body"].encode()
    if case["expect"] == "ok":
        assert verify_callback(headers, body, case["secrets"], v2_only=case["v2_only"], now=case["now"]) == body
    else:
        with pytest.raises(ERRORS[case["expect"]]):
            verify_callback(headers, body, case["secrets"], v2_only=case["v2_only"], now=case["now"])
