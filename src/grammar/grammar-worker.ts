/**
 * The grammar worker's thread: it builds the grammars posted to it (see grammar-async.ts, which
 * starts it): a JSON schema's, and a chat's tool-call grammar (whose tools' schemas are JSON
 * schemas too). It posts back each grammar, or the error as its code, message and details. tsup
 * builds it as an entry of its own, dist/grammar-worker.cjs, next to the library.
 * @module
 */
import { constants, setPriority } from "node:os";
import { parentPort } from "node:worker_threads";
import { forcedCallGrammar, lazyCallGrammar } from "../chat/tool-grammar.js";
import type { ToolCallFormat } from "../chat/output.js";
import type { ChatTool } from "../chat/types.js";
import { BloomeryError } from "../errors.js";
import { jsonSchemaToGrammar } from "./json-schema.js";

// Below the threads that serve everyone (the engine's, the event loop): on a machine of few cores,
// a schema at the limits then takes the time they leave. On Linux (bloomery's platform) a nice
// value is a thread's own, and setPriority(priority) sets this thread's.
setPriority(constants.priority.PRIORITY_LOW);

/**
 * A tool call's grammar to build: a forced call's rest after `opening` (forcedCallGrammar), or,
 * without `opening`, `"auto"`'s lazy grammar (lazyCallGrammar). `controls` are the format's
 * control-token markers and their ids. @internal
 */
export interface ToolCallJob {
  format: ToolCallFormat;
  tools: readonly ChatTool[];
  opening?: string;
  controls: [string, number][];
}

/** A job: what to build, and its id, which the answer carries back. @internal */
export type GrammarJob = { id: number } & ({ schema: unknown } | { toolCall: ToolCallJob });

/** An answer: the grammar, or the error the build threw. @internal */
export type GrammarAnswer =
  | { id: number; grammar: string }
  | { id: number; error: { code: string; message: string; details: Record<string, unknown> } };

function build(job: GrammarJob): string {
  if ("schema" in job) return jsonSchemaToGrammar(job.schema);
  const { format, tools, opening, controls } = job.toolCall;
  const markers = new Map(controls);
  const grammar =
    opening === undefined
      ? lazyCallGrammar(format, tools, markers)?.grammar
      : forcedCallGrammar(format, tools, opening, markers);
  // The chat asks for a forced call's grammar with its own opening, and for a lazy one only where
  // the format has a trigger (lazyCallTrigger).
  if (grammar === undefined) throw new Error(`the ${format} format constrains no call of these tools`);
  return grammar;
}

parentPort!.on("message", (job: GrammarJob) => {
  let answer: GrammarAnswer;
  try {
    answer = { id: job.id, grammar: build(job) };
  } catch (error) {
    answer =
      error instanceof BloomeryError
        ? { id: job.id, error: { code: error.code, message: error.message, details: error.details } }
        : {
            id: job.id,
            error: { code: "INTERNAL", message: `building the grammar failed: ${String(error)}`, details: {} },
          };
  }
  parentPort!.postMessage(answer);
});
