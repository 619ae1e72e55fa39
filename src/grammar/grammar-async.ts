/**
 * Grammars are built on a worker thread: a JSON schema at JSON_SCHEMA_LIMITS (a 10,000-value
 * enum), or a chat's tools whose schemas are, takes the converter a few hundred milliseconds
 * before V8 has compiled it, time in which this thread's other work (a server's /health, the
 * streams of its other slots) would wait.
 *
 * One worker, started on the first grammar, builds them in turn; it holds the process open only
 * while a grammar is being built. Its code is grammar-worker.ts, built as dist/grammar-worker.cjs
 * beside the library; run from source (the tests), it is that .ts file, which the tests' module
 * hooks compile (test/child-loader.mjs, in the flags it inherits).
 * @module
 */
import { Worker } from "node:worker_threads";
import { BloomeryError, type BloomeryErrorCode } from "../errors.js";
import type { GrammarAnswer, GrammarJob, ToolCallJob } from "./grammar-worker.js";

const FROM_SOURCE = import.meta.url.endsWith(".ts");
/** The worker's file: beside this module's source, or beside the built library. */
const WORKER_FILE = new URL(FROM_SOURCE ? "./grammar-worker.ts" : "./grammar-worker.cjs", import.meta.url);

interface Job {
  resolve(grammar: string): void;
  reject(error: unknown): void;
}

let worker: Worker | undefined;
const jobs = new Map<number, Job>();
let nextId = 0;

/**
 * The GBNF grammar of `schema`, as jsonSchemaToGrammar makes it, converted on the worker thread.
 * Rejects with the errors jsonSchemaToGrammar throws, and INVALID_ARGUMENT for a schema that is
 * not plain data (a function, a symbol). @internal
 */
export function jsonSchemaToGrammarAsync(schema: unknown): Promise<string> {
  return post((id) => ({ id, schema }), "jsonSchema");
}

/**
 * A tool call's grammar (see ToolCallJob), built on the worker thread, for a format that constrains
 * calls. Rejects with the errors of the tools' schemas, and INVALID_ARGUMENT for tools that are not
 * plain data. @internal
 */
export function toolCallGrammarAsync(job: ToolCallJob): Promise<string> {
  return post((id) => ({ id, toolCall: job }), "tools");
}

function post(job: (id: number) => GrammarJob, what: string): Promise<string> {
  const id = nextId++;
  return new Promise<string>((resolve, reject) => {
    const thread = ensureWorker();
    try {
      thread.postMessage(job(id));
    } catch (error) {
      throw new BloomeryError(
        "INVALID_ARGUMENT",
        `${what} must be plain data (${(error as Error).message})`,
        {},
        { cause: error },
      );
    }
    jobs.set(id, { resolve, reject });
    thread.ref();
  });
}

function ensureWorker(): Worker {
  if (worker) return worker;
  // The built worker takes none of the process's flags (an application's loaders are not its
  // business); from source it needs the module hooks they register.
  const thread = new Worker(WORKER_FILE, FROM_SOURCE ? {} : { execArgv: [] });
  thread.on("message", (answer: GrammarAnswer) => {
    const job = jobs.get(answer.id);
    jobs.delete(answer.id);
    if (jobs.size === 0) thread.unref();
    if ("grammar" in answer) job?.resolve(answer.grammar);
    else
      job?.reject(
        new BloomeryError(answer.error.code as BloomeryErrorCode, answer.error.message, answer.error.details),
      );
  });
  // A worker that dies fails the grammars it held; the next grammar starts another.
  let failure = "it exited";
  thread.on("error", (error) => (failure = error.message));
  thread.on("exit", () => {
    if (worker !== thread) return;
    worker = undefined;
    for (const job of jobs.values()) {
      job.reject(new BloomeryError("INTERNAL", `the grammar worker failed: ${failure}`));
    }
    jobs.clear();
  });
  // Idle, it does not keep the process alive: each grammar holds it open until its answer. (After
  // the listeners: a 'message' listener refs the worker's port again.)
  thread.unref();
  worker = thread;
  return thread;
}
