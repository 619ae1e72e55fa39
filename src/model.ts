/**
 * loadModel() and Model: a GGUF model loaded into the native engine.
 * @module
 */
import { totalmem } from "node:os";
import { EventEmitter } from "eventemitter3";
import { BloomeryError } from "./errors.js";
import { downloadModel, isModelReference, type DownloadModelOptions } from "./download.js";
import {
  callNative,
  callNativeAsync,
  type NativeLoadOptions,
  type NativeModelHandle,
  type NativeModelStats,
  type NativeSessionHandle,
} from "./native.js";
import { ABORTED, isAbortSignal, Session, untilAborted } from "./session.js";
import { openTokenizer, type DetokenizeOptions, type TokenizeOptions, type Tokenizer } from "./tokenizer.js";
import { ChatTemplate, type ApplyChatTemplateOptions, type TemplateTokens } from "./chat/template.js";
import { BUILTIN_TEMPLATES, type BuiltinTemplateName } from "./chat/builtin-templates.js";
import { detectToolCallFormat, type ToolCallFormat } from "./chat/output.js";
import type { ChatMessage } from "./chat/types.js";
import { readGgufInfo } from "./gguf/read.js";
import {
  checkOffloadPlan,
  checkPlanShape,
  planOffload,
  type ModelFootprint,
  type OffloadBudgets,
  type OffloadPlan,
  type RoutingProfile,
} from "./plan.js";
import { getSystemInfo } from "./system.js";
import { LoadProgressReporter } from "./load-progress.js";
import { checkOptions, checkPath, optionKeys } from "./validate.js";
import {
  embedInputTokens,
  embeddingOf,
  rankPromptTokens,
  resolveEmbedOptions,
  type EmbedInput,
  type EmbedOptions,
  type Embedding,
  type Pooling,
  type RankedDocument,
} from "./embeddings.js";
import { resolveDraft, type DraftOption } from "./draft.js";
import type { GgufWarning } from "./gguf/types.js";

/** The benchmark-only door of {@link Model} (routing replayed from a trace): a registered symbol, in no typings. */
const REPLAY_ROUTING = Symbol.for("bloomery.bench.replayRouting");

/** Where {@link loadModel} puts the model on a GPU: the device index (default 0) and the device memory it may use. */
export interface GpuOptions {
  device?: number;
  /** Bytes, or a size such as `"8GiB"` or `"512MB"` (default: the card's free memory). */
  budget?: number | string;
}

/** Options of {@link loadModel}; any other key is refused (INVALID_ARGUMENT naming it). */
export interface LoadModelOptions {
  /**
   * `false` or left out: run on the CPU. `"auto"` or `{ device?, budget? }`: on the GPU, the whole model when it
   * fits the budget; otherwise dense weights, KV cache and as many routed experts per layer as fit go on the GPU and
   * the CPU runs the rest from host RAM (see {@link planOffload}). loadModel refuses (GPU_UNAVAILABLE,
   * INSUFFICIENT_MEMORY naming each term) rather than fall back to the CPU.
   */
  gpu?: false | "auto" | GpuOptions;
  /**
   * Bytes (or a size such as `"64GiB"`) of host RAM the routed experts left off the GPU (on the CPU: all of them)
   * may take (default: the RAM available now). When they need more, they are paged from the model file instead (the
   * disk tier): read into a RAM arena of this size as passes need them (see {@link planOffload}); below the arena's
   * minimum, one layer's experts, loadModel refuses (INSUFFICIENT_MEMORY).
   */
  hostRam?: number | string;
  /**
   * An offload plan to use as is (e.g. `model.plan` of an earlier load, edited): checked against the model and the
   * budgets (INVALID_ARGUMENT, INSUFFICIENT_MEMORY). Without `gpu`, its layers may list no GPU experts.
   */
  plan?: OffloadPlan;
  /**
   * With routed experts split between the GPU and host RAM: `"adaptive"` (default) moves the most-routed host
   * experts into the GPU slots of the least-routed ones between steps (a `residency` event says which), `"static"`
   * keeps the plan's placement. Output is the same either way. With a disk tier (`plan.arena`) the placement
   * stays the plan's whatever this says (the experts off the GPU live in the arena, which residency does not
   * copy from yet); `stats().residency.adaptive` says whether experts move.
   */
  residency?: "adaptive" | "static";
  /**
   * The most threads the CPU backend uses (default: one per physical core this process may run on, its CPU
   * affinity and cgroup quota counted; at most one per logical core: more only take turns, and every pass waits for
   * the last of them, so they are refused). While other programs keep the cores busy, fewer of them take part (down
   * to one), and they come back as the cores free up: a loop never waits on a thread the system is not running.
   */
  threads?: number;
  /** Tokens each session holds (default: the model's trained context, at most 4096). */
  contextSize?: number;
  /**
   * Sequences decoded together (default 2): the scheduler thread runs the next tokens of up to
   * this many generating or evaluating sessions in one forward pass, so each weight is read once
   * for all of them; further sessions wait in the order they asked. The sequences share every
   * matrix product and the experts, on the CPU and on the GPU (where a decode step of k sequences
   * is one CUDA graph), and a sequence's results do not depend on the others in its passes, but in
   * a hybrid model: there a pass of many rows (see {@link OffloadTimes.streamedPasses}) runs the CPU's experts on
   * the GPU, which rounds differently.
   */
  parallel?: number;
  /** A Jinja chat template to use instead of the file's `tokenizer.chat_template`. */
  chatTemplate?: string;
  /**
   * Speculative decoding for every run that does not say otherwise ({@link GenerateOptions.draft}): each pass
   * also verifies tokens drafted by an n-gram lookup or a draft model, and keeps those the sampler draws too, so
   * runs give the same tokens with or without it. See {@link DraftOption}; default `"auto"`.
   */
  draft?: DraftOption;
  /**
   * A GGUF file of a small model with this model's vocabulary (checked: DRAFT_VOCAB_MISMATCH) that drafts
   * tokens (`draft: "model"`), on the CPU. Draft models with sliding-window layers are refused (DRAFT_UNSUPPORTED).
   */
  draftModel?: string;
  /**
   * Host RAM for the prompt-state cache: bytes, or a size such as `"8GiB"`; `0` turns it off.
   * Default: a quarter of the machine's RAM, at most 8 GiB. The cache keeps the states of ended
   * generations (and of reset or disposed sessions), least recently used out first, so that a
   * prompt sharing a prefix with one of them restores it instead of evaluating it again
   * (see {@link Session.generate}).
   */
  cacheRam?: number | string;
  /**
   * `true` (default): map the file, so its pages are shared with the page cache and cost no private
   * memory. `false`: read it into private memory (for file systems where mapping is slow or unsafe);
   * refused (INVALID_ARGUMENT) when the plan pages experts from disk, since it would read them all.
   */
  mmap?: boolean;
  /**
   * Lock the model's bytes in RAM (default `false`), so the kernel never drops or swaps them. A refused
   * lock (e.g. the `ulimit -l` limit) is INSUFFICIENT_MEMORY, never ignored; refused (INVALID_ARGUMENT) when the
   * plan pages experts from disk, since it would lock them all in RAM.
   */
  mlock?: boolean;
  /**
   * Called as loading moves on: once before it starts, many times as the weights are read, uploaded or mapped
   * (bytes of each step), and once it is done. Called on the main thread; an error it throws rejects loadModel.
   */
  onProgress?: (progress: LoadProgress) => void;
  /**
   * Aborting it stops loading: loadModel rejects with BloomeryError ABORTED at once (a native load
   * in flight finishes in the background and is freed).
   */
  signal?: AbortSignal;
  /**
   * When loadModel is given a `user/repo[:quant]` reference or a URL instead of a file: how {@link downloadModel}
   * gets it (token, endpoint, cache folder, `onProgress` of the download, ...). Its `signal` is loadModel's.
   */
  download?: Omit<DownloadModelOptions, "signal">;
}

