/**
 * Chat templates render in worker threads: a template comes from a model file, and one that
 * loops for minutes or builds a huge list must cost a request a refusal, not the process its
 * event loop or its heap. Each render has a deadline and each worker a heap limit
 * ({@link CHAT_TEMPLATE_LIMITS}); a worker past either is terminated and replaced.
 *
 * Async renders take a worker of a small pool, so a slow template holds one worker while
 * others render. A synchronous render (for `Model.applyChatTemplate`) posts to a worker of its
 * own and blocks on a shared doorbell until the reply or the deadline.
 * @module
 */
import { createRequire } from "node:module";
import { pathToFileURL } from "node:url";
import { MessageChannel, receiveMessageOnPort, Worker, type MessagePort } from "node:worker_threads";
import { BloomeryError } from "../errors.js";

/** What rendering one chat template may take. */
export const CHAT_TEMPLATE_LIMITS = {
  /** Wall-clock time of one render (a worker's start-up is not counted). */
  timeMs: 5_000,
  /** The heap of the worker that renders (V8's old generation). */
  memoryMb: 256,
  /** Characters of the rendered prompt. */
  outputChars: 32 * 1024 * 1024,
} as const;

/** Renders at once in the pool; more wait for a worker. */
const POOL_SIZE = 4;
/** A worker loads @huggingface/jinja before its first render; this long, it may take. */
const START_MS = 10_000;

/** What a worker renders: a template's source and its variables. @internal */
export interface RenderRequest {
  source: string;
  context: Record<string, unknown>;
}

type Reply = { ready: true } | { text: string } | { error: string; tooComplex: boolean };

/**
 * The worker: it renders one request at a time, keeps the last templates parsed, and answers
 * on its port, ringing the doorbell after each answer for a caller that waits synchronously.
 * It loads its modules with import(), which works whether the code runs as a script or as a
 * module (the default type can be either), from src/ (tests) and from both builds in dist/.
 */
const WORKER_SOURCE = `
(async () => {
  const { workerData } = await import("node:worker_threads");
  const { port, bell, outputChars } = workerData;
  const answer = (reply) => {
    port.postMessage(reply);
    Atomics.add(bell, 0, 1);
    Atomics.notify(bell, 0);
  };
  let Template;
  try {
    const jinja = await import(workerData.jinja);
    Template = jinja.Template ?? jinja.default.Template;
  } catch (error) {
    answer({ error: "@huggingface/jinja does not load: " + String(error && error.message || error), tooComplex: false });
    return;
  }
  const parsed = new Map();
  port.on("message", ({ source, context }) => {
    try {
      let template = parsed.get(source);
      if (!template) {
        template = new Template(source);
        parsed.set(source, template);
        if (parsed.size > 8) parsed.delete(parsed.keys().next().value);
      }
      const text = template.render(context);
      if (text.length > outputChars) {
        answer({ error: "it rendered " + text.length + " characters; the limit is " + outputChars, tooComplex: true });
      } else {
        answer({ text });
      }
    } catch (error) {
      // A RangeError is a limit met inside V8 (the stack, a string's length), not a template bug.
      answer({ error: String(error && error.message || error), tooComplex: error instanceof RangeError });
    }
  });
  answer({ ready: true });
})();
`;

class RenderWorker {
  readonly worker: Worker;
  readonly port: MessagePort;
  readonly #bell = new Int32Array(new SharedArrayBuffer(4));
  #rung = 0;
  /** Set once the thread ended (terminated, out of memory, or failed). */
  dead = false;

  constructor() {
    const channel = new MessageChannel();
    this.port = channel.port1;
    this.worker = new Worker(WORKER_SOURCE, {
      eval: true,
      // The parent's flags (--input-type, loaders) are not the worker's business.
      execArgv: [],
      workerData: {
        jinja: pathToFileURL(createRequire(import.meta.url).resolve("@huggingface/jinja")).href,
        port: channel.port2,
        bell: this.#bell,
        outputChars: CHAT_TEMPLATE_LIMITS.outputChars,
      },
      transferList: [channel.port2],
      resourceLimits: { maxOldGenerationSizeMb: CHAT_TEMPLATE_LIMITS.memoryMb },
    });
    // A render in flight listens for failures too; these keep an idle worker's end from being
    // an uncaught 'error' event, and mark it so it is not handed out.
    this.worker.on("error", () => {});
    this.worker.on("exit", () => {
      this.dead = true;
    });
  }

  post(request: RenderRequest): void {
    try {
      this.port.postMessage(request);
    } catch (error) {
      throw new BloomeryError(
        "INVALID_ARGUMENT",
        `the chat template's variables must be plain data (${(error as Error).message})`,
        {},
        { cause: error },
      );
    }
  }

