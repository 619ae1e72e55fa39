/**
 * Session: one sequence with its own KV state, evaluated by the native engine off the JS thread.
 * @module
 */
import { BloomeryError } from "./errors.js";
import { callNative, callNativeAsync, type NativeSessionHandle } from "./native.js";
import type { Tokenizer } from "./tokenizer.js";

/** Options of {@link Session.evaluate}. */
export interface EvaluateOptions {
  /** `"last"` (default): the logits after the last token; `"all"`: the logits after each token, row after row. */
  logits?: "last" | "all";
}

/** Options of {@link Session.generate}. */
export interface GenerateOptions {
  /** Most tokens to generate (default 256). */
  maxTokens?: number;
}

/** One step of {@link Session.generate}. */
export interface GenerateChunk {
  /** The text this chunk adds (a character split across tokens comes whole, with its last token). */
  text: string;
  /** The tokens this chunk adds. */
  tokens: number[];
}

/** Why generation stopped: the end-of-sequence token, `maxTokens`, or a full context. */
export type StopReason = "eos" | "maxTokens" | "contextFull";

/** The whole of a {@link Session.generate} run. */
export interface GenerateResult {
  /** All the generated text. */
  text: string;
  tokens: number[];
  stopReason: StopReason;
}

/** What {@link Session.generate} returns: the chunks as they come, and `.result` once it is done. */
export interface GenerateIterable extends AsyncIterable<GenerateChunk> {
  /** The run's tokens and stop reason; awaiting it without iterating runs the generation to its end. */
  readonly result: Promise<GenerateResult>;
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
   * Greedy generation: evaluates the prompt (text, tokenized with the model's BOS when it
   * asks for one, or tokens as given), then appends the most likely token until the
   * end-of-sequence token (not yielded), `maxTokens`, or a full context.
   */
  generate(prompt: string | ArrayLike<number>, options: GenerateOptions = {}): GenerateIterable {
    this.#live();
    const maxTokens = options.maxTokens ?? 256;
    if (!Number.isInteger(maxTokens) || maxTokens < 0) {
      throw new BloomeryError("INVALID_ARGUMENT", "maxTokens must be a non-negative integer", { maxTokens });
    }
    const tokenizer = this.#model.tokenizer;
    const promptTokens = Array.from(
      typeof prompt === "string" ? tokenizer.tokenize(prompt, { special: true, addSpecial: true }) : prompt,
    );
    const steps = this.#generateSteps(promptTokens, maxTokens);
    const decoder = tokenizer.createDecoder();
    const generated: number[] = [];
    let text = "";
    let started = false;
    let settle: { resolve: (r: GenerateResult) => void; reject: (e: unknown) => void } | undefined;
    const result = new Promise<GenerateResult>((resolve, reject) => (settle = { resolve, reject }));
    // A caller that only awaits .result must not leave an unhandled rejection behind.
    result.catch(() => {});
    const iterate = async function* (): AsyncGenerator<GenerateChunk> {
      try {
        for (;;) {
          const step = await steps.next();
          if (step.done) {
            const tail = decoder.flush();
            text += tail;
            if (tail) yield { text: tail, tokens: [] };
            settle!.resolve({ text, tokens: generated, stopReason: step.value });
            return;
          }
          generated.push(step.value);
          const piece = decoder.push(step.value);
          text += piece;
          yield { text: piece, tokens: [step.value] };
        }
      } catch (error) {
        settle!.reject(error);
        throw error;
      }
    };
    const iterator = iterate();
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

  async *#generateSteps(prompt: number[], maxTokens: number): AsyncGenerator<number, StopReason> {
    let input = prompt;
    for (let produced = 0; produced < maxTokens; produced++) {
      if (this.position + input.length > this.#model.contextSize) return "contextFull";
      const logits = await this.evaluate(input);
      const token = argmax(logits);
      if (token === this.#model.eosToken) return "eos";
      yield token;
      input = [token];
    }
    return "maxTokens";
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
}

function argmax(values: Float32Array): number {
  let best = 0;
  for (let i = 1; i < values.length; i++) if (values[i]! > values[best]!) best = i;
  return best;
}
