import { readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

// dist/test/ -> sdk/testdata: the shared vectors the Go and Python clients' tests read too.
const testdata = join(dirname(fileURLToPath(import.meta.url)), "..", "..", "..", "testdata");

// eslint-disable-next-line @typescript-eslint/no-explicit-any
export function vectors(name: string): any {
  return JSON.parse(readFileSync(join(testdata, name), "utf8"));
}
