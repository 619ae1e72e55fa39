// What every route shares: the server's settings and, once the model is loaded, its slots.
import { basename } from "node:path";
import type { DraftSettings, Model, Pooling } from "../../src/index.js";
import { HttpError } from "./errors.js";
import type { Slots } from "./slots.js";

export interface ServerConfig {
  /** The model file, as given on the command line. */
  modelPath: string;
  /** -a/--alias: the model's name in responses (default: the file's path): the first of `aliases` in sorted order. */
  alias?: string;
  /** -a/--alias: every name of the model, listed by /v1/models. */
  aliases?: string[];
  /** --tags: labels /v1/models lists with the model. */
  tags?: string[];
  /** -s/--seed: the seed of requests that set none (undefined: a fresh one each request). */
  seed?: number;
  /** -n/--n-predict: the most tokens a request that sets none generates (undefined: until the context is full). */
  nPredict?: number;
  /** -b/--batch-size: prompt tokens between two progress reports of return_progress (default 2048). */
  batchSize?: number;
  /** false with --no-jinja: requests with tools are refused, as llama-server refuses them. */
  jinja?: boolean;
  /** --reasoning: the templates' enable_thinking, false with "off", true with "on" or "auto" (as llama-server's). */
  reasoning?: "on" | "off" | "auto";
  /** -v/--verbose: every response carries the `__verbose` object. */
  verbose?: boolean;
  /** --context-shift: a full slot shifts its context (keeping each request's n_keep) and generates on. */
  contextShift?: boolean;
  /** --cors-origins: the origins browsers may call from ("localhost": any local address); undefined: any. */
  corsOrigins?: string[];
  /** --api-key: requests must carry one of them (none: no key needed). */
  apiKeys: string[];
  /** --metrics: serve GET /metrics. */
  metrics: boolean;
  /** GET /slots (on unless --no-slots). */
  slotsEndpoint?: boolean;
  /** --slot-save-path: the folder POST /slots/:id?action=save|restore reads and writes. */
  slotSavePath?: string;
  /** --temp: the temperature of requests that set none (llama-server's default 0.8). */
  temperature: number;
  /** --reasoning-format: where reasoning goes in requests that do not say (default "auto"). */
  reasoningFormat?: ReasoningFormat;
  /** --chat-template-kwargs: template variables of every chat, under the request's own. */
  chatTemplateKwargs?: Record<string, unknown>;
  /** --embedding (or --reranking): serve /embedding, /embeddings and /v1/embeddings. */
  embedding?: boolean;
  /** --pooling: the pooling of embeddings (undefined: rank with --reranking, else the file's). */
  pooling?: Pooling;
  /** -md, --spec-type, --draft-*: the drafts every request runs with (undefined: none), as loadModel's `draft`. */
  draft?: DraftSettings;
  /** --reranking: serve /rerank and its aliases. */
  reranking?: boolean;
}

/**
 * llama-server's reasoning formats: "none" leaves think blocks in the content; "auto" and
 * "deepseek" move them to `reasoning_content` (Anthropic: thinking blocks).
 */
export const REASONING_FORMATS = ["none", "auto", "deepseek"] as const;
export type ReasoningFormat = (typeof REASONING_FORMATS)[number];

export class ServerContext {
  #slots: Slots | undefined;
  /** Set when a shutdown begins: new requests are answered 503. */
  stopping = false;

  constructor(readonly config: ServerConfig) {}

  /** Called once the model is loaded: requests are served from then on. */
  serve(slots: Slots): void {
    this.#slots = slots;
  }

  get loaded(): boolean {
    return this.#slots !== undefined;
  }

  /** The slots, or a 503 while the model loads. */
  get slots(): Slots {
    if (!this.#slots) throw new HttpError(503, "Loading model");
    return this.#slots;
  }

  get model(): Model {
    return this.slots.model;
  }

  /** The model's name in responses. */
  get modelId(): string {
    return this.config.alias ?? this.config.modelPath;
  }

  /** The template variables of a request: the server's, then the request's. */
  templateKwargs(request: Record<string, unknown> | undefined): Record<string, unknown> | undefined {
    const server = this.config.chatTemplateKwargs;
    return server || request ? { ...server, ...request } : undefined;
  }

  get modelName(): string {
    return this.config.alias ?? basename(this.config.modelPath);
  }
}
