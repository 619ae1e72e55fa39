/**
 * Session: one sequence with its own KV state, evaluated by the native engine off the JS thread.
 * @module
 */
import { BloomeryError, fromNativeError } from "./errors.js";
import {
  callNative,
  callNativeAsync,
  type NativeGenerationEvent,
  type NativeSamplerHandle,
  type NativeSessionHandle,
  type NativeStateHandle,
} from "./native.js";
import { jsonSchemaToGrammarAsync } from "./grammar/grammar-async.js";
import { nativeSamplerOptions, SAMPLING_OPTIONS, StopStrings, type SamplingOptions } from "./sampling.js";
import { checkOptions, checkPath, isPromiseLike, optionKeys, tokenIds } from "./validate.js";
import { iterableWithResult } from "./run-iterable.js";
import type { Tokenizer } from "./tokenizer.js";
import type { ChatMessage } from "./chat/types.js";
import { runChat, type ChatIterable, type ChatModel, type ChatOptions } from "./chat/run.js";
import type { DraftOption, NativeDraftOptions } from "./draft.js";

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
   * Special tokens whose text the output shows (the text of a special token is hidden otherwise).
   * {@link Session.chat} shows those its model's chat format is written in (DeepSeek's and Kimi-K2's
   * tool-call tokens, for instance), for its parsers to read.
   */
  showSpecialTokens?: readonly number[];
  /**
   * Aborting it ends generation at once with stop reason `"abort"`: the iteration ends without
   * waiting for the forward pass in flight (whose results are dropped), nothing more is emitted,
   * `.result` keeps the text emitted so far, and the session's context keeps the prompt and the
   * tokens emitted but the last (when none was emitted, only the prefix of the prompt that the
   * context or the prompt-state cache held already).
   */
  signal?: AbortSignal;
  /**
   * What a full context does: `false` (default) ends the generation with stop reason
   * `"contextFull"`; `true` or `{ keep }` goes on as llama-server's `--context-shift` does: once the
   * context holds all but one of its tokens, half of the tokens after the first `keep` are
   * discarded (the oldest of them) and generation continues on what is left, the keys that move
   * rotated to their new positions. `keep` counts prompt tokens (default 0; -1: the whole prompt),
   * plus the BOS token when the model adds one, as llama-server's `n_keep`; at most the context
   * less 4. `timings.discardedTokens` says how many tokens were discarded. A model with
   * sliding-window layers ends the generation with BloomeryError UNSUPPORTED_MODEL when its
   * context would shift.
   */
  contextShift?: boolean | { keep?: number };
  /**
   * Speculative decoding for this run (default: loadModel's `draft`): see {@link DraftOption}. The tokens are those
   * of the run without drafts; `result.timings` counts the drafted and kept tokens.
   */
  draft?: DraftOption;
  /**
   * `false` evaluates the whole prompt, reusing nothing that the session's context or the model's
   * prompt-state cache holds of it (llama-server's `cache_prompt: false`). A reused prefix gives
   * what a whole evaluation gives up to float rounding only: the rows after it run in the
   * kernels of a short evaluation rather than those of the whole prompt (on the GPU, a prompt of
   * 64 tokens or more takes tiled products, a few tokens the mat-vecs), so a greedy run that must
   * match another bit for bit turns reuse off. Default `true`.
   */
  reusePrefix?: boolean;
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

/**
 * Where the time of a {@link Session.generate} run went, as wall-clock time: passes shared with
 * other sessions' streams count in full, and time spent waiting for a place (more sessions than
 * the model's `parallel`) does not count.
 */
