// The handler helper answers the worker's http handler as the worker reads
// answers (worker/httphandler.go): 2xx done, 4xx dead, 429/503 with
// Retry-After retried after it, 5xx retried.

import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { callbackHandler, jobHandler, Kill, RetryLater, ShortSecretError, type Delivery } from "../src/index.js";
import { vectors } from "./testdata.js";

const delivery = { "Sluice-Job-Id": "grp.3", "Sluice-Job-Type": "thumb", "Sluice-Attempt": "2", "Sluice-Group": "grp" };

function post(body: string, headers: Record<string, string> = delivery): Request {
  return new Request("http://127.0.0.1/thumb", { method: "POST", body, headers: { "Content-Type": "application/json", ...headers } });
}

const thumb = jobHandler(async (job: Delivery<{ n: number }>) => {
  if (job.payload.n === 0) throw new Kill("n must not be 0");
  if (job.payload.n < 0) throw new RetryLater("the GPU is busy", { afterSeconds: 2.5, status: 429 });
  if (job.payload.n > 100) throw new Error("boom");
  return { id: job.id, type: job.type, attempt: job.attempt, group: job.group, double: job.payload.n * 2 };
});

describe("jobHandler", () => {
  it("answers a result 200 with the delivery decoded", async () => {
    const r = await thumb(post('{"n": 4}'));
    assert.equal(r.status, 200);
    assert.deepStrictEqual(await r.json(), { id: "grp.3", type: "thumb", attempt: 2, group: "grp", double: 8 });
  });
  it("answers Kill 422, which the worker does not retry", async () => {
    const r = await thumb(post('{"n": 0}'));
    assert.deepStrictEqual([r.status, await r.text()], [422, "n must not be 0"]);
  });
  it("answers RetryLater 429 or 503 with Retry-After", async () => {
    const r = await thumb(post('{"n": -1}'));
    assert.deepStrictEqual([r.status, r.headers.get("Retry-After")], [429, "3"]);
  });
  it("answers an error 500, which the worker retries", async () => {
    const r = await thumb(post('{"n": 101}'));
    assert.equal(r.status, 500);
    assert.match(await r.text(), /Error: boom/);
  });
  it("kills a payload that is not JSON", async () => {
    const r = await thumb(post("<html>"));
    assert.equal(r.status, 400);
  });
  it("refuses a request without the delivery headers", async () => {
    const r = await thumb(post('{"n": 1}', {}));
    assert.equal(r.status, 400);
    assert.match(await r.text(), /Sluice-Job-Id/);
  });
  it("retries (not kills) a wrong token", async () => {
    const h = jobHandler(() => "ok", { token: "s3cret" });
    assert.equal((await h(post("{}", { ...delivery, Authorization: "Bearer other" }))).status, 503);
    assert.equal((await h(post("{}", { ...delivery, Authorization: "Bearer s3cret" }))).status, 200);
  });
  it("answers nothing 204 and text as it is", async () => {
    assert.equal((await jobHandler(() => undefined)(post("{}"))).status, 204);
    assert.equal(await (await jobHandler(() => "<ok> & fine")(post("{}"))).text(), "<ok> & fine");
  });
});

describe("callbackHandler", () => {
  const sig = vectors("signatures.json").cases.find((c: { name: string }) => c.name === "v2 under the receiver's secret");
  it("verifies before acting", async (t) => {
    t.mock.method(Date, "now", () => sig.now * 1000);
    const got: Array<{ group: string }> = [];
    const h = callbackHandler((cb: { group: string }) => void got.push(cb), { secrets: sig.secrets });
    const headers = { "Sluice-Signature": sig.header, "Sluice-Group": sig.group, "Sluice-Attempt": sig.attempt };
    assert.equal((await h(post(sig.body, headers))).status, 200);
    assert.equal((await h(post(sig.body, { ...headers, "Sluice-Group": "other" }))).status, 401);
    assert.deepStrictEqual(got.map((g) => g.group), ["grp-1"]);
  });
  it("refuses a short secret when built", () => {
    assert.throws(() => callbackHandler(() => {}, { secrets: [""] }), ShortSecretError);
  });
});