/**
 * What moves a model's weights while it loads, in this order: `"read"` (with `mmap: false`, the file read into
 * memory), `"upload"` (on the GPU, its weights copied onto the card), `"map"` (with mmap, the default: the weights
 * the CPU reads, faulted from the file into RAM so the first tokens do not wait for the disk).
 */
export type LoadStep = "read" | "upload" | "map";

/**
 * How far {@link loadModel} is: `"metadata"` (reading the file's header), `"weights"` (moving the weights, in
 * many reports of `bytes` of `totalBytes` per {@link LoadStep}), `"ready"`. `fraction` is the whole load's,
 * from 0 to 1, and never goes back.
 */
export interface LoadProgress {
  stage: "metadata" | "weights" | "ready";
  fraction: number;
  /** In the `"weights"` stage: the step moving them now. */
  step?: LoadStep;
  /** In the `"weights"` stage: bytes of this step done so far (growing to `totalBytes`). */
  bytes?: number;
  /** In the `"weights"` stage: the bytes this step moves. */
  totalBytes?: number;
}

/**
 * Something worth knowing that is not an error, e.g. a built-in chat template standing in for a missing one. What
 * loading finds is in {@link ModelInfo.warnings}; what comes up later is a `warning` event.
 */
export interface ModelWarning {
  /**
   * `"CHAT_TEMPLATE_FALLBACK"`: the file has no chat template; the built-in one named in the message is used.
   * `"CHAT_TEMPLATE_ADAPTED"`: the template uses Jinja that @huggingface/jinja lacks (Kimi-K2's `list.append` /
   * `list.pop`), rendered through the equivalent rewrites the message names.
   * `"GGUF_TENSOR_LAYOUT"`: unused bytes follow the file's last tensor, as a type or shape changed to a smaller
   * one leaves (see {@link GgufWarning}).
   */
  code: "CHAT_TEMPLATE_FALLBACK" | "CHAT_TEMPLATE_ADAPTED" | GgufWarning["code"];
  message: string;
}

/** The events of a {@link Model}, with their listeners' signatures. */
export interface ModelEvents {
  /** A warning: emitted once, when the thing it warns of first happens. */
  warning: (warning: ModelWarning) => void;
  /** Routed experts moved between host RAM and the GPU (residency `"adaptive"`), reported after the step that moved them. */
  residency: (event: ResidencyEvent) => void;
}

/** One expert move: `seated` takes GPU slot `slot` of `layer` from `evicted`, which the CPU serves from then on. */
export interface ResidencyMove {
  layer: number;
  slot: number;
  evicted: number;
  seated: number;
}

/** A {@link ModelEvents.residency} event. */
export interface ResidencyEvent {
  /** The moves, in the order they began (each expert's copy lands a step or so later; the CPU serves it meanwhile). */
  moves: ResidencyMove[];
  /** Per layer, how many of `moves` are in it. */
  movesPerLayer: number[];
}

/** Each step's routed calls, from {@link Model.traceRouting}. */
export interface RoutingTrace {
  layers: number;
  experts: number;
  /** Per step, rows routed to each (layer, expert): `step[layer * experts + expert]`. */
  steps: Uint32Array[];
}

/**
 * Where routed experts ran: each routed call (a row routed to an expert) counts for the tier that served it, so
 * `gpuCalls + hostCalls + diskCalls` is every routed call since load (tokens x experts used x MoE layers). Rates are
 * shares of that sum (0 before any).
 */
export interface ResidencyStats {
  /** Calls the GPU ran from its expert slots. */
  gpuCalls: number;
  /**
   * Calls the CPU ran from host RAM: experts held in RAM (the file's pages), and disk-tier experts the RAM arena
   * already held when the pass asked for them (its hits).
   */
  hostCalls: number;
  /**
   * Calls the CPU ran after the disk tier read their expert from the model file for that pass (or read it ahead for
   * it); 0 without a disk tier. All calls of one pass to one expert count alike.
   */
  diskCalls: number;
  /** gpuCalls / all calls. */
  gpuHitRate: number;
  /** hostCalls / all calls: served from RAM by the CPU. */
  hostHitRate: number;
  /** diskCalls / all calls: what the disk tier had to read for. */
  diskHitRate: number;
  /** Steps (forward passes of the scheduler) counted. */
  steps: number;
  /** Expert moves begun since load. */
  moves: number;
  /** Whether experts move (residency "adaptive" on a model with experts in host RAM). */
  adaptive: boolean;
}

