// The receiving side of the worker's built-in http handler (`sluice worker
// --http type=URL`, `sluice dev --http`) as a plain (Request) =>
// Promise<Response> function that any framework mounts, and a receiver of
// group callbacks.
//
// The worker POSTs a job's payload byte for byte with the headers
// Sluice-Job-Id, Sluice-Job-Type, Sluice-Attempt and Sluice-Group, and
// reads the answer (docs/worker.md, docs/sdk.md): 2xx done (the body is
// the job's result); 4xx other than 408 and 429 permanent (the job is
// dead); 429 and 503 with Retry-After retried after that delay; other 5xx
// retried with the worker's backoff.

import { timingSafeEqual } from "node:crypto";
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import { checkSecrets, SignatureError, verifyCallback, type Secret } from "./callback.js";

/** One attempt of a job, as the worker's http handler delivers it. */
export interface Delivery<P = unknown> {
  id: string;
  type: string;
  attempt: number;
  /** The job's group, "" for none. */
  group: string;
  /** The payload, decoded. */
  payload: P;
  /** The payload as sent, byte for byte. */
  body: Uint8Array;
  headers: Headers;
}

/** Throw to end the job for good: answered 422, the job goes dead with this message. */
export class Kill extends Error {
  constructor(message = "killed by the handler") {
    super(message);
    this.name = "Kill";
  }
}

/** Throw to have the worker retry the job after afterSeconds (Retry-After): 503, or 429. */
export class RetryLater extends Error {
  readonly afterSeconds: number;
  readonly status: 429 | 503;
  constructor(message = "retry later", o: { afterSeconds?: number; status?: 429 | 503 } = {}) {
    super(message);
    this.name = "RetryLater";
    this.afterSeconds = Math.max(1, Math.ceil(o.afterSeconds ?? 1));
    this.status = o.status ?? 503;
  }
}

/** A token mismatch is answered 503 with this Retry-After: a worker whose token is out of date retries rather than killing its jobs. */
export const TOKEN_RETRY_AFTER = 60;

function text(status: number, msg: string, headers: Record<string, string> = {}): Response {
  return new Response(status === 204 ? null : msg, { status, headers: { "Content-Type": "text/plain; charset=utf-8", ...headers } });
}

function sameString(a: string, b: string): boolean {
  const x = Buffer.from(a), y = Buffer.from(b);
  return x.length === y.length && timingSafeEqual(x, y);
}

export type JobFunction<P = unknown> = (job: Delivery<P>) => unknown | Promise<unknown>;

/**
 * A handler for the worker's http handler: verifies the request is a
 * delivery (and its token, when set: "Authorization: Bearer <token>"),
 * decodes the payload, runs fn and answers: its return value is the
 * result (200; undefined or null: 204; a string as text; a Uint8Array as
 * bytes; else JSON); Kill answers 422 (dead); RetryLater 503 or 429 with
 * Retry-After; any other error 500 (retried with the worker's backoff).
 */