export interface GenerateTimings {
  /** Prompt tokens evaluated. */
  promptTokens: number;
  /**
   * Prompt tokens not evaluated because the context held them already: the prefix the prompt
   * shares with the session's previous context, or with a state restored from the model's
   * prompt-state cache (see `promptCacheHit`). `cachedPromptTokens + promptTokens` is the prompt's length.
   * A model with recurrent layers (Qwen3.5, Qwen3-Next) reuses a prefix only at a checkpoint: the
   * session's whole state, or one kept 512·2^i tokens before the end of an earlier prompt or
   * evaluation (by the session itself, or in the prompt-state cache), or 4 tokens before the end of
   * the session's own earlier generation prompt.
   */
  cachedPromptTokens: number;
  /** Whether the cached prompt tokens were restored from the model's prompt-state cache. */
  promptCacheHit: boolean;
  /** Milliseconds to evaluate the prompt and draw the first token. */
  promptMs: number;
  /** Generated tokens evaluated after the prompt, one forward pass each. */
  decodeTokens: number;
  /** Milliseconds from the first token drawn to the last. */
  decodeMs: number;
  /** Context tokens the `contextShift` option discarded (0 when the context did not shift). */
  discardedTokens: number;
  /** Tokens drafted and verified ({@link GenerateOptions.draft}). */
  draftTokens: number;
  /** Of them, the tokens drawn too: each came without a forward pass of its own. */
  draftAccepted: number;
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
  /** Tokenized (and a grammar parsed) on worker threads: both settle before the generation starts. */
  prompt: Promise<Int32Array>;
  sampler: Promise<NativeSamplerHandle>;
  maxTokens: number;
  /** Prompt tokens a context shift keeps (see GenerateOptions.contextShift); -1: no shift. */
  shiftKeep: number;
  reusePrefix: boolean;
  logprobs: boolean;
  draft: NativeDraftOptions | undefined;
  stop: StopStrings;
  /** The text of each special token the output shows. */
  shown: ReadonlyMap<number, string>;
  signal: AbortSignal | undefined;
  settle: { resolve: (r: GenerateResult) => void; reject: (e: unknown) => void };
}

/** What a session needs to know of its model. @internal */
export interface SessionModel {
  readonly eosToken: number;
  readonly tokenizer: Tokenizer;
  /** Tokens a session's context holds. */
  readonly contextSize: number;
  /** The prompt of a chat, and how the model writes tool calls. */
  readonly chatModel: ChatModel;
  /** True while the model is being disposed: its sessions' states are not worth caching. */
  readonly closing: boolean;
  sessionClosed(session: Session): void;
  /** The model's passes moved on (a token was drawn, an evaluation ended): time to report expert moves. */
  stepped(): void;
  /** A Session for a native session made from this one (fork). */
  adoptSession(handle: NativeSessionHandle): Session;
  /** The drafts a run asks for (its `draft` option; undefined: the model's), undefined for none; throws as resolveDraft. */
  draftFor(option: DraftOption | undefined): NativeDraftOptions | undefined;
}

const EVALUATE_OPTIONS = optionKeys<EvaluateOptions>()({ logits: true });
const GENERATE_OPTIONS = [
  ...SAMPLING_OPTIONS,
  ...optionKeys<Omit<GenerateOptions, keyof SamplingOptions>>()({
    maxTokens: true,
    stop: true,
    signal: true,
    showSpecialTokens: true,
    contextShift: true,
    draft: true,
    reusePrefix: true,
  }),
];
const CHAT_OPTIONS = [
  ...GENERATE_OPTIONS,
  ...optionKeys<Omit<ChatOptions, keyof GenerateOptions>>()({
    tools: true,
    toolChoice: true,
    parallelToolCalls: true,
    templateKwargs: true,
    toolCallFormat: true,
    parseReasoning: true,
    contextOverflow: true,
  }),
];

const stateHandles = new WeakMap<SessionState, NativeStateHandle>();

/**
 * A copy of a session's state, made by {@link Session.save}: the tokens of its context and
 * their keys and values, in host memory. Restore it into any session of the same model with
 * {@link Session.restore}. It is freed when it is garbage-collected.
 */
export class SessionState {
  /** @internal */
  constructor(handle: NativeStateHandle) {
    stateHandles.set(this, handle);
  }

  /** The tokens of the saved context, in order. */
  get tokens(): number[] {
    const handle = stateHandles.get(this)!;
    return Array.from(callNative((a) => a.stateTokens(handle)));
  }

  /** Bytes of host memory the state holds. */
  get bytes(): number {
    const handle = stateHandles.get(this)!;
    return callNative((a) => a.stateBytes(handle));
  }
}

/**
 * One sequence with its own KV cache. Calls run one after another, in the order they are made;
 * the forward passes run on the model's scheduler thread, in one pass with the other sessions'
 * work (see `LoadModelOptions.parallel`). While a generation ({@link generate}, {@link chat}) is
 * under way, from the call until its result settles, the session's other calls (dispose() aside)
 * throw BloomeryError SESSION_BUSY rather than wait behind it: a generation lasts as long as its
 * consumer keeps reading, which may be forever. Create sessions with `Model.createSession()`.
 */
