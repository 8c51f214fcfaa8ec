// The shared vectors under sdk/testdata: the same files the Go client's
// tests (client/sdkvectors_test.go) and the Python SDK's read.

import assert from "node:assert/strict";
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { describe, it } from "node:test";
import { BatchError, Client, Raw, SignatureError, ShortSecretError, SluiceError, verifyCallback, type Job } from "../src/index.js";
import { vectors } from "./testdata.js";

interface Answer { status: number; headers?: Record<string, string>; body?: unknown; body_text?: string }

/** A loopback gate that answers from a script and keeps the bodies. */
async function gate(answers: Answer[]): Promise<{ url: string; bodies: string[]; close: () => Promise<void> }> {
  const bodies: string[] = [];
  const server: Server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on("data", (c: Buffer) => chunks.push(c));
    req.on("end", () => {
      bodies.push(Buffer.concat(chunks).toString("utf8"));
      const a = answers[bodies.length - 1];
      if (!a) {
        res.writeHead(418).end();
        return;
      }
      res.writeHead(a.status, a.headers ?? {});
      res.end(a.body_text ?? JSON.stringify(a.body));
    });
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  return { url, bodies, close: () => new Promise((r) => { server.closeAllConnections(); server.close(() => r()); }) };
}

// eslint-disable-next-line @typescript-eslint/no-explicit-any
function options(o: Record<string, any>): Record<string, unknown> {
  const m: Record<string, string> = { max_attempts: "maxAttempts", timeout_ms: "timeoutMs", retain_ms: "retainMs", idempotency_key: "idempotencyKey", run_at: "runAt" };
  const out: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(o)) out[m[k] ?? k] = k === "run_at" ? new Date(v) : v;
  return out;
}

const ULID = /^[0-9A-HJKMNP-TV-Z]{26}$/;
const env = vectors("envelopes.json");

describe("envelopes", () => {
  for (const c of env.cases) {
    it(c.name, async () => {
      const g = await gate([{ status: 202, body: { id: "x", topic: "jobs", partition: 0, offset: 0 } }]);
      try {
        const payload = c.payload_raw !== undefined ? new Raw(c.payload_raw) : c.payload;
        await new Client(g.url).enqueue("jobs", c.type, payload, options(c.options));
      } finally {
        await g.close();
      }
      const got = JSON.parse(g.bodies[0]);
      if (c.generated_id) {
        assert.match(got.id, ULID);
        delete got.id;
      }
      assert.deepStrictEqual(got, c.envelope);
      if (c.payload_bytes !== undefined) assert.ok(g.bodies[0].includes(`"payload":${c.payload_bytes}`), g.bodies[0]);
    });
  }
  for (const c of env.groups) {
    it(c.name, async () => {
      const g = await gate([{ status: 202, body: { group: "x", topic: "jobs", count: 0, status: "" } }]);
      try {
        await new Client(g.url).enqueueGroup("jobs", c.type, c.items, options(c.options));
      } finally {
        await g.close();
      }
      const lines = g.bodies[0].replace(/\n$/, "").split("\n");
      assert.deepStrictEqual(JSON.parse(lines[0]), c.fields);
      assert.deepStrictEqual(lines.slice(1), c.item_lines);
    });
  }
});

describe("gate answers", () => {
  for (const c of vectors("answers.json").cases) {
    it(c.name, async () => {
      const g = await gate(c.answers);
      const client = new Client({ url: g.url, retry: { maxAttempts: c.retry?.max_attempts ?? 10, minBackoffMs: 1, maxBackoffMs: 20 } });
      // eslint-disable-next-line @typescript-eslint/no-explicit-any
      let res: any, err: unknown;
      try {
        switch (c.call) {
          case "enqueue": res = await client.enqueue("jobs", "hello", { n: 1 }); break;
          case "batch": res = await client.enqueueBatch("jobs", [{ type: "a" }, { type: "b" }, { type: "c" }] as Job[]); break;
          case "group": res = await client.enqueueGroup("jobs", "thumb", [1, 2], { id: "grp-9" }); break;
          case "lookup": res = await client.lookupJob("jobs", "X"); break;
          case "group_status": res = await client.groupStatus("jobs", "grp-1"); break;
          default: assert.fail(`a call this test does not know: ${c.call}`);
        }
      } catch (e) {
        err = e;
      } finally {
        await g.close();
      }
      const e = c.expect;
      assert.equal(g.bodies.length, e.sends, String(err));
      if (e.same_body) for (const b of g.bodies) assert.equal(b, g.bodies[0]);
      if (e.error) {
        assert.ok(err instanceof SluiceError && !(err instanceof BatchError), String(err));
        assert.deepStrictEqual([err.status, err.gateMessage, err.field, err.ids], [e.error.status, e.error.message, e.error.field ?? "", e.error.ids ?? []]);
        return;
      }
      if (e.batch) {
        if (e.batch.rejected) {
          assert.ok(err instanceof BatchError, String(err));
          res = err.result;
        } else assert.equal(err, undefined);
        assert.deepStrictEqual([res.accepted, res.rejected], [e.batch.accepted, e.batch.rejected]);
        const ids = JSON.parse(g.bodies[0]).map((j: { id: string }) => j.id);
        e.batch.sent.forEach((want: number[], i: number) => assert.deepStrictEqual(JSON.parse(g.bodies[i]).map((j: { id: string }) => ids.indexOf(j.id)), want));
        for (const r of res.results) {
          const want = e.batch.item_errors[String(r.index)];
          if (want) assert.deepStrictEqual([r.error?.status, r.error?.field], [want.status, want.field]);
          else assert.equal(r.error, undefined);
        }
        return;
      }
      assert.equal(err, undefined, String(err));
      if (e.state) assert.equal(res.state, e.state);
      for (const [k, v] of Object.entries(e.result ?? {})) assert.deepStrictEqual(res[k], v, k);
    });
  }
});

describe("signatures", () => {
  for (const c of vectors("signatures.json").cases) {
    it(c.name, () => {
      const headers = { "sluice-signature": c.header, "Sluice-Group": c.group, "SLUICE-ATTEMPT": c.attempt };
      const run = () => verifyCallback(headers, c.body, c.secrets, { v2Only: c.v2_only, now: c.now });
      if (c.expect === "ok") assert.equal(run(), c.body);
      else if (c.expect === "short_secret") assert.throws(run, ShortSecretError);
      else assert.throws(run, (e: unknown) => e instanceof SignatureError && e.kind === c.expect);
    });
  }
});
