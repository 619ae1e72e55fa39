/**
 * The JSON schema worker's thread: it converts the schemas posted to it (see json-schema-async.ts,
 * which starts it) and posts back each grammar, or the error as its code, message and details.
 * tsup builds it as an entry of its own, dist/json-schema-worker.cjs, next to the library.
 * @module
 */
import { constants, setPriority } from "node:os";
import { parentPort } from "node:worker_threads";
import { BloomeryError } from "../errors.js";
import { jsonSchemaToGrammar } from "./json-schema.js";

// Below the threads that serve everyone (the engine's, the event loop): on a machine of few cores,
// a schema at the limits then takes the time they leave. On Linux (bloomery's platform) a nice
// value is a thread's own, and setPriority(priority) sets this thread's.
setPriority(constants.priority.PRIORITY_LOW);

/** A job: the schema to convert, and its id, which the answer carries back. @internal */
export interface SchemaJob {
  id: number;
  schema: unknown;
}

/** An answer: the grammar, or the error the conversion threw. @internal */
export type SchemaAnswer =
  | { id: number; grammar: string }
  | { id: number; error: { code: string; message: string; details: Record<string, unknown> } };

parentPort!.on("message", ({ id, schema }: SchemaJob) => {
  let answer: SchemaAnswer;
  try {
    answer = { id, grammar: jsonSchemaToGrammar(schema) };
  } catch (error) {
    answer =
      error instanceof BloomeryError
        ? { id, error: { code: error.code, message: error.message, details: error.details } }
        : {
            id,
            error: { code: "INTERNAL", message: `the JSON schema's conversion failed: ${String(error)}`, details: {} },
          };
  }
  parentPort!.postMessage(answer);
});