export class Session {
  #handle: NativeSessionHandle | undefined;
  readonly #model: SessionModel;
  #queue: Promise<unknown> = Promise.resolve();
  #generating = false;

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
    const handle = this.#idle("evaluate()");
    checkOptions(options, EVALUATE_OPTIONS, "evaluate()");
    if (options.logits !== undefined && options.logits !== "last" && options.logits !== "all") {
      throw new BloomeryError("INVALID_ARGUMENT", 'logits must be "last" or "all"', { logits: options.logits });
    }
    const batch = tokenIds(tokens, this.#model.tokenizer.info.size, "evaluate()'s tokens");
    const all = options.logits === "all";
    return this.#enqueue(async () => {
      const logits = await callNativeAsync((a) => a.sessionEvaluate(handle, batch, all));
      this.#model.stepped();
      return logits;
    });
  }

  /**
   * Generates text from a prompt (text, tokenized with the model's BOS when it asks for one, or
   * tokens as given), then draws one token after another with the sampling settings (greedy by
   * default) until the end-of-sequence token (not yielded), `maxTokens`, a stop string, the
   * signal, or a full context. Leaving the `for await` loop stops it before the next forward pass.
   * The generation holds the session until its result settles: the session's other calls throw
   * SESSION_BUSY meanwhile (calls made before it still run first). The tokens are drawn on
   * the model's scheduler thread, which runs ahead of the iteration; the context ends up as if it
   * had not (see `signal`).
   *
   * The prompt replaces the session's context (unlike {@link evaluate}, which appends): the
   * context becomes the prompt, then the generated tokens. The longest prefix of the prompt whose
   * keys and values exist already is not evaluated again: the prefix it shares with the session's
   * previous context, or, when longer, with a state in the model's prompt-state cache (`cacheRam`),
   * which is restored. The prompt's last token is always evaluated. So a conversation continues
   * cheaply by passing its whole text again. When the generation ends, the session's state goes
   * to the prompt-state cache, where other sessions of the model find it; `timings` says how many
   * prompt tokens were evaluated and how many were reused.
   *
   * The prompt may also be a promise of text (a prompt still being made, such as a rendered chat
   * template): the generation starts once it settles, and its rejection ends the generation with
   * that error. A long prompt is tokenized, a JSON schema converted and a grammar parsed, on worker
   * threads, so none of them holds this thread.
   *
   * Throws BloomeryError INVALID_ARGUMENT naming the option that is out of range or unknown, or the prompt token
   * that is not a token id of the vocabulary; SESSION_BUSY while another generation of the session is under way. A
   * grammar that does not parse (GRAMMAR_INVALID) or goes past a limit (GRAMMAR_TOO_COMPLEX), and a JSON schema
   * the conversion refuses (JSON_SCHEMA_UNSUPPORTED, JSON_SCHEMA_TOO_COMPLEX), end the generation with that error
   * before its first chunk.
   */
  generate(prompt: string | ArrayLike<number> | PromiseLike<string>, options: GenerateOptions = {}): GenerateIterable {
    const handle = this.#idle("generate()");
    checkOptions(options, GENERATE_OPTIONS, "generate()");
    const maxTokens = options.maxTokens ?? 256;
    if (!Number.isInteger(maxTokens) || maxTokens < 0) {
      throw new BloomeryError("INVALID_ARGUMENT", "maxTokens must be a non-negative integer", { maxTokens });
    }
    const shiftKeep = contextShiftKeep(options.contextShift, this.#model.tokenizer.info.addBos);
    const reusePrefix = options.reusePrefix ?? true;
    if (typeof reusePrefix !== "boolean") {
      throw new BloomeryError("INVALID_ARGUMENT", "reusePrefix must be a boolean", { reusePrefix });
    }
    const signal = options.signal;
    if (signal !== undefined && !isAbortSignal(signal)) {
      throw new BloomeryError("INVALID_ARGUMENT", "signal must be an AbortSignal");
    }
    const stop = new StopStrings(options.stop);
    const draft = this.#model.draftFor(options.draft);
    const tokenizer = this.#model.tokenizer;
    const shown = new Map<number, string>();
    for (const token of options.showSpecialTokens ?? []) {
      if (!Number.isInteger(token) || token < 0 || token >= tokenizer.info.size) {
        throw new BloomeryError("INVALID_ARGUMENT", "showSpecialTokens must hold token ids of the vocabulary", {
          token,
        });
      }
      shown.set(token, tokenizer.detokenize([token], { special: true }));
    }
    const samplerOptions = nativeSamplerOptions(options, tokenizer.info.size);
    const grammar = options.jsonSchema === undefined ? options.grammar : jsonSchemaToGrammarAsync(options.jsonSchema);
    const sampler =
      grammar === undefined
        ? Promise.resolve(callNative((a) => a.createSampler(samplerOptions, tokenizer.nativeTokenizer)))
        : Promise.resolve(grammar)
            // The addon refuses a grammar that is not a string (a promise that settled to one) by name.
            .then((text) =>
              callNative((a) => a.createSamplerAsync({ ...samplerOptions, grammar: text }, tokenizer.nativeTokenizer)),
            )
            .catch((error: unknown) => {
              throw fromNativeError(error);
            });
    // Token ids fit an Int32Array as they are: the tokenizer's array is read as one, not copied.
    const text = async (t: string) => {
      const ids = await tokenizer.tokenizeAsync(t, { special: true, addSpecial: true });
      return new Int32Array(ids.buffer, ids.byteOffset, ids.length);
    };
    const promptTokens: Promise<Int32Array> =
      typeof prompt === "string"
        ? text(prompt)
        : isPromiseLike(prompt)
          ? Promise.resolve(prompt).then(text)
          : Promise.resolve(Int32Array.from(tokenIds(prompt, tokenizer.info.size, "generate()'s prompt")));
    // Awaited when the generation starts; a caller that never iterates leaves no unhandled rejection.
    sampler.catch(() => {});
    promptTokens.catch(() => {});
    let settle: GenerateRun["settle"] | undefined;
    // The session is this generation's until its result settles (see the class's notes); one that is never run
    // (neither iterated nor its result awaited) keeps it.
    const result = new Promise<GenerateResult>((resolve, reject) => {
      settle = {
        resolve: (r) => {
          this.#generating = false;
          resolve(r);
        },
        reject: (e) => {
          this.#generating = false;
          reject(e);
        },
      };
    });
    // A caller that only iterates must not leave an unhandled rejection behind.
    result.catch(() => {});
    const logprobs = samplerOptions.logprobs !== undefined;
    this.#generating = true;
    const iterator = this.#stream(handle, {
      prompt: promptTokens,
      sampler,
      maxTokens,
      shiftKeep,
      reusePrefix,
      logprobs,
      draft,
      stop,
      shown,
      signal,
      settle: settle!,
    });
    return iterableWithResult(iterator, result, "generate()");
  }

  /**
   * Chats: renders `messages` (and `tools`) with the model's chat template, generates the
   * assistant's answer as {@link generate} does, and parses it while it streams: reasoning (`<think>`
   * blocks) and tool calls (in the format the template teaches: Qwen3/Hermes, Qwen3-Coder XML,
   * Llama 3 JSON, GLM-4.5, DeepSeek-V3.1, DeepSeek-R1, Kimi-K2 or gpt-oss's harmony, whose analysis
   * channel is the reasoning and final channel the answer: `ToolCallFormat`) come as their own fields
   * of the chunks, and `.result` holds the whole message. gpt-oss's reasoning effort is the template
   * variable `reasoning_effort` (`templateKwargs: { reasoning_effort: "high" }`).
   * Text that only looked like a tool call (malformed, or cut off) comes back as answer text.
   * `messages` is the whole conversation: the session's context is replaced by it. The template
   * renders in a worker thread (see `Model.applyChatTemplateAsync`).
   *
   * Throws BloomeryError INVALID_ARGUMENT as generate does; a template that fails
   * (CHAT_TEMPLATE) or runs past a limit (CHAT_TEMPLATE_TOO_COMPLEX) ends the chat with that error
   * before its first chunk.
   */
  chat(messages: readonly ChatMessage[], options: ChatOptions = {}): ChatIterable {
    this.#idle("chat()");
    checkOptions(options, CHAT_OPTIONS, "chat()");
    return runChat(this, this.#model.chatModel, messages, options);
  }

  /** Forgets every token of the context, after storing its state in the model's prompt-state cache. */
  reset(): Promise<void> {
    const handle = this.#idle("reset()");
    return this.#enqueue(async () => {
      await callNativeAsync((a) => a.sessionStoreInCache(handle));
      callNative((a) => a.sessionReset(handle));
    });
  }

  /**
   * A new session of the same model whose context is a copy of this one's (after the calls made
   * before it): both continue from it independently, and give the same tokens for the same calls.
   */
  fork(): Promise<Session> {
    const handle = this.#idle("fork()");
    return this.#enqueue(async () => {
      const forked = await callNativeAsync((a) => a.sessionFork(handle));
      return this.#model.adoptSession(forked);
    });
  }

  /**
   * Saves the session's state (the tokens of its context and their keys and values): to a
   * {@link SessionState} in memory, or with `path`, to a file there. A file records the model's
   * identity, so only the same model file restores it. Throws BloomeryError FILE_WRITE when the
   * file cannot be written.
   */
  save(): Promise<SessionState>;
  save(path: string): Promise<void>;
  save(path?: string): Promise<SessionState | void> {
    const handle = this.#idle("save()");
    if (path !== undefined) checkPath(path, "save(path)");
    return this.#enqueue(async () => {
      if (path !== undefined) return callNativeAsync((a) => a.sessionSaveFile(handle, path));
      return new SessionState(await callNativeAsync((a) => a.sessionSave(handle)));
    });
  }

  /**
   * Replaces the session's state by a saved one: a {@link SessionState} from {@link save}, or the
   * path of a file it wrote. Throws BloomeryError STATE_MODEL_MISMATCH (saved from another model),
   * CONTEXT_TOO_LONG (more tokens than this session's context), STATE_BAD_FILE (not a state file,
   * or truncated), STATE_UNSUPPORTED_VERSION, FILE_NOT_FOUND or FILE_READ; the session is
   * unchanged after an error.
   */
  restore(state: SessionState | string): Promise<void> {
    const handle = this.#idle("restore()");
    if (typeof state === "string") {
      checkPath(state, "restore(path)");
      return this.#enqueue(() => callNativeAsync((a) => a.sessionRestoreFile(handle, state)));
    }
    const saved = state instanceof SessionState ? stateHandles.get(state) : undefined;
    if (!saved) {
      throw new BloomeryError("INVALID_ARGUMENT", "restore() takes a SessionState from save() or a file path");
    }
    return this.#enqueue(() => callNativeAsync((a) => a.sessionRestore(handle, saved)));
  }

  /**
   * Frees the session. Its state goes to the model's prompt-state cache first (on a worker
   * thread; the native session is freed once it is stored). Later calls throw BloomeryError DISPOSED.
   */
  dispose(): void {
    if (!this.#handle) return;
    const handle = this.#handle;
    this.#handle = undefined;
    if (!this.#model.closing) {
      // Storing can only fail for lack of room, which it reports as false: nothing to act on.
      void callNativeAsync((a) => a.sessionStoreInCache(handle)).catch(() => {});
    }
    callNative((a) => a.disposeSession(handle));
    this.#model.sessionClosed(this);
  }

  /** The chunks of one generation; settles its result however it ends. */
  async *#stream(handle: NativeSessionHandle, run: GenerateRun): AsyncGenerator<GenerateChunk, void, undefined> {
    const { prompt, sampler, maxTokens, shiftKeep, reusePrefix, draft, stop, shown, signal } = run;
    const decoder = this.#model.tokenizer.createDecoder();
    const tokens: number[] = [];
    const logprobs: TokenLogprobs[] | undefined = run.logprobs ? [] : undefined;
    let timings: GenerateTimings = {
      promptTokens: 0,
      cachedPromptTokens: 0,
      promptCacheHit: false,
      promptMs: 0,
      decodeTokens: 0,
      decodeMs: 0,
      discardedTokens: 0,
      draftTokens: 0,
      draftAccepted: 0,
    };
    let text = "";
    let stopReason: StopReason | undefined;
    let cancel: ((keptTokens: number) => void) | undefined;
    let stored = false;
    const turn = this.#takeTurn();
    try {
      const ready = await untilAborted(
        turn.then(() => Promise.all([prompt, sampler])),
        signal,
      );
      if (ready === ABORTED) stopReason = "abort";
      const events = new EventQueue<NativeGenerationEvent>();
      if (ready !== ABORTED) {
        const [batch, handleOfSampler] = ready;
        // llama-server's n_keep of -1 keeps the whole prompt.
        const keep = shiftKeep === WHOLE_PROMPT ? batch.length : shiftKeep;
        const generation = callNative((a) =>
          a.sessionGenerate(
            handle,
            batch,
            handleOfSampler,
            maxTokens,
            (event) => {
              events.push(event);
              this.#model.stepped();
            },
            keep,
            draft,
            reusePrefix,
          ),
        );
        cancel = (kept) => callNative((a) => a.generationCancel(generation, kept));
      }
      while (stopReason === undefined) {
        const event = await untilAborted(events.next(), signal);
        if (event === ABORTED) {
          stopReason = "abort";
          break;
        }
        timings = { ...event.timings };
        if ("end" in event) {
          cancel = undefined;
          if (event.error) throw fromNativeError(event.error);
          stopReason = event.end;
          break;
        }
        tokens.push(event.token);
        const special = shown.get(event.token);
        const piece = stop.push(special === undefined ? decoder.push(event.token) : decoder.flush() + special);
        text += piece.text;
        if (piece.stopped) stopReason = "stop";
        if (logprobs) {
          const drawn: TokenLogprobs = event.logprobs!;
          logprobs.push(drawn);
          yield { text: piece.text, tokens: [event.token], logprobs: [drawn] };
        } else {
          yield { text: piece.text, tokens: [event.token] };
        }
      }
      if (stopReason === "stop") {
        // A stop string ends the generation here: the context keeps the tokens before it. Its state
        // goes to the prompt-state cache before the result settles, so that the next prompt, of any
        // session, finds it (a generation that ended by itself was stored by the scheduler). The
        // store rejects only for a session disposed meanwhile, whose dispose() stored the state already.
        cancel?.(tokens.length);
        cancel = undefined;
        await callNativeAsync((a) => a.sessionStoreInCache(handle)).catch(() => {});
      }
      stored = stopReason !== "abort";
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
      // Still running: a stop string, the signal, or the consumer leaving the loop ended it here.
      cancel?.(tokens.length);
      // Reached without a stop reason only when the consumer left the loop.
      run.settle.resolve({ text, tokens, ...(logprobs && { logprobs }), stopReason: stopReason ?? "abort", timings });
      // The session's next call waits until the state of an aborted generation is in the
      // prompt-state cache (the scheduler left the cancelled generation's pass in flight, if any,
      // out of the context; a store refused for lack of room resolves false; one on a session
      // disposed meanwhile rejects DISPOSED, and dispose() stored it already).
      sampler.then(
        (made) => callNative((a) => a.disposeSampler(made)),
        () => {},
      );
      const next = () => void turn.then((done) => done());
      if (stored) next();
      else callNativeAsync((a) => a.sessionStoreInCache(handle)).then(next, next);
    }
  }

  #live(): NativeSessionHandle {
    if (!this.#handle) throw new BloomeryError("DISPOSED", "the session has been disposed");
    return this.#handle;
  }

  /** The handle, for a call that may not start while a generation holds the session. */
  #idle(what: string): NativeSessionHandle {
    const handle = this.#live();
    if (this.#generating) {
      throw new BloomeryError(
        "SESSION_BUSY",
        `${what}: a generation of this session is under way; end it (finish or leave its loop, or abort its signal) first`,
      );
    }
    return handle;
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