  /** The next reply, waiting synchronously until `deadline` (Date.now() time); undefined past it. */
  waitReply(deadline: number): Reply | undefined {
    for (;;) {
      const received = receiveMessageOnPort(this.port);
      if (received) return received.message as Reply;
      const left = deadline - Date.now();
      if (left <= 0) return undefined;
      Atomics.wait(this.#bell, 0, this.#rung, left);
      this.#rung = Atomics.load(this.#bell, 0);
    }
  }

  terminate(): void {
    void this.worker.terminate();
  }
}

function tooComplex(why: string): BloomeryError {
  return new BloomeryError("CHAT_TEMPLATE_TOO_COMPLEX", `the model's chat template was stopped: ${why}`, {
    limits: CHAT_TEMPLATE_LIMITS,
  });
}

const pastDeadline = () => tooComplex(`it ran past its ${CHAT_TEMPLATE_LIMITS.timeMs} ms deadline`);

function resultOf(reply: Reply): string {
  if ("text" in reply) return reply.text;
  if ("error" in reply) {
    if (reply.tooComplex) throw tooComplex(reply.error);
    throw new BloomeryError("CHAT_TEMPLATE", `the model's chat template failed: ${reply.error}`);
  }
  throw new BloomeryError("INTERNAL", "the chat template's worker answered out of turn");
}

let syncWorker: RenderWorker | undefined;

/** Renders on this thread's own worker, blocking until the reply or the deadline. @internal */
export function renderSync(request: RenderRequest): string {
  let worker = syncWorker;
  if (!worker) {
    worker = new RenderWorker();
    worker.worker.unref();
    const reply = worker.waitReply(Date.now() + START_MS);
    if (!reply || !("ready" in reply)) {
      worker.terminate();
      const why = reply && "error" in reply ? `: ${reply.error}` : "";
      throw new BloomeryError("INTERNAL", `the chat template's worker did not start${why}`);
    }
    syncWorker = worker;
  }
  worker.post(request);
  const reply = worker.waitReply(Date.now() + CHAT_TEMPLATE_LIMITS.timeMs);
  if (!reply) {
    // Past the deadline, or out of memory (which ends the worker without a word).
    worker.terminate();
    syncWorker = undefined;
    throw tooComplex(
      `it ran past its ${CHAT_TEMPLATE_LIMITS.timeMs} ms deadline or out of its ${CHAT_TEMPLATE_LIMITS.memoryMb} MB of memory`,
    );
  }
  return resultOf(reply);
}

/** Workers of the async pool that are idle, and renders waiting for one. */
const idle: RenderWorker[] = [];
let workers = 0;
const waiting: { resolve: (worker: RenderWorker) => void; reject: (error: unknown) => void }[] = [];

/** Renders on a worker of the pool, which it holds until the reply, the deadline or its death. @internal */
export async function renderAsync(request: RenderRequest): Promise<string> {
  const worker = await acquire();
  worker.worker.ref();
  worker.port.ref();
  return new Promise<string>((resolve, reject) => {
    let settled = false;
    const finish = (dead: boolean, outcome: () => string) => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      worker.port.off("message", onMessage);
      worker.worker.off("error", onError);
      worker.worker.off("exit", onExit);
      if (dead) {
        worker.terminate();
        workers--;
        handOver(undefined);
      } else {
        handOver(worker);
      }
      try {
        resolve(outcome());
      } catch (error) {
        reject(error);
      }
    };
    const onMessage = (reply: Reply) => finish(false, () => resultOf(reply));
    const onError = (error: Error & { code?: string }) =>
      finish(true, () => {
        if (error.code === "ERR_WORKER_OUT_OF_MEMORY") {
          throw tooComplex(`it ran out of its ${CHAT_TEMPLATE_LIMITS.memoryMb} MB of memory`);
        }
        throw new BloomeryError(
          "INTERNAL",
          `the chat template's worker failed: ${error.message}`,
          {},
          { cause: error },
        );
      });
    const onExit = () =>
      finish(true, () => {
        throw new BloomeryError("INTERNAL", "the chat template's worker exited");
      });
    const timer = setTimeout(
      () =>
        finish(true, () => {
          throw pastDeadline();
        }),
      CHAT_TEMPLATE_LIMITS.timeMs,
    );
    worker.port.on("message", onMessage);
    worker.worker.on("error", onError);
    worker.worker.on("exit", onExit);
    try {
      worker.post(request);
    } catch (error) {
      finish(false, () => {
        throw error;
      });
    }
  });
}

/** An idle worker, a new one while the pool has room, else the next to be handed over. */
function acquire(): Promise<RenderWorker> {
  for (let free = idle.pop(); free; free = idle.pop()) {
    if (!free.dead) return Promise.resolve(free);
    workers--;
  }
  if (workers < POOL_SIZE) {
    workers++;
    return start();
  }
  return new Promise((resolve, reject) => waiting.push({ resolve, reject }));
}

/** A worker started and ready (jinja loaded), so that its start-up does not count against a deadline. */
function start(): Promise<RenderWorker> {
  const worker = new RenderWorker();
  return new Promise((resolve, reject) => {
    const fail = (error: Error) => {
      workers--;
      worker.terminate();
      reject(new BloomeryError("INTERNAL", `the chat template's worker did not start: ${error.message}`));
    };
    worker.worker.once("error", fail);
    worker.port.once("message", (reply: Reply) => {
      worker.worker.off("error", fail);
      if ("ready" in reply) resolve(worker);
      else fail(new Error("error" in reply ? reply.error : "it answered out of turn"));
    });
  });
}

/** Gives a worker (or, for one that died, room for a new one) to the next waiting render. */
function handOver(worker: RenderWorker | undefined): void {
  if (worker) {
    worker.worker.unref();
    worker.port.unref();
  }
  const next = waiting.shift();
  if (!next) {
    if (worker) idle.push(worker);
    return;
  }
  if (worker) {
    next.resolve(worker);
    return;
  }
  workers++;
  start().then(next.resolve, next.reject);
}
