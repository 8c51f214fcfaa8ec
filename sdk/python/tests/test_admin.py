"""AdminClient on the shared vectors of sdk/testdata/admin.json: the
requests it sends, the answers it returns, its retries and errors (the
same file the TypeScript SDK's tests and client/sdkvectors_test.go read)."""

import dataclasses
import json
import threading
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from conftest import vectors
from sluice_client import AdminClient, RetryPolicy, SluiceConnectionError, SluiceError

ADMIN = vectors("admin.json")


class Console:
    """A loopback admin API that answers from a script and keeps the requests."""

    def __init__(self, answers):
        self.answers = answers
        self.requests = []
        con = self

        class H(BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def _serve(self):
                n = int(self.headers.get("Content-Length") or 0)
                u = urllib.parse.urlsplit(self.path)
                con.requests.append({"method": self.command, "path": u.path, "query": dict(urllib.parse.parse_qsl(u.query)),
                                     "body": self.rfile.read(n), "headers": dict(self.headers)})
                i = len(con.requests) - 1
                if i >= len(con.answers):
                    self.send_response(418)
                    self.end_headers()
                    return
                a = con.answers[i]
                if a.get("drop"):
                    self.close_connection = True
                    self.connection.close()
                    return
                body = a["body_text"].encode() if "body_text" in a else json.dumps(a.get("body")).encode()
                self.send_response(a["status"])
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            do_GET = do_POST = do_DELETE = _serve

        self.srv = ThreadingHTTPServer(("127.0.0.1", 0), H)
        threading.Thread(target=self.srv.serve_forever, args=(0.01,), daemon=True).start()
        self.url = "http://127.0.0.1:%d/" % self.srv.server_address[1]

    def close(self):
        self.srv.shutdown()
        self.srv.server_close()


def plain(v):
    """The client's answer as JSON-like values, to compare with a vector."""
    if dataclasses.is_dataclass(v):
        return {f.name: plain(getattr(v, f.name)) for f in dataclasses.fields(v) if f.name != "raw"}
    if isinstance(v, list):
        return [plain(x) for x in v]
    return v


def subset(got, want, where="result"):
    if isinstance(want, dict):
        assert isinstance(got, dict), f"{where}: {got!r}, want an object"
        for k, w in want.items():
            assert k in got, f"{where}.{k} missing in {got!r}"
            subset(got[k], w, f"{where}.{k}")
    elif isinstance(want, list) and want and isinstance(want[0], dict):
        assert isinstance(got, list) and len(got) == len(want), f"{where}: {got!r}, want {len(want)} elements"
        for i, (g, w) in enumerate(zip(got, want)):
            subset(g, w, f"{where}[{i}]")
    else:
        assert got == want, f"{where}: {got!r}, want {want!r}"


def call(c, name, a):
    if name == "lookup_job":
        return c.lookup_job(a["topic"], a["id"], group=a.get("group"))
    if name == "list_jobs":
        return c.list_jobs(a["topic"], state=a.get("state"), partition=a.get("partition"), limit=a.get("limit"), cursor=a.get("cursor"))
    if name == "iter_jobs":
        return list(c.iter_jobs(a["topic"], state=a.get("state"), partition=a.get("partition"), limit=a.get("limit")))
    if name in ("cancel_job", "delete_job"):
        return getattr(c, name)(a["topic"], a["id"], group=a.get("group"))
    if name in ("group_status", "cancel_group"):
        return getattr(c, name)(a["group"], topic=a.get("topic"))
    if name == "create_topic":
        return c.create_topic(a["name"], partitions=a.get("partitions"), replication=a.get("replication"))
    if name == "list_topics":
        return c.list_topics()
    if name == "describe_topic":
        return c.describe_topic(a["name"])
    if name == "delete_topic":
        return c.delete_topic(a["name"], force=a.get("force", False))
    pytest.fail(f"a call this test does not know: {name} (add it to both SDKs)")


@pytest.mark.parametrize("case", ADMIN["cases"], ids=lambda c: c["name"])
def test_admin_answers(case):
    con = Console(case["answers"])
    c = AdminClient(con.url, token=ADMIN["token"], retry=RetryPolicy(min_backoff=0.001, max_backoff=0.02))
    res = err = None
    try:
        res = call(c, case["call"], case["args"])
    except (SluiceError, SluiceConnectionError) as e:
        err = e
    finally:
        con.close()
    e = case["expect"]
    assert len(con.requests) == e["sends"], err
    for r in con.requests:
        assert r["headers"].get("Authorization") == "Bearer " + ADMIN["token"]
        if r["method"] != "GET":
            assert r["headers"].get("Content-Type") == "application/json", "a change carries Content-Type application/json"
    for got, want in zip(con.requests, e.get("requests", [])):
        assert (got["method"], got["path"], got["query"]) == (want["method"], want["path"], want["query"])
        assert (json.loads(got["body"]) if got["body"] else None) == want.get("body")
    if e.get("connection_error"):
        assert isinstance(err, SluiceConnectionError), err
        return
    if "error" in e:
        assert isinstance(err, SluiceError), res
        assert (err.status, err.message, err.fix) == (e["error"]["status"], e["error"]["message"], e["error"].get("fix", ""))
        assert err.api == "admin API" and str(err).startswith("sluice admin API: ")
        return
    assert err is None, err
    subset(plain(res), e["result"])


def test_the_url_must_be_http():
    with pytest.raises(ValueError, match="admin API's base URL"):
        AdminClient("127.0.0.1:8083")
