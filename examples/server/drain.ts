// Shutting down (SIGTERM, SIGINT): llama-server stops at once, cutting what runs; bloomery-serve drains within a
// deadline instead, as llama-server's router gives a model instance 10 s to stop before it kills it. New requests
// and those waiting for a slot are answered 503 at once, as are clients still sending their request; generations
// running go on until they end or the deadline stops them (a 503, or an error event on a stream); then every
// connection left, idle or slow, is closed.
import type { FastifyInstance, FastifyReply, FastifyRequest } from "fastify";
import type { ServerContext } from "./context.js";
import { errorBody } from "./errors.js";
import { shuttingDown } from "./slots.js";

/** Seconds the generations running at a shutdown have to end before they are stopped. */
export const DRAIN_SECONDS = 10;

/** How long the generations stopped at the deadline have to send their last event. */
const STOP_GRACE_MS = 2000;

export interface DrainReport {
  /** Generations running when the shutdown began. */
  running: number;
  /** Requests refused because they waited for a slot. */
  waiting: number;
  /** Whether some had to be stopped at the deadline. */
  stopped: boolean;
  /** Whether every request had its answer before the connections were closed. */
  drained: boolean;
}

/** The requests between their first byte and their response's end, and whether their body is still coming. */
export class OpenRequests {
  readonly #open = new Map<FastifyRequest, { reply: FastifyReply; receiving: boolean }>();
  #settled: (() => void)[] = [];

  /** Hooks the tracking into the app (before any other onRequest hook, so that every request counts). */
  register(app: FastifyInstance): void {
    app.addHook("onRequest", async (request, reply) => {
      this.#open.set(request, { reply, receiving: true });
      reply.raw.once("close", () => {
        this.#open.delete(request);
        if (this.#open.size === 0) for (const resolve of this.#settled.splice(0)) resolve();
      });
    });
    app.addHook("preValidation", async (request) => {
      const entry = this.#open.get(request);
      if (entry) entry.receiving = false;
    });
  }

  /** Answers 503 to the requests whose body is still coming, and closes their connections. */
  refuseReceiving(): void {
    const body = JSON.stringify(errorBody(shuttingDown("the request had not arrived whole")));
    for (const { reply, receiving } of this.#open.values()) {
      if (!receiving) continue;
      reply.hijack();
      const raw = reply.raw;
      if (raw.headersSent) raw.destroy();
      else {
        raw.writeHead(503, { "content-type": "application/json", connection: "close" });
        raw.end(body, () => raw.destroy());
      }
    }
  }

  /** Resolves once no request is open. */
  settled(): Promise<void> {
    return this.#open.size === 0 ? Promise.resolve() : new Promise((resolve) => this.#settled.push(resolve));
  }
}

/** `promise`'s settling, or false after `ms`. */
async function within(promise: Promise<unknown>, ms: number): Promise<boolean> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<false>((resolve) => (timer = setTimeout(() => resolve(false), ms)));
  try {
    return await Promise.race([promise.then(() => true as const), late]);
  } finally {
    clearTimeout(timer);
  }
}

/**
 * Drains the server and closes it: see the file's comment. `deadlineMs` (bloomery-serve: {@link DRAIN_SECONDS})
 * bounds the wait for running generations; the whole takes at most it plus a few seconds.
 */
export async function drain(
  app: FastifyInstance,
  context: ServerContext,
  requests: OpenRequests,
  deadlineMs: number,
): Promise<DrainReport> {
  const slots = context.loaded ? context.slots : undefined;
  const report: DrainReport = {
    running: slots?.busy ?? 0,
    waiting: slots?.waiting ?? 0,
    stopped: false,
    drained: true,
  };
  context.stopping = true;
  slots?.close();
  requests.refuseReceiving();
  const closed = app.close();
  if (!(await within(requests.settled(), deadlineMs))) {
    report.stopped = true;
    slots?.stop();
    report.drained = await within(requests.settled(), STOP_GRACE_MS);
  }
  // Idle keep-alive connections, and clients that never sent a whole request head, hold nothing worth waiting for.
  app.server.closeAllConnections();
  await within(closed, STOP_GRACE_MS);
  return report;
}
