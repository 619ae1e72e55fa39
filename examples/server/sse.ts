// Server-sent events as llama-server writes them: `data: <json>\n\n` (with an `event:` line for
// Anthropic's stream), and a signal that aborts the generation when the client goes away.
import type { OutgoingHttpHeaders } from "node:http";
import type { FastifyReply } from "fastify";
import { errorBody, toHttpError } from "./errors.js";

/** Aborts when the connection closes before the whole reply was written. */
export function clientSignal(reply: FastifyReply): AbortSignal {
  const controller = new AbortController();
  reply.raw.on("close", () => {
    if (!reply.raw.writableFinished) controller.abort();
  });
  return controller.signal;
}

/**
 * An event stream whose headers go out with its first event, so that a request refused before
 * then is answered with a plain JSON error and its status.
 */
export class SseStream {
  #open = false;

  constructor(readonly reply: FastifyReply) {}

  get open(): boolean {
    return this.#open;
  }

  send(data: unknown, event?: string): void {
    this.#start();
    const raw = this.reply.raw;
    if (raw.destroyed) return;
    raw.write(`${event ? `event: ${event}\n` : ""}data: ${JSON.stringify(data)}\n\n`);
  }

  /** OpenAI's end marker. */
  done(): void {
    this.#start();
    if (!this.reply.raw.destroyed) this.reply.raw.write("data: [DONE]\n\n");
  }

  end(): void {
    this.#start();
    this.reply.raw.end();
  }

  /** An error after the stream began: llama-server sends it as one more event, then closes. */
  fail(error: unknown, event?: string): void {
    const http = toHttpError(error);
    if (http.status >= 500) this.reply.log.error(error);
    this.send(event ? { type: "error", error: { type: http.type, message: http.message } } : errorBody(http), event);
    this.end();
  }

  #start(): void {
    if (this.#open) return;
    this.#open = true;
    this.reply.hijack();
    this.reply.raw.writeHead(200, {
      // Headers set before the stream began (CORS) go out with it.
      ...(this.reply.getHeaders() as OutgoingHttpHeaders),
      "Content-Type": "text/event-stream",
      "Cache-Control": "no-cache",
      Connection: "keep-alive",
    });
  }
}

/**
 * Runs a streamed reply: an error before the first event is rethrown (a JSON error with its
 * status), one after it ends the stream with an error event, and a client that left gets nothing.
 */
export async function streamReply(
  sse: SseStream,
  signal: AbortSignal,
  work: () => Promise<void>,
  event?: string,
): Promise<void> {
  try {
    await work();
  } catch (error) {
    if (signal.aborted) {
      // Nobody is listening: drop the connection rather than answer.
      if (!sse.open) sse.reply.hijack();
      sse.reply.raw.destroy();
      return;
    }
    if (!sse.open) throw error;
    sse.fail(error, event);
  }
}