/** What a loaded model is. */
export interface ModelInfo {
  /** `general.architecture`: qwen3moe, glm4moe, deepseek2, gpt-oss, qwen35moe, qwen3next, qwen35, qwen3, qwen2 or llama. */
  architecture: string;
  layers: number;
  embeddingLength: number;
  vocabSize: number;
  heads: number;
  kvHeads: number;
  headDim: number;
  /** Routed experts per layer (0 for a dense model). */
  experts: number;
  /** Experts each token uses. */
  expertsUsed: number;
  /** The context the model was trained for. */
  contextLength: number;
  /** Tokens each session holds. */
  contextSize: number;
  threads: number;
  /** Sequences decoded together (`LoadModelOptions.parallel`). */
  parallel: number;
  /** Whether the model runs on the GPU (wholly, or with some routed experts on the CPU: see `Model.plan`). */
  gpu: boolean;
  /** Beginning- and end-of-sequence tokens (-1 when the model names none). */
  bosToken: number;
  eosToken: number;
  /** The tokens that end a generation: end-of-sequence and end-of-turn (a logit bias of -Infinity on them never ends one). */
  endTokens: readonly number[];
  /** Bytes of weights per ggml type, e.g. `{ Q4_K: ..., Q6_K: ..., F32: ... }`. */
  quantMix: Record<string, number>;
  /** Bytes of all weights. */
  bytes: number;
  /** The chat template stored in the file (`tokenizer.chat_template`), if any. */
  chatTemplate?: string;
  /** The built-in template chats use when the file has none (see the `warning` event). */
  builtinChatTemplate?: BuiltinTemplateName;
  /** What loading found odd in the file, without refusing it. */
  warnings: readonly ModelWarning[];
  /** The file's pooling type (`<arch>.pooling_type`; `"none"` when it names none): what {@link Model.embed} uses by default. */
  pooling: Pooling;
  /** Outputs of the file's reranker head (`cls.output`), 0 when it has none: {@link Model.rank} needs one. */
  rankLabels: number;
  /** The reranker's prompt template stored in the file (`tokenizer.chat_template.rerank`), if any. */
  rankTemplate?: string;
}

/** What loadModel reads from the file besides the engine's view. @internal */
type FileFacts = Pick<
  ModelInfo,
  "quantMix" | "bytes" | "chatTemplate" | "builtinChatTemplate" | "warnings" | "rankTemplate"
>;

/**
 * Where a model on the GPU spent the time of its hybrid passes (those with routed experts on the CPU), summed
 * since load. Per MoE layer the GPU and the CPU run their experts at once: the overlap is about
 * `cpuExpertSeconds - gpuWaitSeconds`.
 */
export interface OffloadTimes {
  /** Passes whose host experts the CPU ran (a decode step is one; a prompt one per 512 tokens). */
  passes: number;
  /**
   * Prompt passes that copied the host experts to the GPU instead (not in the times below): those of 512 rows
   * or more, and those of 16 to 511 rows where the measured copy time is below the CPU's measured time for
   * as many rows (before both are measured: 64 rows or more).
   */
  streamedPasses: number;
  /** Wall time of the model's passes on the GPU. */
  wallSeconds: number;
  /** The CPU thread pool running host experts. */
  cpuExpertSeconds: number;
  /** The host waiting for the GPU's routed rows. */
  cpuWaitSeconds: number;
  /** The GPU waiting for the CPU's expert sums. */
  gpuWaitSeconds: number;
  /** Bytes of host experts the streamed passes copied to the GPU. */
  streamedBytes: number;
  /**
   * The rate of those copies, bytes per second over the copies timed on the GPU (0 before any): what a streamed
   * prompt's passes cannot outrun, as every pass copies every host expert.
   */
  streamedBytesPerSecond: number;
}

/**
 * The disk tier's work since load (see {@link OffloadPlan.arena}): experts the CPU needed from it, counted once per
 * pass that needed them, found in the RAM arena (hits) or read from the model file (misses). Per routed call, see
 * {@link ResidencyStats}.
 */
export interface DiskTierStats {
  /** Slots of the RAM arena: experts it holds at once. */
  slots: number;
  slotBytes: number;
  hits: number;
  /** Experts read for the pass that needed them, or read ahead of it. */
  misses: number;
  /**
   * Experts read ahead: while a prompt-sized pass runs a layer, the next layer's experts the routing counts rank
   * hottest, each into a slot holding a colder one (a pass that then needs one counts it as a miss).
   */
  readAhead: number;
  /** hits / (hits + misses); 0 before any. */
  hitRate: number;
  /** Bytes the reads transferred (whole aligned blocks). */
  bytesRead: number;
  /** Time in reads, summed over the I/O threads (several reads run at once). */
  readSeconds: number;
  /** Time passes waited for reads with nothing else left to run. */
  waitSeconds: number;
  /**
   * Whether reads bypass the page cache (O_DIRECT). `false`: the file system refused O_DIRECT (e.g. tmpfs), so they
   * are plain reads, and the kernel may keep copies of the paged experts in its page cache.
   */
  directIo: boolean;
}

/** A snapshot of {@link Model.stats}: the scheduler's work since the model was loaded. */
export interface ModelStats {
  /** Prompt (and `evaluate`) tokens run. */
  promptTokens: number;
  /** Generated tokens fed back, one row each. */
  decodeTokens: number;
  /** Wall time of the passes that ran prompt tokens. */
  promptSeconds: number;
  /** Wall time of the passes that ran generated tokens (a pass with both kinds counts in both). */
  decodeSeconds: number;
  /** promptTokens / promptSeconds. */
  promptTokensPerSecond: number;
  /** decodeTokens / decodeSeconds: the total decode rate of all streams together. */
  decodeTokensPerSecond: number;
  /** Sequences running now: at most `info.parallel`. */
  activeSequences: number;
  /** Sequences waiting for a place, served in the order they asked. */
  waitingSequences: number;
  /** Forward passes run. */
  passes: number;
  /** Token rows per pass, on average. */
  meanRowsPerPass: number;
  /** Passes that ran generated tokens. */
  decodePasses: number;
  /** decodeTokens / decodePasses: above 1 when drafts were kept. */
  tokensPerDecodePass: number;
  /** Tokens drafted and verified ({@link DraftOption}). */
  draftTokens: number;
  /** Of them, those the sampler drew too (each a token without a pass of its own). */
  draftAccepted: number;
  /** Verifications of drafts: one per generation and pass that verified some. */
  draftPasses: number;
  /** draftAccepted / draftTokens (0 before any draft). */
  draftAcceptanceRate: number;
  /** Sessions per pass, on average: above 1 when streams shared passes. */
  meanSequencesPerPass: number;
  /** The most sessions one pass has held. */
  widestPass: number;
  /** Hybrid pass times on the GPU; null for a model on the CPU. */
  offload: OffloadTimes | null;
  /** Routed expert calls by the tier that served them (GPU, RAM, disk), and expert moves. */
  residency: ResidencyStats;
  /** The disk tier's counters; null when no expert is paged from disk. */
  disk: DiskTierStats | null;
}

