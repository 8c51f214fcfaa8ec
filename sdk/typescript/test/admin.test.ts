// AdminClient on the shared vectors of sdk/testdata/admin.json: the
// requests it sends, the answers it returns, its retries and errors (the
// same file the Python SDK's tests and client/sdkvectors_test.go read).

import assert from "node:assert/strict";
import { createServer, type IncomingHttpHeaders, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { describe, it } from "node:test";
import { AdminClient, SluiceConnectionError, SluiceError } from "../src/index.js";
import { vectors } from "./testdata.js";

interface Answer { status?: number; body?: unknown; body_text?: string; drop?: boolean }
interface Seen { method: string; path: string; query: Record<string, string>; body: string; headers: IncomingHttpHeaders }

/** A loopback admin API that answers from a script and keeps the requests. */
async function console_(answers: Answer[]): Promise<{ url: string; seen: Seen[]; close: () => Promise<void> }> {
  const seen: Seen[] = [];
  const server: Server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on("data", (c: Buffer) => chunks.push(c));
    req.on("end", () => {
      const u = new URL(req.url ?? "/", "http://x");
      seen.push({ method: req.method ?? "", path: u.pathname, query: Object.fromEntries(u.searchParams), body: Buffer.concat(chunks).toString("utf8"), headers: req.headers });
      const a = answers[seen.length - 1];
      if (!a) {
        res.writeHead(418).end();
        return;
      }
      if (a.drop) {
        req.socket.destroy();
        return;
      }
      res.writeHead(a.status ?? 200);
      res.end(a.body_text ?? JSON.stringify(a.body));
    });
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/`;
  return { url, seen, close: () => new Promise((r) => { server.closeAllConnections(); server.close(() => r()); }) };
}

function subset(got: unknown, want: unknown, where = "result"): void {
  if (Array.isArray(want) && want.length > 0 && typeof want[0] === "object") {
    assert.ok(Array.isArray(got) && got.length === want.length, `${where}: ${JSON.stringify(got)}, want ${want.length} elements`);
    want.forEach((w, i) => subset((got as unknown[])[i], w, `${where}[${i}]`));
  } else if (want !== null && typeof want === "object" && !Array.isArray(want)) {
    assert.ok(got !== null && typeof got === "object", `${where}: ${JSON.stringify(got)}, want an object`);
    for (const [k, w] of Object.entries(want)) subset((got as Record<string, unknown>)[k], w, `${where}.${k}`);
  } else assert.deepStrictEqual(got, want, where);
}

// eslint-disable-next-line @typescript-eslint/no-explicit-any
async function call(c: AdminClient, name: string, a: Record<string, any>): Promise<unknown> {
  switch (name) {
    case "lookup_job": return c.lookupJob(a.topic, a.id, { group: a.group });
    case "list_jobs": return c.listJobs(a.topic, { state: a.state, partition: a.partition, limit: a.limit, cursor: a.cursor });
    case "iter_jobs": {
      const out = [];
      for await (const j of c.iterJobs(a.topic, { state: a.state, partition: a.partition, limit: a.limit })) out.push(j);
      return out;
    }
    case "cancel_job": return c.cancelJob(a.topic, a.id, { group: a.group });
    case "delete_job": return c.deleteJob(a.topic, a.id, { group: a.group });
    case "group_status": return c.groupStatus(a.group, { topic: a.topic });
    case "cancel_group": return c.cancelGroup(a.group, { topic: a.topic });
    case "create_topic": return c.createTopic(a.name, { partitions: a.partitions, replication: a.replication });
    case "list_topics": return c.listTopics();
    case "describe_topic": return c.describeTopic(a.name);
    case "delete_topic": return c.deleteTopic(a.name, { force: a.force });
  }
  assert.fail(`a call this test does not know: ${name} (add it to both SDKs)`);
}

const admin = vectors("admin.json");

describe("admin answers", () => {
  for (const c of admin.cases) {
    it(c.name, async () => {
      const con = await console_(c.answers);
      const client = new AdminClient(con.url, { token: admin.token, retry: { minBackoffMs: 1, maxBackoffMs: 20 } });
      let res: unknown, err: unknown;
      try {
        res = await call(client, c.call, c.args);
      } catch (e) {
        err = e;
      } finally {
        await con.close();
      }
      const e = c.expect;
      assert.equal(con.seen.length, e.sends, String(err));
      for (const r of con.seen) {
        assert.equal(r.headers.authorization, `Bearer ${admin.token}`);
        if (r.method !== "GET") assert.equal(r.headers["content-type"], "application/json", "a change carries Content-Type application/json");
      }
      (e.requests ?? []).forEach((want: { method: string; path: string; query: Record<string, string>; body?: unknown }, i: number) => {
        const got = con.seen[i];
        assert.deepStrictEqual([got.method, got.path, got.query], [want.method, want.path, want.query]);
        assert.deepStrictEqual(got.body ? JSON.parse(got.body) : undefined, want.body);
      });
      if (e.connection_error) {
        assert.ok(err instanceof SluiceConnectionError, String(err));
        return;
      }
      if (e.error) {
        assert.ok(err instanceof SluiceError, String(res));
        assert.deepStrictEqual([err.status, err.gateMessage, err.fix], [e.error.status, e.error.message, e.error.fix ?? ""]);
        assert.equal(err.api, "admin API");
        assert.match(err.message, /^sluice admin API: /);
        return;
      }
      assert.equal(err, undefined, String(err));
      subset(res, e.result);
    });
  }

  it("wants an http URL", () => {
    assert.throws(() => new AdminClient("127.0.0.1:8083"), /admin API's base URL/);
  });
});
