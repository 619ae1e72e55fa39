// Request bodies: JSON in strict UTF-8. A large body is decoded and parsed on a worker thread:
// 8 MB of JSON takes the event loop some 60 ms to decode and parse, time in which /health and
// every stream of the other slots would wait.
import { Worker } from "node:worker_threads";
import { HttpError } from "./errors.js";

/** Bodies at least this large are parsed on the worker (a quarter of a millisecond's work here). */
const WORKER_BYTES = 64 * 1024;

const utf8 = new TextDecoder("utf-8", { fatal: true });

/** The body's JSON value; a 400 naming what is wrong when it is not UTF-8 or not JSON. */
function parseHere(body: Uint8Array): unknown {
  let text: string;
  try {
    text = utf8.decode(body);
  } catch {
    throw new HttpError(400, "the request body is not valid UTF-8");
  }
  try {
    return JSON.parse(text);
  } catch (error) {
    throw new HttpError(400, `the request body is not valid JSON: ${(error as Error).message}`);
  }
}

// The worker's code: the same decode and parse, its outcome posted back by job id, at the lowest
// priority (on Linux a nice value is a thread's own): on a machine of few cores, 8 MB of JSON then
// takes the time that the engine's threads and the event loop leave.
const WORKER_SOURCE = `
const { parentPort } = require("node:worker_threads");
const os = require("node:os");
os.setPriority(os.constants.priority.PRIORITY_LOW);
const utf8 = new TextDecoder("utf-8", { fatal: true });
parentPort.on("message", ({ id, bytes }) => {
  let text;
  try {
    text = utf8.decode(bytes);
  } catch {
    return parentPort.postMessage({ id, error: "the request body is not valid UTF-8" });
  }
  try {
    parentPort.postMessage({ id, value: JSON.parse(text) });
  } catch (error) {
    parentPort.postMessage({ id, error: "the request body is not valid JSON: " + error.message });
  }
});
`;

interface Job {
  resolve(value: unknown): void;
  reject(error: unknown): void;
}

/** Parses request bodies, the large ones on one worker thread that lives as long as the parser. */
export class BodyParser {
  #worker: Worker | undefined;
  #jobs = new Map<number, Job>();
  #nextId = 0;

  parse(body: Buffer): Promise<unknown> {
    if (body.byteLength < WORKER_BYTES) return Promise.resolve().then(() => parseHere(body));
    const id = this.#nextId++;
    // Bytes the worker owns, moved, not cloned: the body's own memory when it spans all of it (as a
    // large body does), else a copy (the body may share a pooled buffer).
    const memory = body.buffer;
    const whole = memory instanceof ArrayBuffer && body.byteOffset === 0 && body.byteLength === memory.byteLength;
    const bytes = whole ? new Uint8Array(memory) : new Uint8Array(body);
    return new Promise((resolve, reject) => {
      this.#jobs.set(id, { resolve, reject });
      this.#ensureWorker().postMessage({ id, bytes }, [bytes.buffer]);
    });
  }

  /** Ends the worker; bodies still being parsed get a 503. */
  async close(): Promise<void> {
    const worker = this.#worker;
    this.#worker = undefined;
    this.#failAll(new HttpError(503, "the server is shutting down"));
    await worker?.terminate();
  }

  #ensureWorker(): Worker {
    if (this.#worker) return this.#worker;
    const worker = new Worker(WORKER_SOURCE, { eval: true });
    // Idle, it does not keep the process alive; close() ends it with the app.
    worker.unref();
    worker.on("message", ({ id, value, error }: { id: number; value?: unknown; error?: string }) => {
      const job = this.#jobs.get(id);
      this.#jobs.delete(id);
      if (error === undefined) job?.resolve(value);
      else job?.reject(new HttpError(400, error));
    });
    // A worker that dies (out of memory on a body) fails the bodies it held; the next body starts another.
    let failure = "it exited";
    worker.on("error", (error) => (failure = error.message));
    worker.on("exit", () => {
      if (this.#worker !== worker) return;
      this.#worker = undefined;
      this.#failAll(new HttpError(500, `the body parser failed: ${failure}`));
    });
    this.#worker = worker;
    return worker;
  }

  #failAll(error: HttpError): void {
    for (const job of this.#jobs.values()) job.reject(error);
    this.#jobs.clear();
  }
}
