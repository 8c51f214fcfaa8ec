import { STATUS_CODES } from "node:http";

/** The gate's error body. */
export interface ErrorBody {
  error?: string;
  field?: string;
  line?: number;
  column?: number;
  ids?: string[];
  [k: string]: unknown;
}

/**
 * A gate's error answer the client throws rather than retries: a 4xx (fix
 * the request: message says how, field names the envelope field at fault),
 * or a 503 or 504 still failing after the retry policy's sends. ids are the
 * jobs (or the group) whose fate is unknown after a 504.
 */
export class SluiceError extends Error {
  readonly status: number;
  readonly field: string;
  readonly line: number;
  readonly column: number;
  readonly ids: string[];
  readonly attempts: number;
  readonly body: ErrorBody;
  /** The gate's message, which says what to fix. */
  readonly gateMessage: string;

  constructor(status: number, message: string, o: { field?: string; line?: number; column?: number; ids?: string[]; attempts?: number; body?: ErrorBody } = {}) {
    const attempts = o.attempts ?? 1;
    super(`sluice gate: ${status} ${STATUS_CODES[status] ?? ""}: ${message}${attempts > 1 ? ` (after ${attempts} sends)` : ""}`);
    this.name = "SluiceError";
    this.status = status;
    this.gateMessage = message;
    this.field = o.field ?? "";
    this.line = o.line ?? 0;
    this.column = o.column ?? 0;
    this.ids = o.ids ?? [];
    this.attempts = attempts;
    this.body = o.body ?? {};
  }

  /** Sending the same request later may succeed (Kafka unreachable or slow). */
  get temporary(): boolean {
    return this.status === 503 || this.status === 504;
  }

  static fromBody(status: number, eb: ErrorBody, raw: string, attempts: number): SluiceError {
    return new SluiceError(status, eb.error || raw.trim(), { field: eb.field, line: eb.line, column: eb.column, ids: eb.ids, attempts, body: eb });
  }
}

/** The gate could not be reached (or its answer was lost) and the client gave up. */
export class SluiceConnectionError extends Error {
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = "SluiceConnectionError";
  }
}
