/**
 * Session: one sequence with its own KV state, evaluated by the native engine off the JS thread.
 * @module
 */
import { BloomeryError } from "./errors.js";
import { callNative, callNativeAsync, type NativeSamplerHandle, type NativeSessionHandle } from "./native.js";
import { nativeSamplerOptions, StopStrings, type SamplingOptions } from "./sampling.js";
import type { Tokenizer } from "./tokenizer.js";

/** Options of {@link Session.evaluate}. */
export interface EvaluateOptions {
  /** `"last"` (default): the logits after the last token; `"all"`: the logits after each token, row after row. */
  logits?: "last" | "all";
}

/** Options of {@link Session.generate}: the sampling settings, and when to stop. */
export interface GenerateOptions extends SamplingOptions {
  /** Most tokens to generate (default 256). */
  maxTokens?: number;
  /**
   * Ends generation where the text contains one of these strings. The stop string is not emitted,
   * nor is any text after it; text that could begin a stop string is held back until it is known
   * not to be one, so a stop string is found even when it spans several tokens.
   */
  stop?: string | readonly string[];
  /**
   * Aborting it ends generation at once with stop reason `"abort"`: the iteration ends without
   * waiting for the forward pass in flight (which still finishes, before the session's next call
   * starts), nothing more is emitted, and `.result` keeps the text emitted so far.
   */
  signal?: AbortSignal;
}

/** One step of {@link Session.generate}. */
export interface GenerateChunk {
  /**
   * The text this chunk adds: a character split across tokens comes whole, with its last token,
   * and text that could begin a stop string comes once it is known not to be one.
   */
  text: string;
  /** The tokens this chunk adds. */
  tokens: number[];
  /** With the `logprobs` option: one entry per token of `tokens`, in order. */
  logprobs?: TokenLogprobs[];
}

/** A token and its log-probability (natural log). */
export interface TokenLogprob {
  token: number;
  logprob: number;
}

/**
 * A generated token's log-probability and the most likely tokens at its step (the `logprobs`
 * option says how many), most likely first. They are the log-softmax of the model's logits,
 * before logit bias, penalties, filters, grammar and temperature, as llama-server reports them.
 */
export interface TokenLogprobs extends TokenLogprob {
  top: TokenLogprob[];
}

/**
 * Why generation stopped: the end-of-sequence token, `maxTokens`, a stop string, the signal or
 * the consumer leaving the loop (`"abort"`), or a full context.
 */
export type StopReason = "eos" | "maxTokens" | "stop" | "abort" | "contextFull";

/** Where the time of a {@link Session.generate} run went. */
export interface GenerateTimings {
  /** Prompt tokens evaluated. */
  promptTokens: number;
  /** Milliseconds to evaluate the prompt and draw the first token. */
  promptMs: number;
  /** Generated tokens evaluated after the prompt, one forward pass each. */
  decodeTokens: number;
  /** Milliseconds those passes took, each with its draw. */
  decodeMs: number;
}

/** The whole of a {@link Session.generate} run. */
export interface GenerateResult {
  /** All the text emitted: the chunks' text joined (without a stop string or what follows it). */
  text: string;
  /** Every generated token, including those of a stop string; not the end-of-sequence token. */
  tokens: number[];
  /** With the `logprobs` option: one entry per token of `tokens`. */
  logprobs?: TokenLogprobs[];
  stopReason: StopReason;
  timings: GenerateTimings;
}

/** What {@link Session.generate} returns: the chunks as they come, and `.result` once it is done. */
export interface GenerateIterable extends AsyncIterable<GenerateChunk> {
  /** The run's text, tokens, stop reason and timings; awaiting it without iterating runs the generation to its end. */
  readonly result: Promise<GenerateResult>;
}

/** What one generation needs besides the session. */
interface GenerateRun {
  prompt: number[];
  sampler: NativeSamplerHandle;
  maxTokens: number;
  logprobs: boolean;
  stop: StopStrings;
  signal: AbortSignal | undefined;
  settle: { resolve: (r: GenerateResult) => void; reject: (e: unknown) => void };
}

/** What a session needs to know of its model. @internal */
export interface SessionModel {
  readonly contextSize: number;
  readonly eosToken: number;
  readonly tokenizer: Tokenizer;
  sessionClosed(session: Session): void;
}

/**
 * One sequence with its own KV cache. Calls run one after another, in the order they are made;
 * the forward passes run on a worker thread. Create sessions with `Model.createSession()`.
 */
export class Session {
  #handle: NativeSessionHandle | undefined;
  readonly #model: SessionModel;
  #queue: Promise<unknown> = Promise.resolve();

