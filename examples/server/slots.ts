// The server's slots: one session each (-np/--parallel of them). A request takes the first slot
// that is free, in arrival order, and holds it until its generation ends; the engine decodes every
// busy slot in one forward pass per step (the model is loaded with parallel = the slot count).
// A shutdown closes the slots: waiting requests and new ones are refused, running ones go on until
// they end or the shutdown stops them.
import type {
  ChatChunk,
  ChatMessage,
  ChatOptions,
  ChatResult,
  GenerateChunk,
  GenerateOptions,
  GenerateResult,
  GenerateTimings,
  Model,
  Session,
} from "../../src/index.js";
import { HttpError } from "./errors.js";

/** Thrown to a request whose client left while it waited for a slot. */
export class ClientGone extends Error {}

/** What a request gets once the server is shutting down (503, so that a client may retry elsewhere). */
export function shuttingDown(what: string): HttpError {
  return new HttpError(503, `the server is shutting down: ${what}`);
}

export interface SlotRun extends GenerateResult {
  slot: number;
}

export interface SlotChat extends ChatResult {
  slot: number;
}

/** What a slot's session runs: chunks as they come, then the whole. */
interface Run<C, R> extends AsyncIterable<C> {
  readonly result: Promise<R>;
}

/** The counters behind GET /metrics, named as llama-server's. */
export interface SlotMetrics {
  promptTokens: number;
  /** Prompt tokens reused from a slot's context or the prompt-state cache (not evaluated). */
  promptTokensCached: number;
  /** The largest context a request reached (prompt and generated tokens). */
  tokensMax: number;
  promptSeconds: number;
  predictedTokens: number;
  predictedSeconds: number;
  decodes: number;
  busySlotsSum: number;
  requestsProcessing: number;
  requestsDeferred: number;
}

interface Slot {
  id: number;
  session: Session;
  /** The tokens of the slot's context when its last request ended (its prompt and what it generated). */
  context: readonly number[];
}

/** llama-server's `prompt_progress`: the prompt's tokens, those reused, those processed so far, and the time taken. */
export interface PromptProgress {
  total: number;
  cache: number;
  processed: number;
  time_ms: number;
}

/** How a request is served besides its generation options. */
export interface ServeOptions {
  /** The slot to run on (-1: the first free one). */
  idSlot?: number;
  /**
   * llama-server's return_progress: the prompt is evaluated `batchSize` tokens at a time, `report` told before the
   * first batch (what the context held already) and after each.
   */
  progress?: { batchSize: number; report: (progress: PromptProgress) => void };
  /** Told the slot the request got, once it has one. */
  onSlot?: (id: number) => void;
  /** llama-server's cache_prompt (default true): false evaluates the whole prompt (GenerateOptions.reusePrefix). */
  reusePrefix?: boolean;
}

/** A run's timings with the prompt batches evaluated before it (see Slots.#prefill) counted in. */
function addPrefill(run: GenerateTimings, prefill: GenerateTimings): GenerateTimings {
  return {
    ...run,
    promptTokens: run.promptTokens + prefill.promptTokens,
    cachedPromptTokens: prefill.cachedPromptTokens,
    promptMs: run.promptMs + prefill.promptMs,
  };
}

export class Slots {
  readonly #free: Slot[];
  /** Requests waiting for a slot, in arrival order: `slot` -1 takes any, else that one. */
  readonly #waiting: { slot: number; take: (slot: Slot) => void; refuse: (error: Error) => void }[] = [];
  /** Set by close(): no request takes a slot any more. */
  #closed = false;
  /** Aborted by stop(): ends the running generations. */
  readonly #stop = new AbortController();
  readonly metrics: SlotMetrics = {
    promptTokens: 0,
    promptTokensCached: 0,
    tokensMax: 0,
    promptSeconds: 0,
    predictedTokens: 0,
    predictedSeconds: 0,
    decodes: 0,
    busySlotsSum: 0,
    requestsProcessing: 0,
    requestsDeferred: 0,
  };

