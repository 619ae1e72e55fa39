// Request bodies: JSON in strict UTF-8. No multi-megabyte copy of a body runs on the event loop,
// where it would hold up /health and every stream of the other slots (on a VM where a first touch
// of a page costs ~15 us, each fresh 8 MB copy takes ~30 ms):
// - each chunk is copied as it arrives into the body's own blocks (small copies, spread over the
//   upload), which move to a worker thread rather than being joined here;
// - the worker decodes and parses a large body, and hands back each long string of it as UTF-8
//   bytes that it moves back: a route that takes text as bytes (Fields.text: /tokenize's content)
//   passes them on without the string ever existing on the event loop; read as a string, the
//   field decodes then, once.
import type { Readable } from "node:stream";
import { Worker } from "node:worker_threads";
import { errorCodes, type FastifyRequest } from "fastify";
import { HttpError } from "./errors.js";

/** Bodies at least this large are parsed on the worker (a quarter of a millisecond's work here). */
const WORKER_BYTES = 64 * 1024;

/** A body arrives into blocks of at most this many bytes when it does not say its length. */
const BLOCK_BYTES = 1024 * 1024;

/** Strings of a large body at least this long come back from the worker as UTF-8 bytes. */
const BYTES_TEXT_CHARS = 64 * 1024;

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

// The worker's code: the blocks joined, decoded and parsed, at the lowest priority (on Linux a
// nice value is a thread's own: on a machine of few cores, 8 MB of JSON then takes the time that
// the engine's threads and the event loop leave). Each string of at least BYTES_TEXT_CHARS is
// replaced by null in the value and sent as its path and UTF-8 bytes, moved, not cloned.
const WORKER_SOURCE = `
const { parentPort } = require("node:worker_threads");
const os = require("node:os");
os.setPriority(os.constants.priority.PRIORITY_LOW);
const utf8 = new TextDecoder("utf-8", { fatal: true });
const encoder = new TextEncoder();
const BYTES_TEXT_CHARS = ${BYTES_TEXT_CHARS};

function join(blocks, length) {
  if (blocks.length === 1) return blocks[0];
  const bytes = new Uint8Array(length);
  let at = 0;
  for (const block of blocks) {
    bytes.set(block, at);
    at += block.byteLength;
  }
  return bytes;
}

// Iterative, each entry linked to its holder's: a body may nest as deep as it is long.
function takeTexts(value, texts) {
  const pending = [{ value, up: undefined, key: undefined }];
  while (pending.length > 0) {
    const entry = pending.pop();
    const holder = entry.value;
    if (typeof holder !== "object" || holder === null) continue;
    for (const key of Object.keys(holder)) {
      const item = holder[key];
      const at = Array.isArray(holder) ? Number(key) : key;
      if (typeof item === "string" && item.length >= BYTES_TEXT_CHARS) {
        const path = [at];
        for (let e = entry; e.up !== undefined; e = e.up) path.unshift(e.key);
        texts.push({ path, bytes: encoder.encode(item) });
        holder[key] = null;
      } else if (typeof item === "object" && item !== null) {
        pending.push({ value: item, up: entry, key: at });
      }
    }
  }
}

parentPort.on("message", ({ id, blocks, length, arena }) => {
  // The arena goes back with the answer, decoded or not.
  const back = (answer, moved = []) =>
    parentPort.postMessage({ ...answer, arena: arena ? blocks[0].buffer : undefined }, arena ? [...moved, blocks[0].buffer] : moved);
  let text;
  try {
    text = utf8.decode(join(blocks, length));
  } catch {
    return back({ id, error: "the request body is not valid UTF-8" });
  }
  // A value nested too deep to clone back is refused as JSON.parse refuses one too deep to parse.
  try {
    let value = JSON.parse(text);
    const texts = [];
    if (typeof value === "string" && value.length >= BYTES_TEXT_CHARS) {
      texts.push({ path: [], bytes: encoder.encode(value) });
      value = null;
    } else {
      takeTexts(value, texts);
    }
    back({ id, value, texts }, texts.map((t) => t.bytes.buffer));
  } catch (error) {
    back({ id, error: "the request body is not valid JSON: " + error.message });
  }
});
`;

/** A long string of a body, held as its UTF-8 bytes: where it sits and its bytes. */
interface BytesText {
  path: (string | number)[];
  bytes: Uint8Array;
}

/** The UTF-8 bytes of the strings that are still held as bytes: by the object or array holding them, and their key. */
const heldAsBytes = new WeakMap<object, Map<string | number, Uint8Array>>();

/**
 * The UTF-8 bytes of `holder[key]` when the body parser holds that string as bytes (a long one of a
 * large body, not yet read as a string); otherwise undefined.
 */
export function textBytes(holder: object, key: string | number): Uint8Array | undefined {
  return heldAsBytes.get(holder)?.get(key);
}

/** Puts each text back in `value` as a property that decodes it when first read as a string. */
function restoreTexts(value: unknown, texts: BytesText[]): unknown {
  for (const { path, bytes } of texts) {
    // A body that is one long string: nothing holds it, so it is a string now.
    if (path.length === 0) return Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength).toString("utf8");
    let holder = value as Record<string | number, unknown>;
    for (const key of path.slice(0, -1)) holder = holder[key] as Record<string | number, unknown>;
    const key = path[path.length - 1]!;
    let held = heldAsBytes.get(holder);
    if (!held) heldAsBytes.set(holder, (held = new Map()));
    held.set(key, bytes);
    const settle = (text: unknown) => {
      held.delete(key);
      Object.defineProperty(holder, key, { value: text, writable: true, enumerable: true, configurable: true });
    };
    Object.defineProperty(holder, key, {
      enumerable: true,
      configurable: true,
      get() {
        const text = Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength).toString("utf8");
        settle(text);
        return text;
      },
      set: settle,
    });
  }
  return value;
}