export function jobHandler<P = unknown>(fn: JobFunction<P>, o: { token?: string } = {}): (req: Request) => Promise<Response> {
  return async (req: Request): Promise<Response> => {
    if (req.method !== "POST") return text(405, "the worker's http handler POSTs jobs here", { Allow: "POST" });
    if (o.token !== undefined && !sameString(req.headers.get("Authorization") ?? "", `Bearer ${o.token}`)) {
      return text(503, "Authorization does not match this handler's token: set the worker's header Authorization: Bearer <token>", { "Retry-After": String(TOKEN_RETRY_AFTER) });
    }
    const id = req.headers.get("Sluice-Job-Id") ?? "", type = req.headers.get("Sluice-Job-Type") ?? "";
    if (!id || !type) return text(400, "not a delivery of the worker's http handler: no Sluice-Job-Id or Sluice-Job-Type header");
    const attempt = Number.parseInt(req.headers.get("Sluice-Attempt") || "1", 10);
    if (!Number.isFinite(attempt)) return text(400, "Sluice-Attempt is not a number");
    const body = new Uint8Array(await req.arrayBuffer());
    let payload: unknown = null;
    if (body.length > 0) {
      try {
        payload = JSON.parse(new TextDecoder().decode(body));
      } catch (e) {
        // It will not decode on a later attempt either.
        return text(400, `job ${id} (${type}): the payload is not JSON: ${(e as Error).message}`);
      }
    }
    let value: unknown;
    try {
      value = await fn({ id, type, attempt, group: req.headers.get("Sluice-Group") ?? "", payload: payload as P, body, headers: req.headers });
    } catch (e) {
      if (e instanceof Kill) return text(422, e.message);
      if (e instanceof RetryLater) return text(e.status, e.message, { "Retry-After": String(e.afterSeconds) });
      return text(500, `${(e as Error)?.name ?? "Error"}: ${(e as Error)?.message ?? String(e)}`);
    }
    if (value === undefined || value === null) return new Response(null, { status: 204 });
    if (value instanceof Uint8Array) return new Response(value, { status: 200, headers: { "Content-Type": "application/octet-stream" } });
    if (typeof value === "string") return text(200, value);
    return new Response(JSON.stringify(value), { status: 200, headers: { "Content-Type": "application/json" } });
  };
}

/**
 * A receiver of a group's callback: verified against secrets (401 when it
 * does not verify), decoded, given to fn, answered 200 (an error in fn
 * answers 500, and the coordinator delivers it again). secrets null takes
 * unsigned callbacks: only for a coordinator without
 * --callback-secret-file, such as plain sluice dev.
 */
export function callbackHandler<C = Record<string, unknown>>(fn: (callback: C) => unknown | Promise<unknown>, o: { secrets: Secret[] | Secret | null; v2Only?: boolean }): (req: Request) => Promise<Response> {
  const keys = o.secrets === null ? null : checkSecrets(o.secrets);
  return async (req: Request): Promise<Response> => {
    if (req.method !== "POST") return text(405, "callbacks are POSTed", { Allow: "POST" });
    const body = new Uint8Array(await req.arrayBuffer());
    if (keys) {
      try {
        verifyCallback(req.headers, body, keys, { v2Only: o.v2Only });
      } catch (e) {
        if (e instanceof SignatureError) return text(401, e.message);
        throw e;
      }
    }
    let cb: C;
    try {
      cb = JSON.parse(new TextDecoder().decode(body));
    } catch (e) {
      return text(400, `the callback is not JSON: ${(e as Error).message}`);
    }
    try {
      await fn(cb);
    } catch (e) {
      return text(500, `${(e as Error)?.name ?? "Error"}: ${(e as Error)?.message ?? String(e)}`);
    }
    return text(200, "ok");
  };
}

/**
 * Serves a (Request) => Promise<Response> function on node:http, for
 * examples and tests (frameworks that speak fetch mount the function
 * directly). Port 0 picks a free one: read server.address().
 */
export async function serve(handler: (req: Request) => Promise<Response>, o: { host?: string; port?: number } = {}): Promise<Server> {
  const server = createServer((req: IncomingMessage, res: ServerResponse) => {
    const chunks: Buffer[] = [];
    req.on("data", (c: Buffer) => chunks.push(c));
    req.on("end", async () => {
      try {
        const headers = new Headers();
        for (const [k, v] of Object.entries(req.headers)) if (v !== undefined) headers.set(k, Array.isArray(v) ? v.join(", ") : v);
        const body = req.method === "GET" || req.method === "HEAD" ? undefined : Buffer.concat(chunks);
        const resp = await handler(new Request(`http://${req.headers.host ?? "localhost"}${req.url ?? "/"}`, { method: req.method, headers, body }));
        res.writeHead(resp.status, Object.fromEntries(resp.headers));
        res.end(Buffer.from(await resp.arrayBuffer()));
      } catch (e) {
        res.writeHead(500, { "Content-Type": "text/plain" });
        res.end(String(e));
      }
    });
  });
  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen(o.port ?? 0, o.host ?? "127.0.0.1", resolve);
  });
  return server;
}