  /**
   * `similarity`: a request without a slot of its choice takes the free slot whose context shares the
   * longest prefix with its prompt, where that is more than this fraction of the prompt (its state is
   * there: on a model with recurrent layers no other slot can reuse it); else the slot idle longest.
   */
  constructor(
    readonly model: Model,
    readonly count: number,
    readonly similarity = 0.1,
  ) {
    this.#free = Array.from({ length: count }, (_, id) => ({ id, session: model.createSession(), context: [] }));
  }

  /** Slots generating now. */
  get busy(): number {
    return this.count - this.#free.length;
  }

  /** Requests waiting for a slot. */
  get waiting(): number {
    return this.#waiting.length;
  }

  /** For a shutdown: refuses the requests waiting for a slot and every later one (503); running ones go on. */
  close(): void {
    this.#closed = true;
    for (const waiter of this.#waiting.splice(0)) waiter.refuse(shuttingDown("the request was waiting for a slot"));
  }

  /** Stops the running generations: their requests end with a 503 (a stream, with an error event). */
  stop(): void {
    this.#stop.abort();
  }

  /** Each slot: whether a request holds it, and the tokens its context holds. */
  list(): { id: number; busy: boolean; position: number }[] {
    return Array.from({ length: this.count }, (_, id) => {
      const free = this.#free.find((slot) => slot.id === id);
      return { id, busy: !free, position: free ? free.session.position : -1 };
    });
  }

  /**
   * Runs `work` on slot `id`'s session while no request can take the slot; refuses a slot
   * that does not exist (404) or that a request holds now (409).
   */
  async withSlot<T>(id: number, work: (session: Session) => Promise<T>): Promise<T> {
    if (!Number.isInteger(id) || id < 0 || id >= this.count) throw new HttpError(404, `slot ${id} does not exist`);
    if (this.#closed) throw shuttingDown("slots take no more work");
    const slot = this.#takeFree(id);
    if (!slot) throw new HttpError(409, `slot ${id} is busy`, "unavailable_error");
    try {
      return await work(slot.session);
    } finally {
      this.#release(slot);
    }
  }

  /**
   * Generates from `prompt` on a free slot, handing each chunk with text or tokens to `onChunk`.
   * A prompt longer than the context is refused before it waits; `signal` ends the wait or the run.
   */
  run(
    prompt: number[],
    options: Omit<GenerateOptions, "signal">,
    signal: AbortSignal,
    onChunk: (chunk: GenerateChunk) => void,
    serve: ServeOptions = {},
  ): Promise<SlotRun> {
    return this.#serve(
      prompt,
      serve,
      signal,
      (session, maxTokens, runSignal, reusePrefix) =>
        session.generate(prompt, { maxTokens, ...options, reusePrefix, signal: runSignal }),
      (chunk) => {
        if (chunk.text || chunk.tokens.length > 0) onChunk(chunk);
      },
    );
  }

  /**
   * Chats on a free slot (Session.chat), handing each chunk to `onChunk`. `prompt` (the rendered conversation's
   * tokens) is checked against the context before it waits.
   */
  chat(
    messages: readonly ChatMessage[],
    prompt: number[],
    options: Omit<ChatOptions, "signal">,
    signal: AbortSignal,
    onChunk: (chunk: ChatChunk) => void,
    serve: ServeOptions = {},
  ): Promise<SlotChat> {
    return this.#serve(
      prompt,
      serve,
      signal,
      // As llama-server: the conversation is the prompt, whole (the route refused one longer than the context).
      (session, maxTokens, runSignal, reusePrefix) =>
        session.chat(messages, { maxTokens, contextOverflow: "error", ...options, reusePrefix, signal: runSignal }),
      onChunk,
    );
  }

