// Verification of signed group callbacks (header Sluice-Signature), as the
// Go client's VerifyCallback: docs/secure/callbacks.md#signatures and
// sdk/testdata/signatures.json hold the contract.
//
//   v2 = HMAC-SHA256(secret, "v2\n<t>\n<Sluice-Group>\n<Sluice-Attempt>\n<body>")
//   v1 = HMAC-SHA256(secret, "<t>.<body>")          (sent during the transition)

import { createHmac, timingSafeEqual } from "node:crypto";

export const SIGNATURE_HEADER = "Sluice-Signature";
export const MIN_SECRET_LEN = 32;
/** How far a signature's time may be from the receiver's clock, in seconds. */
export const TOLERANCE_SECONDS = 300;

export type SignatureErrorKind = "no_signature" | "bad" | "stale" | "no_v2";

const messages: Record<SignatureErrorKind, string> = {
  no_signature: `callback signature: missing or malformed ${SIGNATURE_HEADER} header`,
  bad: "callback signature: no value matches a known secret",
  stale: "callback signature: timestamp outside the tolerance (a replay, or clocks apart)",
  no_v2: "callback signature: no v2 value, and this receiver takes v2 only (the coordinator signs v1 alone, or a v2 was stripped)",
};

/** A callback that must not be acted on: answer 401. kind says why. */
export class SignatureError extends Error {
  readonly kind: SignatureErrorKind;
  constructor(kind: SignatureErrorKind) {
    super(messages[kind]);
    this.name = "SignatureError";
    this.kind = kind;
  }
}

/** No secret, or one under 32 bytes: the receiver's configuration is wrong, whatever the callback. */
export class ShortSecretError extends Error {
  constructor(detail = "") {
    super(`${detail ? detail + ": " : ""}callback secret: shorter than ${MIN_SECRET_LEN} bytes, or none given (give the receiver the coordinator's --callback-secret-file secret, at least ${MIN_SECRET_LEN} bytes; \`openssl rand -hex 32\` makes one)`);
    this.name = "ShortSecretError";
  }
}

export type Secret = string | Uint8Array;

export function checkSecrets(secrets: Secret[] | Secret): Buffer[] {
  const list = Array.isArray(secrets) ? secrets : [secrets];
  const keys = list.map((s) => (typeof s === "string" ? Buffer.from(s, "utf8") : Buffer.from(s)));
  if (keys.length === 0) throw new ShortSecretError();
  keys.forEach((k, i) => {
    if (k.length < MIN_SECRET_LEN) throw new ShortSecretError(`secret ${i + 1} of ${keys.length} is ${k.length} bytes`);
  });
  return keys;
}

export interface VerifyOptions {
  /** Refuse a callback signed v1 only, once every coordinator signs v2. Default false. */
  v2Only?: boolean;
  /** The receiver's clock, unix seconds. Default: now. */
  now?: number;
}

/**
 * Checks a Sluice-Signature value against the body, the Sluice-Group and
 * Sluice-Attempt header values and the secrets (either of two during a
 * rotation). v2 values, when present, decide alone. Throws SignatureError
 * or ShortSecretError.
 */
export function verifySignature(header: string, body: Uint8Array | string, signed: { group: string; attempt: string }, secrets: Secret[] | Secret, o: VerifyOptions = {}): void {
  const keys = checkSecrets(secrets);
  const b = typeof body === "string" ? Buffer.from(body, "utf8") : Buffer.from(body);
  let ts = "";
  const v1: Buffer[] = [], v2: Buffer[] = [];
  for (const part of header.split(",")) {
    const p = part.trim();
    const eq = p.indexOf("=");
    if (eq < 0) throw new SignatureError("no_signature");
    const k = p.slice(0, eq), v = p.slice(eq + 1);
    if (k === "t") {
      ts = v;
      continue;
    }
    if (!/^([0-9a-fA-F]{2})*$/.test(v)) continue;
    if (k === "v1") v1.push(Buffer.from(v, "hex"));
    else if (k === "v2") v2.push(Buffer.from(v, "hex"));
  }
  if (!/^[0-9]+$/.test(ts) || v1.length + v2.length === 0) throw new SignatureError("no_signature");
  if (o.v2Only && v2.length === 0) throw new SignatureError("no_v2");
  const now = o.now ?? Date.now() / 1000;
  if (Math.abs(now - Number(ts)) > TOLERANCE_SECONDS) throw new SignatureError("stale");
  for (const key of keys) {
    const h = createHmac("sha256", key);
    let sigs: Buffer[];
    if (v2.length > 0) {
      h.update(`v2\n${ts}\n${signed.group}\n${signed.attempt}\n`);
      sigs = v2;
    } else {
      h.update(`${ts}.`);
      sigs = v1;
    }
    const want = h.update(b).digest();
    if (sigs.some((s) => s.length === want.length && timingSafeEqual(s, want))) return;
  }
  throw new SignatureError("bad");
}

/** Headers as a fetch Headers, a plain object (any case) or a Node IncomingHttpHeaders. */
export type HeaderSource = Headers | Record<string, string | string[] | undefined>;

export function header(h: HeaderSource, name: string): string {
  if (typeof (h as Headers).get === "function") return (h as Headers).get(name) ?? "";
  const low = name.toLowerCase();
  for (const [k, v] of Object.entries(h)) {
    if (k.toLowerCase() === low) return Array.isArray(v) ? v.join(",") : (v ?? "");
  }
  return "";
}

/**
 * Verifies a group callback from its request headers and raw body; returns
 * the body, to JSON.parse. Throws SignatureError (answer 401, do not act
 * on it) or ShortSecretError.
 */
export function verifyCallback(headers: HeaderSource, body: Uint8Array | string, secrets: Secret[] | Secret, o: VerifyOptions = {}): Uint8Array | string {
  verifySignature(header(headers, SIGNATURE_HEADER), body, { group: header(headers, "Sluice-Group"), attempt: header(headers, "Sluice-Attempt") }, secrets, o);
  return body;
}