interface WorkerAnswer {
  id: number;
  value?: unknown;
  texts?: BytesText[];
  error?: string;
  /** The arena, back from its loan. */
  arena?: ArrayBuffer;
}

interface Job {
  resolve(value: unknown): void;
  reject(error: unknown): void;
}

/**
 * Parses request bodies, the large ones on one worker thread that lives as long as the parser.
 * A large body that says its length arrives into an arena of `bodyLimit` bytes, touched once when
 * the parser is made and lent to the worker with each body: its pages are warm, where a fresh
 * 8 MB buffer would take the event loop ~30 ms of first touches as its chunks arrive. (A second
 * large body while the arena is lent arrives into fresh memory.)
 */
export class BodyParser {
  #worker: Worker | undefined;
  #jobs = new Map<number, Job>();
  #nextId = 0;
  #arena: ArrayBuffer | undefined;
  readonly #arenaBytes: number;

  constructor(bodyLimit: number) {
    this.#arenaBytes = bodyLimit;
    this.#arena = new Uint8Array(bodyLimit).fill(1).buffer;
  }

  /** The JSON value of `request`'s body, read from `payload` (fastify's content parser's arguments). */
  async parse(request: FastifyRequest, payload: Readable): Promise<unknown> {
    const limit = request.routeOptions.bodyLimit ?? Infinity;
    const declared = Number(request.headers["content-length"]);
    const arena = declared >= WORKER_BYTES && declared <= this.#arenaBytes ? this.#arena : undefined;
    if (arena) this.#arena = undefined;
    let body: { blocks: Uint8Array[]; length: number };
    try {
      body = await receive(payload, declared, limit, arena);
    } catch (error) {
      if (arena) this.#arena = arena;
      throw error;
    }
    const { blocks, length } = body;
    if (length < WORKER_BYTES) return parseHere(join(blocks, length));
    const id = this.#nextId++;
    return new Promise((resolve, reject) => {
      this.#jobs.set(id, { resolve, reject });
      this.#ensureWorker().postMessage(
        { id, blocks, length, arena: arena !== undefined },
        blocks.map((block) => block.buffer as ArrayBuffer),
      );
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
    worker.on("message", ({ id, value, texts, error, arena }: WorkerAnswer) => {
      if (arena) this.#arena = arena;
      const job = this.#jobs.get(id);
      this.#jobs.delete(id);
      if (error === undefined) job?.resolve(restoreTexts(value, texts!));
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

/**
 * The body's bytes, each chunk copied as it arrives (a chunk may be a view of the socket's memory)
 * into blocks of the body's own: one of its content-length (in `arena` when given), or blocks of
 * BLOCK_BYTES when it sends none. Refused as fastify's own body reader refuses: over `limit` (413), or shorter or longer than
 * its content-length (400).
 */
function receive(
  payload: Readable,
  declared: number,
  limit: number,
  arena: ArrayBuffer | undefined,
): Promise<{ blocks: Uint8Array[]; length: number }> {
  const sized = Number.isSafeInteger(declared) && declared >= 0;
  if (sized && declared > limit) return Promise.reject(new errorCodes.FST_ERR_CTP_BODY_TOO_LARGE());
  return new Promise((resolve, reject) => {
    const blocks: Uint8Array[] = [];
    let block = new Uint8Array(0);
    let filled = 0;
    let length = 0;
    const stop = () => {
      payload.removeListener("data", onData);
      payload.removeListener("end", onEnd);
      payload.removeListener("error", onEnd);
    };
    const onData = (chunk: Buffer) => {
      length += chunk.byteLength;
      if (length > limit || (sized && length > declared)) {
        stop();
        reject(
          length > limit
            ? new errorCodes.FST_ERR_CTP_BODY_TOO_LARGE()
            : new errorCodes.FST_ERR_CTP_INVALID_CONTENT_LENGTH(),
        );
        return;
      }
      for (let at = 0; at < chunk.byteLength; ) {
        if (filled === block.byteLength) {
          if (filled > 0) blocks.push(block);
          block = sized
            ? arena
              ? new Uint8Array(arena, 0, declared)
              : new Uint8Array(declared)
            : new Uint8Array(BLOCK_BYTES);
          filled = 0;
        }
        const part = chunk.subarray(at, at + block.byteLength - filled);
        block.set(part, filled);
        filled += part.byteLength;
        at += part.byteLength;
      }
    };
    const onEnd = (error?: Error & { statusCode?: number }) => {
      stop();
      if (error) {
        if (!(typeof error.statusCode === "number" && error.statusCode >= 400)) error.statusCode = 400;
        reject(error);
        return;
      }
      if (sized && length !== declared) {
        reject(new errorCodes.FST_ERR_CTP_INVALID_CONTENT_LENGTH());
        return;
      }
      if (filled > 0) blocks.push(filled === block.byteLength ? block : block.slice(0, filled));
      resolve({ blocks, length });
    };
    payload.on("data", onData);
    payload.on("end", onEnd);
    payload.on("error", onEnd);
    payload.resume();
  });
}

/** The blocks as one array (they are small when joined here). */
function join(blocks: Uint8Array[], length: number): Uint8Array {
  if (blocks.length === 1) return blocks[0]!;
  return Buffer.concat(blocks, length);
}