  async #serve<C, R extends GenerateResult | ChatResult>(
    prompt: number[],
    { idSlot = -1, progress, onSlot, reusePrefix = true }: ServeOptions,
    signal: AbortSignal,
    start: (session: Session, maxTokens: number, signal: AbortSignal, reusePrefix: boolean) => Run<C, R>,
    onChunk: (chunk: C) => void,
  ): Promise<R & { slot: number }> {
    const contextSize = this.model.info.contextSize;
    const promptLength = prompt.length;
    if (promptLength === 0) throw new HttpError(400, "the prompt is empty");
    if (promptLength > contextSize) {
      throw new HttpError(
        400,
        "the request exceeds the available context size, try increasing it",
        "exceed_context_size_error",
        {
          n_prompt_tokens: promptLength,
          n_ctx: contextSize,
        },
      );
    }
    if (!Number.isInteger(idSlot) || idSlot < -1 || idSlot >= this.count) {
      throw new HttpError(400, `'id_slot' must be -1 (any slot) or a slot from 0 to ${this.count - 1}, not ${idSlot}`);
    }
    const slot = await this.#acquire(signal, idSlot, prompt);
    onSlot?.(slot.id);
    this.metrics.requestsProcessing++;
    // The run ends when the client leaves or a shutdown stops it.
    const ended = new AbortController();
    const end = () => ended.abort();
    for (const reason of [signal, this.#stop.signal]) {
      if (reason.aborted) end();
      else reason.addEventListener("abort", end, { once: true });
    }
    try {
      // generate() replaces the slot's context by the request's prompt, keeping the prefix the two
      // share (or a longer one from the model's prompt-state cache) unless reusePrefix is false; a
      // prefill's batches are then the prompt evaluated whole, which the generation reuses.
      const prefill = progress ? await this.#prefill(slot, prompt, progress, ended.signal, reusePrefix) : undefined;
      const run = start(slot.session, contextSize, ended.signal, reusePrefix || prefill !== undefined);
      for await (const chunk of run) onChunk(chunk);
      let result = await run.result;
      if (this.#stop.signal.aborted && !signal.aborted)
        throw shuttingDown(`the generation was stopped after ${result.tokens.length} tokens`);
      if (prefill) result = { ...result, timings: addPrefill(result.timings, prefill) };
      this.#count(result);
      // A shifted context is no longer the prompt and the tokens: nothing of it is counted on.
      slot.context = result.timings.discardedTokens > 0 ? [] : [...prompt, ...result.tokens];
      return { ...result, slot: slot.id };
    } finally {
      signal.removeEventListener("abort", end);
      this.#stop.signal.removeEventListener("abort", end);
      this.metrics.requestsProcessing--;
      this.#release(slot);
    }
  }

  /**
   * Evaluates the prompt `batchSize` tokens at a time (each a generation of no token, which keeps the context the
   * batch before it left), reporting before the first batch and after each; the generation that follows reuses it all.
   * Returns the timings of the batches, for the request's totals.
   */
  async #prefill(
    slot: Slot,
    prompt: number[],
    { batchSize, report }: NonNullable<ServeOptions["progress"]>,
    signal: AbortSignal,
    reusePrefix: boolean,
  ): Promise<GenerateTimings> {
    const started = performance.now();
    let cache = 0;
    while (
      reusePrefix &&
      cache < prompt.length - 1 &&
      cache < slot.context.length &&
      slot.context[cache] === prompt[cache]
    )
      cache++;
    const timings = { promptTokens: 0, cachedPromptTokens: cache, promptMs: 0 };
    const at = (processed: number) => ({
      total: prompt.length,
      cache,
      processed,
      // Before the first batch no token has been evaluated: no time has gone into the prompt yet.
      time_ms: processed === cache ? 0 : performance.now() - started,
    });
    report(at(cache));
    for (let end = cache; end < prompt.length && !signal.aborted; ) {
      // The first batch reuses what the request lets it; the others, the batches before them.
      const reuse = reusePrefix || end > cache;
      end = Math.min(prompt.length, end + batchSize);
      const batch = await slot.session.generate(prompt.slice(0, end), { maxTokens: 0, signal, reusePrefix: reuse })
        .result;
      timings.promptTokens += batch.timings.promptTokens;
      timings.promptMs += batch.timings.promptMs;
      report(at(end));
    }
    return {
      ...timings,
      promptCacheHit: false,
      decodeTokens: 0,
      decodeMs: 0,
      discardedTokens: 0,
      draftTokens: 0,
      draftAccepted: 0,
    };
  }

  /** Counts embedding or rerank inputs, which run outside the slots: prompt tokens and one decode per input. */
  countEmbeddings(promptTokens: number, seconds: number, inputs: number): void {
    this.metrics.promptTokens += promptTokens;
    this.metrics.promptSeconds += seconds;
    this.metrics.decodes += inputs;
  }

  #count(result: GenerateResult | ChatResult): void {
    const m = this.metrics;
    m.promptTokens += result.timings.promptTokens;
    m.promptTokensCached += result.timings.cachedPromptTokens;
    m.tokensMax = Math.max(
      m.tokensMax,
      result.timings.promptTokens + result.timings.cachedPromptTokens + result.tokens.length,
    );
    m.promptSeconds += result.timings.promptMs / 1000;
    m.predictedTokens += result.tokens.length;
    m.predictedSeconds += result.timings.decodeMs / 1000;
    m.decodes += result.timings.decodeTokens + 1;
    m.busySlotsSum += (result.timings.decodeTokens + 1) * this.busy;
  }

  /** A free slot (slot `wanted`, or the one `prompt` is most like), else a wait in arrival order. */
  #acquire(signal: AbortSignal, wanted: number, prompt: readonly number[]): Promise<Slot> {
    if (this.#closed) return Promise.reject(shuttingDown("slots take no more work"));
    const free = this.#takeFree(wanted, prompt);
    if (free) return Promise.resolve(free);
    if (signal.aborted) return Promise.reject(new ClientGone());
    this.metrics.requestsDeferred++;
    return new Promise((resolve, reject) => {
      const take = (s: Slot) => {
        signal.removeEventListener("abort", leave);
        this.metrics.requestsDeferred--;
        resolve(s);
      };
      const leave = () => {
        this.#waiting.splice(
          this.#waiting.findIndex((w) => w.take === take),
          1,
        );
        this.metrics.requestsDeferred--;
        reject(new ClientGone());
      };
      const refuse = (error: Error) => {
        signal.removeEventListener("abort", leave);
        this.metrics.requestsDeferred--;
        reject(error);
      };
      signal.addEventListener("abort", leave, { once: true });
      this.#waiting.push({ slot: wanted, take, refuse });
    });
  }

  /**
   * Takes slot `wanted` when it is free; with `wanted` -1, the free slot whose context shares the longest
   * prefix with `prompt`, beyond `similarity` of it, else the one idle longest (the free list's first).
   */
  #takeFree(wanted: number, prompt: readonly number[] = []): Slot | undefined {
    let index = wanted < 0 ? 0 : this.#free.findIndex((free) => free.id === wanted);
    if (wanted < 0 && this.similarity > 0 && prompt.length > 0) {
      let best = 0;
      this.#free.forEach((slot, i) => {
        const shared = commonPrefix(slot.context, prompt) / prompt.length;
        if (shared > best && shared > this.similarity) [best, index] = [shared, i];
      });
    }
    return index >= 0 && index < this.#free.length ? this.#free.splice(index, 1)[0] : undefined;
  }

  #release(slot: Slot): void {
    const next = this.#waiting.findIndex((w) => w.slot < 0 || w.slot === slot.id);
    if (next >= 0) this.#waiting.splice(next, 1)[0]!.take(slot);
    else this.#free.push(slot);
  }
}

/** How many tokens `a` and `b` share from their first on. */
function commonPrefix(a: readonly number[], b: readonly number[]): number {
  let n = 0;
  while (n < a.length && n < b.length && a[n] === b[n]) n++;
  return n;
}