/** loadModel's `draft` option, the default of every run, and whether it loaded a draft model. @internal */
interface ModelDrafts {
  option: DraftOption | undefined;
  hasDraftModel: boolean;
}

/** The template a model's chats use, and what it tells of the model's output. @internal */
interface ModelChatTemplate {
  template: ChatTemplate;
  toolCallFormat: ToolCallFormat;
}

/**
 * A loaded model. Create sessions from it; dispose() frees it and every session it made. It is an
 * EventEmitter (eventemitter3) of {@link ModelEvents}.
 */
export class Model extends EventEmitter<ModelEvents> {
  #handle: NativeModelHandle | undefined;
  readonly #sessions = new Set<Session>();
  /** What the model is and how it runs. */
  readonly info: ModelInfo;
  /**
   * Where the routed experts live: on the GPU, in host RAM or paged from disk (undefined for a dense model on the
   * CPU). Pass it back to loadModel as `plan`.
   */
  readonly plan: OffloadPlan | undefined;

  readonly #tokenizer: Tokenizer;
  readonly #chatTemplate: ModelChatTemplate;
  readonly #drafts: ModelDrafts;
  #templateWarned = false;

  /** @internal */
  constructor(
    handle: NativeModelHandle,
    tokenizer: Tokenizer,
    facts: FileFacts,
    plan?: OffloadPlan,
    drafts: ModelDrafts = { option: undefined, hasDraftModel: false },
  ) {
    super();
    this.#handle = handle;
    this.#drafts = drafts;
    this.plan = plan && deepFreeze(plan);
    this.#tokenizer = tokenizer;
    const source = facts.chatTemplate ?? BUILTIN_TEMPLATES[facts.builtinChatTemplate ?? "chatml"];
    this.#chatTemplate = { template: new ChatTemplate(source), toolCallFormat: detectToolCallFormat(source) };
    const { eos, eot } = tokenizer.info;
    const endTokens = Object.freeze([...new Set([eos, eot].filter((t): t is number => t !== null && t >= 0))]);
    this.info = Object.freeze({ ...callNative((a) => a.modelInfo(handle)), ...facts, endTokens });
  }

  /**
   * The prompt text for a conversation, rendered with the model's chat template (or, when the file
   * has none, the built-in one `info.builtinChatTemplate` names, with a `warning` event the first
   * time). The template runs in a worker thread with a deadline and a heap limit
   * (`CHAT_TEMPLATE_LIMITS`), while this thread waits: use {@link applyChatTemplateAsync} to go
   * on meanwhile. Throws BloomeryError CHAT_TEMPLATE when the template fails,
   * CHAT_TEMPLATE_TOO_COMPLEX (naming the limit) when it runs past a limit, INVALID_ARGUMENT when
   * `templateKwargs` is not plain data.
   */
  applyChatTemplate(messages: readonly ChatMessage[], options: ApplyChatTemplateOptions = {}): string {
    return this.#chatTemplate.template.render(messages, this.#templateTokens(), options);
  }

  /**
   * {@link applyChatTemplate} without blocking this thread: the template renders in a worker of a
   * small pool (a slow template holds one worker; others render meanwhile). What servers and
   * `Session.chat` use.
   */
  async applyChatTemplateAsync(
    messages: readonly ChatMessage[],
    options: ApplyChatTemplateOptions = {},
  ): Promise<string> {
    return this.#chatTemplate.template.renderAsync(messages, this.#templateTokens(), options);
  }

  /** The special tokens' texts a template may use; warns once when the built-in template stands in. */
  #templateTokens(): TemplateTokens {
    this.#live();
    if (!this.#templateWarned) {
      this.#templateWarned = true;
      if (this.info.builtinChatTemplate) {
        this.emit("warning", {
          code: "CHAT_TEMPLATE_FALLBACK",
          message: `the model file has no chat template (tokenizer.chat_template): using the built-in "${this.info.builtinChatTemplate}" template`,
        });
      }
      const { adaptations } = this.#chatTemplate.template;
      if (adaptations.length > 0) {
        this.emit("warning", {
          code: "CHAT_TEMPLATE_ADAPTED",
          message: `the chat template is rendered with these rewrites: ${adaptations.join("; ")}`,
        });
      }
    }
    const text = (token: number) => (token < 0 ? "" : this.#tokenizer.detokenize([token], { special: true }));
    return { bosToken: text(this.info.bosToken), eosToken: text(this.info.eosToken) };
  }

  /**
   * The tokens of `text`. Special-token text (e.g. `<|im_start|>`) becomes its token only
   * with `special: true`; `addSpecial: true` adds the BOS/EOS tokens the model asks for. It runs
   * on this thread: for long texts (a megabyte takes a fraction of a second) use {@link tokenizeAsync}.
   * `text` may be given as its UTF-8 bytes (a Uint8Array; bytes that are not UTF-8 are refused).
   */
  tokenize(text: string | Uint8Array, options: TokenizeOptions = {}): Uint32Array {
    this.#live();
    checkOptions(options, TOKENIZE_OPTIONS, "tokenize()");
    return this.#tokenizer.tokenize(text, options);
  }

  /**
   * {@link tokenize} on a worker thread, so this thread goes on meanwhile (short texts are tokenized at once).
   * UTF-8 bytes (a Uint8Array) are read there as they are, not copied - a long text then never needs to be a
   * string on this thread (a server passing a request's bytes on): leave them unchanged until the promise settles.
   */
  async tokenizeAsync(text: string | Uint8Array, options: TokenizeOptions = {}): Promise<Uint32Array> {
    this.#live();
    return this.#tokenizer.tokenizeAsync(text, options);
  }