export const ABORTED = Symbol("aborted");

/** GenerateRun.shiftKeep's "the whole prompt". */
const WHOLE_PROMPT = -2;

/** The prompt tokens a context shift keeps (-1: none, no shift; WHOLE_PROMPT), from the contextShift option. */
function contextShiftKeep(option: GenerateOptions["contextShift"], addsBos: boolean): number {
  if (option === undefined || option === false) return -1;
  const keep = option === true ? 0 : typeof option === "object" && option !== null ? (option.keep ?? 0) : undefined;
  if (keep === undefined || !Number.isInteger(keep) || keep < -1) {
    throw new BloomeryError(
      "INVALID_ARGUMENT",
      "contextShift must be a boolean or { keep } (an integer of at least -1)",
      {
        contextShift: option,
      },
    );
  }
  if (keep === -1) return WHOLE_PROMPT;
  return keep + (addsBos ? 1 : 0);
}

/** Values pushed by a producer, taken in order by one consumer that awaits them. */
class EventQueue<T> {
  readonly #values: T[] = [];
  #waiting: ((value: T) => void) | undefined;

  push(value: T): void {
    const waiting = this.#waiting;
    this.#waiting = undefined;
    if (waiting) waiting(value);
    else this.#values.push(value);
  }

  next(): Promise<T> {
    if (this.#values.length > 0) return Promise.resolve(this.#values.shift()!);
    return new Promise((resolve) => (this.#waiting = resolve));
  }
}

/** `promise`, or ABORTED as soon as `signal` aborts (the promise keeps running). */
export function untilAborted<T>(promise: Promise<T>, signal: AbortSignal | undefined): Promise<T | typeof ABORTED> {
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
export function isAbortSignal(value: unknown): value is AbortSignal {
  const s = value as AbortSignal | null;
  return (
    typeof s === "object" && s !== null && typeof s.aborted === "boolean" && typeof s.addEventListener === "function"
  );
}