  /** @internal */
  constructor(handle: NativeSessionHandle, model: SessionModel) {
    this.#handle = handle;
    this.#model = model;
  }

  /** True once {@link dispose} ran (or the model was disposed). */
  get disposed(): boolean {
    return this.#handle === undefined;
  }

  /** Tokens in the session's context. */
  get position(): number {
    const handle = this.#live();
    return callNative((a) => a.sessionPosition(handle));
  }

  /**
   * Appends `tokens` to the context and resolves to the logits after the last one (a
   * Float32Array of the vocabulary's size), or after each one with `{ logits: "all" }`.
   * Throws BloomeryError CONTEXT_TOO_LONG when they do not fit the context, INVALID_ARGUMENT
   * for a token outside the vocabulary; the context is unchanged after an error.
   */
  evaluate(tokens: ArrayLike<number>, options: EvaluateOptions = {}): Promise<Float32Array> {
    const handle = this.#live();
    const batch = Int32Array.from(tokens);
    const all = options.logits === "all";
    return this.#enqueue(() => callNativeAsync((a) => a.sessionEvaluate(handle, batch, all)));
  }

  /**
   * Generates text: evaluates the prompt (text, tokenized with the model's BOS when it asks for
   * one, or tokens as given), then draws one token after another with the sampling settings (greedy
   * by default) until the end-of-sequence token (not yielded), `maxTokens`, a stop string, the
   * signal, or a full context. Leaving the `for await` loop stops it before the next forward pass.
   * The generation holds the session: its other calls wait until it ends.
   *
   * Throws BloomeryError INVALID_ARGUMENT naming the option that is out of range.
   */
  generate(prompt: string | ArrayLike<number>, options: GenerateOptions = {}): GenerateIterable {
    const handle = this.#live();
    const maxTokens = options.maxTokens ?? 256;
    if (!Number.isInteger(maxTokens) || maxTokens < 0) {
      throw new BloomeryError("INVALID_ARGUMENT", "maxTokens must be a non-negative integer", { maxTokens });
    }
    const signal = options.signal;
    if (signal !== undefined && !isAbortSignal(signal)) {
      throw new BloomeryError("INVALID_ARGUMENT", "signal must be an AbortSignal");
    }
    const stop = new StopStrings(options.stop);
    const tokenizer = this.#model.tokenizer;
    const samplerOptions = nativeSamplerOptions(options, tokenizer.info.size);
    const sampler = callNative((a) => a.createSampler(samplerOptions, tokenizer.nativeTokenizer));
    const promptTokens = Array.from(
      typeof prompt === "string" ? tokenizer.tokenize(prompt, { special: true, addSpecial: true }) : prompt,
    );
    let settle: GenerateRun["settle"] | undefined;
    const result = new Promise<GenerateResult>((resolve, reject) => (settle = { resolve, reject }));
    // A caller that only iterates must not leave an unhandled rejection behind.
    result.catch(() => {});
    const logprobs = samplerOptions.logprobs !== undefined;
    const iterator = this.#stream(handle, {
      prompt: promptTokens,
      sampler,
      maxTokens,
      logprobs,
      stop,
      signal,
      settle: settle!,
    });
    let started = false;
    return {
      [Symbol.asyncIterator]() {
        if (started) throw new BloomeryError("INVALID_ARGUMENT", "a generate() result can be iterated once");
        started = true;
        return iterator;
      },
      get result() {
        if (!started) {
          started = true;
          void (async () => {
            for await (const chunk of { [Symbol.asyncIterator]: () => iterator }) void chunk;
          })().catch(() => {});
        }
        return result;
      },
    };
  }

  /** Forgets every token of the context. */
  reset(): Promise<void> {
    const handle = this.#live();
    return this.#enqueue(async () => callNative((a) => a.sessionReset(handle)));
  }

  /** Frees the session's KV cache. Later calls throw BloomeryError DISPOSED. */
  dispose(): void {
    if (!this.#handle) return;
    const handle = this.#handle;
    this.#handle = undefined;
    callNative((a) => a.disposeSession(handle));
    this.#model.sessionClosed(this);
  }

  /** The chunks of one generation; settles its result however it ends. */
  async *#stream(handle: NativeSessionHandle, run: GenerateRun): AsyncGenerator<GenerateChunk, void, undefined> {
    const { prompt, sampler, maxTokens, stop, signal } = run;
    const decoder = this.#model.tokenizer.createDecoder();
    const tokens: number[] = [];
    const logprobs: TokenLogprobs[] | undefined = run.logprobs ? [] : undefined;
    const timings: GenerateTimings = { promptTokens: prompt.length, promptMs: 0, decodeTokens: 0, decodeMs: 0 };
    let text = "";
    let stopReason: StopReason | undefined;
    let inflight: Promise<number> | undefined;
    const turn = this.#takeTurn();
    try {
      if ((await untilAborted(turn, signal)) === ABORTED) stopReason = "abort";
      let input = prompt;
      while (stopReason === undefined) {
        if (signal?.aborted) stopReason = "abort";
        else if (tokens.length >= maxTokens) stopReason = "maxTokens";
        else if (this.position + input.length > this.#model.contextSize) stopReason = "contextFull";
        if (stopReason !== undefined) break;

        const startedAt = performance.now();
        const batch = Int32Array.from(input);
        inflight = callNativeAsync((a) => a.sessionSample(handle, batch, sampler));
        const token = await untilAborted(inflight, signal);
        if (token === ABORTED) {
          stopReason = "abort";
          break;
        }
        inflight = undefined;
        const ms = performance.now() - startedAt;
        if (input === prompt) timings.promptMs = ms;
        else {
          timings.decodeTokens += input.length;
          timings.decodeMs += ms;
        }
        if (token === this.#model.eosToken) {
          stopReason = "eos";
          break;
        }
        tokens.push(token);
        const piece = stop.push(decoder.push(token));
        text += piece.text;
        if (piece.stopped) stopReason = "stop";
        if (logprobs) {
          const drawn: TokenLogprobs = callNative((a) => a.samplerLogprobs(sampler))!;
          logprobs.push(drawn);
          yield { text: piece.text, tokens: [token], logprobs: [drawn] };
        } else {
          yield { text: piece.text, tokens: [token] };
        }
        input = [token];
      }
      if (stopReason === "eos" || stopReason === "maxTokens" || stopReason === "contextFull") {
        // What the decoder and the stop strings held back is text after all.
        const piece = stop.push(decoder.flush());
        const tail = piece.stopped ? piece.text : piece.text + stop.flush();
        if (piece.stopped) stopReason = "stop";
        text += tail;
        if (tail) yield { text: tail, tokens: [], ...(logprobs && { logprobs: [] }) };
      }
      run.settle.resolve({ text, tokens, ...(logprobs && { logprobs }), stopReason, timings });
    } catch (error) {
      run.settle.reject(error);
      throw error;
    } finally {
      // Reached without a stop reason only when the consumer left the loop.
      run.settle.resolve({ text, tokens, ...(logprobs && { logprobs }), stopReason: stopReason ?? "abort", timings });
      // The session's next call, and freeing the sampler, wait for the pass in flight.
      const release = () => {
        void turn.then((done) => done());
        callNative((a) => a.disposeSampler(sampler));
      };
      if (inflight) void inflight.then(release, release);
      else release();
    }
  }

  #live(): NativeSessionHandle {
    if (!this.#handle) throw new BloomeryError("DISPOSED", "the session has been disposed");
    return this.#handle;
  }

  #enqueue<T>(task: () => Promise<T>): Promise<T> {
    const run = this.#queue.then(task, task);
    this.#queue = run.catch(() => {});
    return run;
  }

  /** Waits for the calls before it, then holds the session until the returned function is called. */
  #takeTurn(): Promise<() => void> {
    let done!: () => void;
    const finished = new Promise<void>((resolve) => (done = resolve));
    const turn = this.#queue.then(() => done);
    this.#queue = turn.then(() => finished);
    return turn;
  }
}

const ABORTED = Symbol("aborted");

/** `promise`, or ABORTED as soon as `signal` aborts (the promise keeps running). */
function untilAborted<T>(promise: Promise<T>, signal: AbortSignal | undefined): Promise<T | typeof ABORTED> {
  if (!signal) return promise;
  if (signal.aborted) return Promise.resolve(ABORTED);
  return new Promise((resolve, reject) => {
    const onAbort = () => resolve(ABORTED);
    signal.addEventListener("abort", onAbort, { once: true });
    promise.then(
      (value) => {
        signal.removeEventListener("abort", onAbort);
        resolve(value);
      },
      (error: unknown) => {
        signal.removeEventListener("abort", onAbort);
        reject(error);
      },
    );
  });
}

/** Duck-typed, so that signals from another realm or a polyfill work too. */
function isAbortSignal(value: unknown): value is AbortSignal {
  const s = value as AbortSignal | null;
  return (
    typeof s === "object" && s !== null && typeof s.aborted === "boolean" && typeof s.addEventListener === "function"
  );
}