  /** The text of `tokens`; special tokens are rendered only with `special: true`. */
  detokenize(tokens: ArrayLike<number>, options: DetokenizeOptions = {}): string {
    this.#live();
    checkOptions(options, DETOKENIZE_OPTIONS, "detokenize()");
    return this.#tokenizer.detokenize(tokens, options);
  }

  /**
   * Embeddings of `inputs` (texts, tokenized with the model's special tokens as llama-server does, or token ids
   * as given): each input's hidden states after the output norm, pooled (`options.pooling`, by default the
   * file's) and normalized (`options.normalize`). The inputs run as separate sequences through the model's
   * scheduler, `info.parallel` of them in one forward pass; none touches a session's context. Throws
   * BloomeryError INVALID_ARGUMENT for a bad option or an input without tokens, CONTEXT_TOO_LONG for an input
   * longer than `info.contextSize`, NOT_A_RERANKER for pooling `"rank"` on a model without a reranker head. On a
   * model on the GPU the hidden states come from the GPU's passes (hybrid ones too); the pooling and a
   * reranker's head run on the CPU.
   */
  async embed(inputs: readonly EmbedInput[], options: EmbedOptions = {}): Promise<Embedding[]> {
    this.#live();
    const { pooling, norm } = resolveEmbedOptions(options, this.info.pooling);
    const tokens = await embedInputTokens(inputs, this.#tokenizer, "embed()'s inputs");
    const pooled = await this.#embedTokens(tokens, pooling);
    return pooled.map((floats, i) => embeddingOf(floats, pooling, norm, this.info.embeddingLength, tokens[i]!.length));
  }

  /**
   * How relevant each document is to `query`, by the file's reranker head (a reranker such as Qwen3-Reranker,
   * whose file has `cls.output`): each query-and-document prompt (the file's rerank template, or query and
   * document between the model's special tokens: see llama-server's /rerank) is evaluated as in
   * {@link embed} with pooling `"rank"`, and scored by the head's first output. Results come in the documents'
   * order. Throws BloomeryError NOT_A_RERANKER when the model has no reranker head, and {@link embed}'s errors.
   */
  async rank(query: string, documents: readonly string[]): Promise<RankedDocument[]> {
    this.#live();
    if (this.info.rankLabels === 0) {
      throw new BloomeryError("NOT_A_RERANKER", "the model has no reranker head (cls.output): it cannot rank");
    }
    if (typeof query !== "string" || !Array.isArray(documents) || documents.some((d) => typeof d !== "string")) {
      throw new BloomeryError("INVALID_ARGUMENT", "rank() takes a query string and an array of document strings");
    }
    const prompts = await Promise.all(
      documents.map((document) => rankPromptTokens(this.#tokenizer, this.info.rankTemplate, query, document)),
    );
    const embedded = await this.embed(prompts, { pooling: "rank" });
    return embedded.map((e, index) => ({ index, score: e.vector[0]!, tokenCount: e.tokenCount }));
  }

  /**
   * The pooled hidden states of each input, through `info.parallel` sessions of their own (each holds a KV cache of
   * the context's size), each taking the next input once its last is done: the scheduler runs them in one pass.
   */
  async #embedTokens(inputs: readonly Int32Array[], pooling: Pooling): Promise<Float32Array[]> {
    const handle = this.#live();
    const pooled: Float32Array[] = new Array(inputs.length);
    let next = 0;
    let failed = false;
    const worker = async () => {
      const session = callNative((a) => a.createSession(handle));
      try {
        while (next < inputs.length && !failed) {
          const i = next++;
          callNative((a) => a.sessionReset(session));
          pooled[i] = await callNativeAsync((a) => a.sessionEmbed(session, inputs[i]!, pooling));
        }
      } catch (error) {
        failed = true;
        throw error;
      } finally {
        callNative((a) => a.disposeSession(session));
      }
    };
    await Promise.all(Array.from({ length: Math.min(this.info.parallel, inputs.length) }, worker));
    return pooled;
  }

  /** True once {@link dispose} ran. */
  get disposed(): boolean {
    return this.#handle === undefined;
  }

  /** A new session with an empty context of `info.contextSize` tokens. It takes no options yet: any is refused. */
  createSession(options: Record<string, never> = {}): Session {
    const handle = this.#live();
    checkOptions(options, [], "createSession()");
    return this.#adopt(callNative((a) => a.createSession(handle)));
  }

  /**
   * What the scheduler has done since the model was loaded, and what it is doing now, and where a
   * model on the GPU spent its hybrid passes' time. Counters only grow; compare two snapshots for
   * the rates of a period.
   */
  stats(): ModelStats {
    const handle = this.#live();
    const s = callNative((a) => a.modelStats(handle));
    return {
      promptTokens: s.promptTokens,
      decodeTokens: s.decodeTokens,
      promptSeconds: s.promptSeconds,
      decodeSeconds: s.decodeSeconds,
      promptTokensPerSecond: s.promptSeconds > 0 ? s.promptTokens / s.promptSeconds : 0,
      decodeTokensPerSecond: s.decodeSeconds > 0 ? s.decodeTokens / s.decodeSeconds : 0,
      activeSequences: s.active,
      waitingSequences: s.waiting,
      passes: s.passes,
      meanRowsPerPass: s.passes > 0 ? s.rows / s.passes : 0,
      decodePasses: s.decodePasses,
      tokensPerDecodePass: s.decodePasses > 0 ? s.decodeTokens / s.decodePasses : 0,
      draftTokens: s.draftTokens,
      draftAccepted: s.draftAccepted,
      draftPasses: s.draftPasses,
      draftAcceptanceRate: s.draftTokens > 0 ? s.draftAccepted / s.draftTokens : 0,
      meanSequencesPerPass: s.passes > 0 ? s.sequenceRows / s.passes : 0,
      widestPass: s.widestPass,
      offload: s.offload,
      residency: residencyStats(s.residency),
      disk: s.disk && {
        ...s.disk,
        hitRate: s.disk.hits + s.disk.misses > 0 ? s.disk.hits / (s.disk.hits + s.disk.misses) : 0,
      },
    };
  }

  /** The routing counts so far (decaying: see {@link RoutingProfile}); pass them to planOffload for a later load. */
  routingProfile(): RoutingProfile {
    const handle = this.#live();
    const counts = callNative((a) => a.modelRoutingCounts(handle));
    const steps = callNative((a) => a.modelStats(handle)).residency.steps;
    const { layers, experts } = this.info;
    const rows = Array.from({ length: experts > 0 ? layers : 0 }, (_, l) =>
      Array.from(counts.subarray(l * experts, (l + 1) * experts)),
    );
    return { layers, experts, steps, counts: rows };
  }

  /**
   * Starts recording each step's routed calls (for studying routing, e.g. simulating a cache on the same trace);
   * `stop()` ends the recording and returns it.
   */
  traceRouting(): { stop(): RoutingTrace } {
    const handle = this.#live();
    callNative((a) => a.modelRoutingTrace(handle, true));
    return {
      stop: () => ({
        layers: this.info.layers,
        experts: this.info.experts,
        steps: callNative((a) => a.modelRoutingTrace(this.#live(), false)),
      }),
    };
  }

  /**
   * Benchmarks only, not part of the API (reached through the registered symbol REPLAY_ROUTING, as
   * `bench/residency.mjs --routing` does): from the next pass on, each MoE layer takes its experts from a recorded
   * routing trace instead of its router, one trace step a token in order (wrapping at the end), each weighted
   * uniformly; null gives the routers back. `layers`: the trace's MoE layers; `ids`: steps x layers x expertsUsed.
   * So a random-weight benchmark file moves the experts a trained model's routing would (issue 28).
   */
  [REPLAY_ROUTING](trace: { layers: Int32Array; ids: Int32Array } | null): void {
    const handle = this.#live();
    callNative((a) => a.modelReplayRouting(handle, trace ? trace.layers : null, trace?.ids));
  }

  /**
   * Disposes every session of the model, then frees the model and drops its event listeners.
   * Later calls throw BloomeryError DISPOSED.
   */
  dispose(): void {
    if (!this.#handle) return;
    this.removeAllListeners();
    const handle = this.#handle;
    this.#handle = undefined;
    for (const session of [...this.#sessions]) session.dispose();
    callNative((a) => a.disposeModel(handle));
  }

  /** {@link dispose}, for `await using model = await loadModel(...)`. */
  async [Symbol.asyncDispose](): Promise<void> {
    this.dispose();
  }

  #adopt(native: NativeSessionHandle): Session {
    const disposed = () => this.disposed;
    const session = new Session(native, {
      eosToken: this.info.eosToken,
      tokenizer: this.#tokenizer,
      contextSize: this.info.contextSize,
      chatModel: {
        toolCallFormat: this.#chatTemplate.toolCallFormat,
        tokenizer: this.#tokenizer,
        contextSize: this.info.contextSize,
        render: (messages, options) => this.applyChatTemplateAsync(messages, options),
      },
      get closing() {
        return disposed();
      },
      sessionClosed: (s) => this.#sessions.delete(s),
      stepped: () => this.#reportMoves(),
      adoptSession: (forked) => this.#adopt(forked),
      draftFor: (option) =>
        resolveDraft(option === undefined ? this.#drafts.option : option, this.#drafts.hasDraftModel),
    });
    this.#sessions.add(session);
    return session;
  }

  #reportMoves(): void {
    if (!this.#handle) return;
    const handle = this.#handle;
    const raw = callNative((a) => a.modelTakeMoves(handle));
    if (raw.length === 0) return;
    const moves: ResidencyMove[] = [];
    const movesPerLayer = new Array<number>(this.info.layers).fill(0);
    for (let i = 0; i < raw.length; i += 4) {
      const move = { layer: raw[i]!, slot: raw[i + 1]!, evicted: raw[i + 2]!, seated: raw[i + 3]! };
      moves.push(move);
      movesPerLayer[move.layer]! += 1;
    }
    this.emit("residency", { moves, movesPerLayer });
  }

  #live(): NativeModelHandle {
    if (!this.#handle) throw new BloomeryError("DISPOSED", "the model has been disposed");
    return this.#handle;
  }
}

const LOAD_MODEL_OPTIONS = optionKeys<LoadModelOptions>()({
  gpu: true,
  hostRam: true,
  plan: true,
  residency: true,
  threads: true,
  contextSize: true,
  parallel: true,
  chatTemplate: true,
  draft: true,
  draftModel: true,
  cacheRam: true,
  mmap: true,
  mlock: true,
  onProgress: true,
  signal: true,
  download: true,
});
const GPU_OPTIONS = optionKeys<GpuOptions>()({ device: true, budget: true });
const TOKENIZE_OPTIONS = optionKeys<TokenizeOptions>()({ special: true, addSpecial: true });
const DETOKENIZE_OPTIONS = optionKeys<DetokenizeOptions>()({ special: true });

const SIZE_UNITS: Record<string, number> = {
  "": 1,
  B: 1,
  KB: 1e3,
  MB: 1e6,
  GB: 1e9,
  TB: 1e12,
  KIB: 1024,
  MIB: 1024 ** 2,
  GIB: 1024 ** 3,
  TIB: 1024 ** 4,
};

/** Bytes of a size given as a number or as text such as "8GiB". */
function parseBytes(size: number | string, what: string): number {
  const match = typeof size === "string" ? /^\s*([\d.]+)\s*([a-z]*)\s*$/i.exec(size) : null;
  const unit = match ? SIZE_UNITS[(match[2] ?? "").toUpperCase()] : undefined;
  const bytes = typeof size === "number" ? size : match && unit !== undefined ? Number(match[1]) * unit : NaN;
  if (!Number.isFinite(bytes) || bytes < 1) {
    throw new BloomeryError("INVALID_ARGUMENT", `${what} must be a positive number of bytes or a size like "8GiB"`, {
      [what]: size,
    });
  }
  return Math.floor(bytes);
}

function deepFreeze<T>(value: T): T {
  if (typeof value === "object" && value !== null) {
    for (const inner of Object.values(value)) deepFreeze(inner);
    Object.freeze(value);
  }
  return value;
}

/**
 * The plan for a load on the GPU: `given` checked, or planOffload's, within the gpu budget (the card's free memory
 * less the engine's reserve) and the hostRam budget. Undefined when the device does not exist (the addon refuses).
 */
async function gpuPlan(
  path: string,
  gpu: NonNullable<NativeLoadOptions["gpu"]>,
  options: LoadModelOptions,
): Promise<OffloadPlan | undefined> {
  const system = getSystemInfo();
  const card = system.gpus.find((g) => g.index === (gpu.device ?? 0));
  if (!card) return undefined;
  const footprint: ModelFootprint = await callNativeAsync((a) => a.gpuFootprint(path, options.contextSize ?? 0));
  const usable = Math.max(0, card.freeMemory - footprint.reserveBytes);
  const budgets: OffloadBudgets = {
    gpu: gpu.budget === undefined ? usable : Math.min(gpu.budget, usable),
    hostRam: resolveHostRam(options.hostRam, system.memory.available),
  };
  return options.plan ? checkOffloadPlan(options.plan, footprint, budgets) : planOffload(footprint, budgets);
}

function residencyStats(r: NativeModelStats["residency"]): ResidencyStats {
  const total = r.gpuCalls + r.hostCalls + r.diskCalls;
  const rate = (calls: number) => (total > 0 ? calls / total : 0);
  return {
    gpuCalls: r.gpuCalls,
    hostCalls: r.hostCalls,
    diskCalls: r.diskCalls,
    gpuHitRate: rate(r.gpuCalls),
    hostHitRate: rate(r.hostCalls),
    diskHitRate: rate(r.diskCalls),
    steps: r.steps,
    moves: r.moves,
    adaptive: r.adaptive,
  };
}

/**
 * The plan for a load on the CPU (every expert in host RAM, or paged from disk beyond hostRam): `given` checked, or
 * planOffload's with no GPU. Undefined for a dense model given no plan.
 */
async function cpuPlan(path: string, options: LoadModelOptions): Promise<OffloadPlan | undefined> {
  if (options.plan?.layers.some((layer) => layer.gpu.length > 0)) {
    throw new BloomeryError("INVALID_ARGUMENT", "plan places experts on the GPU: load with gpu");
  }
  const footprint: ModelFootprint = await callNativeAsync((a) => a.hostFootprint(path, options.contextSize ?? 0));
  if (footprint.experts === 0 && !options.plan) return undefined;
  const budgets: OffloadBudgets = {
    gpu: 0,
    hostRam: resolveHostRam(options.hostRam, callNative((a) => a.hostMemory()).available),
  };
  return options.plan ? checkOffloadPlan(options.plan, footprint, budgets) : planOffload(footprint, budgets);
}

function resolveHostRam(hostRam: LoadModelOptions["hostRam"], available: number): number {
  return hostRam === undefined ? available : parseBytes(hostRam, "hostRam");
}

/** Bytes of the prompt-state cache: the option, or a quarter of the RAM up to 8 GiB. */
function resolveCacheRam(cacheRam: LoadModelOptions["cacheRam"]): number {
  if (cacheRam === undefined) return Math.min(8 * 1024 ** 3, Math.floor(totalmem() / 4));
  if (cacheRam === 0 || cacheRam === "0") return 0;
  if (typeof cacheRam === "number" && !Number.isInteger(cacheRam)) {
    throw new BloomeryError("INVALID_ARGUMENT", "cacheRam must be a whole number of bytes", { cacheRam });
  }
  return parseBytes(cacheRam, "cacheRam");
}

/** The addon's view of the gpu option: undefined runs on the CPU. */
function resolveGpu(gpu: LoadModelOptions["gpu"]): NativeLoadOptions["gpu"] {
  if (gpu === undefined || gpu === false) return undefined;
  if (gpu === "auto") return {};
  if (typeof gpu !== "object" || gpu === null) {
    throw new BloomeryError("INVALID_ARGUMENT", 'gpu must be false, "auto" or { device?, budget? }', { gpu });
  }
  checkOptions(gpu, GPU_OPTIONS, "loadModel()'s gpu");
  const out: NonNullable<NativeLoadOptions["gpu"]> = {};
  if (gpu.device !== undefined) {
    if (!Number.isInteger(gpu.device) || gpu.device < 0) {
      throw new BloomeryError("INVALID_ARGUMENT", "gpu.device must be a non-negative integer", { device: gpu.device });
    }
    out.device = gpu.device;
  }
  if (gpu.budget !== undefined) out.budget = parseBytes(gpu.budget, "gpu.budget");
  return out;
}

/**
 * Loads a GGUF model (qwen3moe, qwen3, qwen2 or llama) from a file, or from the hub (`user/repo[:quant]`) or a URL
 * through {@link downloadModel} (its cache, its errors; `download` holds its options), for inference on the CPU, or with `gpu`
 * set on a GPU (every CPU weight type: F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K, Q3_K,
 * Q4_K, Q5_K, Q6_K, IQ4_NL, IQ4_XS, MXFP4, and the 1- to 3-bit IQ1_S, IQ1_M, IQ2_XXS, IQ2_XS,
 * IQ2_S, IQ3_XXS, IQ3_S, TQ1_0, TQ2_0): wholly when it fits, else with the routed experts the
 * budget cannot hold run by the CPU from host RAM, or paged from disk where `hostRam` cannot hold
 * them, as `plan` (or {@link planOffload}) places them; `model.plan` shows the placement, and keeps
 * off the GPU the experts of layers whose expert stacks it cannot serve, saying why. Throws
 * GPU_UNAVAILABLE (no usable CUDA device, saying why), INSUFFICIENT_MEMORY, UNSUPPORTED_QUANT
 * (naming a tensor other than routed experts that the GPU cannot serve), and like the CPU path
 * BloomeryError UNSUPPORTED_ARCH, UNSUPPORTED_QUANT
 * (naming the tensor), MODEL_MISSING_TENSOR,
 * MODEL_TENSOR_SHAPE, MODEL_BAD_METADATA (naming the key whose value does not fit the rest of the
 * file), MODEL_UNEXPECTED_TENSOR (a tensor the model does not use), TOKENIZER_BAD_VOCAB,
 * CONTEXT_TOO_LONG (a contextSize beyond the model's trained context), INVALID_ARGUMENT (naming
 * an unknown option or one out of range, threads beyond the logical cores among them), or the
 * GGUF reader's codes; ABORTED when `signal` aborts first. docs/hardening.md lists what is checked.
 * Passes of a model whose mapped file changed on disk later fail with MODEL_FILE_CHANGED.
 */
export async function loadModel(pathOrReference: string, options: LoadModelOptions = {}): Promise<Model> {
  checkPath(pathOrReference, "loadModel()");
  checkOptions(options, LOAD_MODEL_OPTIONS, "loadModel()");
  const { signal, onProgress } = options;
  if (signal !== undefined && !isAbortSignal(signal)) {
    throw new BloomeryError("INVALID_ARGUMENT", "signal must be an AbortSignal");
  }
  if (options.download !== undefined && !isModelReference(pathOrReference)) {
    throw new BloomeryError("INVALID_ARGUMENT", "download options apply to a user/repo[:quant] reference or a URL", {
      path: pathOrReference,
    });
  }
  const path = isModelReference(pathOrReference)
    ? await downloadModel(pathOrReference, { ...options.download, ...(signal ? { signal } : {}) })
    : pathOrReference;
  if (onProgress !== undefined && typeof onProgress !== "function") {
    throw new BloomeryError("INVALID_ARGUMENT", "onProgress must be a function");
  }
  const checkAborted = () => {
    if (signal?.aborted) throw new BloomeryError("ABORTED", "loading was aborted", { path });
  };
  checkAborted();
  for (const key of ["threads", "contextSize", "parallel"] as const) {
    const value = options[key];
    if (value !== undefined && (!Number.isInteger(value) || value < 1)) {
      throw new BloomeryError("INVALID_ARGUMENT", `${key} must be a positive integer`, { [key]: value });
    }
  }
  const nativeOptions: NativeLoadOptions = {};
  if (options.threads !== undefined) nativeOptions.threads = options.threads;
  if (options.contextSize !== undefined) nativeOptions.contextSize = options.contextSize;
  if (options.parallel !== undefined) nativeOptions.parallel = options.parallel;
  if (options.plan !== undefined) checkPlanShape(options.plan);
  const gpu = resolveGpu(options.gpu);
  if (options.hostRam !== undefined) parseBytes(options.hostRam, "hostRam");
  if (options.residency !== undefined) {
    if (options.residency !== "adaptive" && options.residency !== "static") {
      throw new BloomeryError("INVALID_ARGUMENT", 'residency must be "adaptive" or "static"', {
        residency: options.residency,
      });
    }
    nativeOptions.residency = options.residency;
  }
  for (const key of ["mmap", "mlock"] as const) {
    const value = options[key];
    if (value === undefined) continue;
    if (typeof value !== "boolean")
      throw new BloomeryError("INVALID_ARGUMENT", `${key} must be a boolean`, { [key]: value });
  }
  if (options.draftModel !== undefined) {
    checkPath(options.draftModel, "loadModel()'s draftModel");
    nativeOptions.draftModel = options.draftModel;
  }
  // Refused now rather than at the first run (MTP drafts where the model cannot run them by the engine, at load).
  if (resolveDraft(options.draft, options.draftModel !== undefined)?.source === "mtp") nativeOptions.mtpDrafts = true;
  const plan = gpu ? await gpuPlan(path, gpu, options) : await cpuPlan(path, options);
  if (gpu) nativeOptions.gpu = plan ? { ...gpu, experts: plan.layers.map((layer) => layer.gpu) } : gpu;
  if (plan && plan.arena.slots > 0) {
    const paged = plan.layers.reduce((sum, layer) => sum + (layer.disk ?? []).length, 0);
    if (options.mmap === false || options.mlock === true) {
      throw new BloomeryError(
        "INVALID_ARGUMENT",
        `${options.mmap === false ? "mmap: false reads" : "mlock: true locks"} the whole model file in RAM, and the ` +
          `plan pages ${paged} routed experts from disk because hostRam cannot hold them`,
      );
    }
    nativeOptions.disk = { experts: plan.layers.map((layer) => layer.disk ?? []), arenaBytes: plan.arena.bytes };
  }
  nativeOptions.cacheRam = resolveCacheRam(options.cacheRam);
  for (const key of ["mmap", "mlock"] as const) {
    if (options[key] !== undefined) nativeOptions[key] = options[key];
  }
  const steps: LoadStep[] = [];
  if (options.mmap === false) steps.push("read");
  if (gpu) steps.push("upload");
  if (options.mmap !== false) steps.push("map");
  const progress = new LoadProgressReporter(onProgress, steps);
  progress.metadata();
  if (progress.error) throw progress.error;
  const file = await readGgufInfo(path);
  checkAborted();
  const facts: FileFacts = {
    quantMix: file.summary.bytesByType,
    bytes: file.summary.tensorBytes,
    warnings: Object.freeze(file.warnings.map(({ code, message }) => ({ code, message }))),
  };
  if (options.chatTemplate !== undefined && typeof options.chatTemplate !== "string") {
    throw new BloomeryError("INVALID_ARGUMENT", "chatTemplate must be a string", {
      chatTemplate: options.chatTemplate,
    });
  }
  const template = options.chatTemplate ?? file.metadata["tokenizer.chat_template"];
  if (typeof template === "string") facts.chatTemplate = template;
  else facts.builtinChatTemplate = "chatml";
  const rankTemplate = file.metadata["tokenizer.chat_template.rerank"];
  if (typeof rankTemplate === "string") facts.rankTemplate = rankTemplate;
  const loading = callNativeAsync((a) => a.loadModel(path, nativeOptions, onProgress && progress.weights));
  const handle = await untilAborted(loading, signal).catch((error: unknown) => {
    progress.close();
    throw error;
  });
  if (handle !== ABORTED && onProgress) await progress.delivered;
  if (handle !== ABORTED && progress.error) {
    callNative((a) => a.disposeModel(handle));
    throw progress.error;
  }
  if (handle === ABORTED) {
    progress.close();
    // The native load cannot be interrupted: free what it makes once it is done.
    loading.then((late) => callNative((a) => a.disposeModel(late))).catch(() => {});
    throw new BloomeryError("ABORTED", "loading was aborted", { path });
  }
  // The load's last reports reach onProgress after the native load is done (they queue behind it
  // on the event loop); one that aborts still comes before loadModel resolves, so it refuses.
  if (signal?.aborted) {
    progress.close();
    callNative((a) => a.disposeModel(handle));
    throw new BloomeryError("ABORTED", "loading was aborted", { path });
  }
  let model: Model;
  try {
    model = new Model(handle, openTokenizer(path), facts, plan, {
      option: options.draft,
      hasDraftModel: options.draftModel !== undefined,
    });
  } catch (error) {
    callNative((a) => a.disposeModel(handle));
    throw error;
  }
  progress.ready();
  return model;
}
