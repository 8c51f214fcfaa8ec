// sluice-client: enqueue jobs into Sluice through its gate's HTTP API,
// verify signed group callbacks, serve the worker's http handler, and look
// up, list, cancel and delete jobs, groups and topics through the admin
// API (AdminClient). The
// same contract as the Go client: sdk/testdata holds the vectors all
// three clients are tested against.

export { BatchError, Client } from "./client.js";
export type { Acks, BatchResult, ClientOptions, GroupCancelled, GroupResult, GroupStatus, ItemResult, Job, JobInfo, Result, RetryPolicy } from "./client.js";
export { AdminClient } from "./admin.js";
export type { JobChange, JobListing, JobPage, ListJobsOptions, TopicDeleted, TopicQueue, TopicState } from "./admin.js";
export { SluiceConnectionError, SluiceError } from "./errors.js";
export { newId, Raw } from "./wire.js";
export type { GroupOptions, JobOptions } from "./wire.js";
export { MIN_SECRET_LEN, ShortSecretError, SIGNATURE_HEADER, SignatureError, verifyCallback, verifySignature } from "./callback.js";
export type { Secret, SignatureErrorKind, VerifyOptions } from "./callback.js";
export { callbackHandler, jobHandler, Kill, RetryLater, serve } from "./handler.js";
export type { Delivery, JobFunction } from "./handler.js";
