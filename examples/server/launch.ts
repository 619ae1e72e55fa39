// What bloomery-serve's command line asks for, as the values the server hands on: where the model comes from,
// loadModel's options, the app's settings, where to listen, the slots and the questions of --ask. cli.ts passes
// them on as they are, so a test of these values is a test of what runs: each flag reaches what it controls.
import { totalmem } from "node:os";
import { readGgufInfo, type DownloadModelOptions, type DraftSettings, type LoadModelOptions } from "../../src/index.js";
import type { AppOptions } from "./app.js";
import type { ServerConfig } from "./context.js";
import { UsageError, type ServeOptions } from "./options.js";
import { placement } from "./placement.js";

export interface Launch {
  /** loadModel's options (cli.ts adds only the signal that a shutdown during the load aborts). */
  load: LoadModelOptions;
  config: ServerConfig;
  app: AppOptions;
  listen: { host: string; port: number };
  /** Slots: requests served at once (loadModel's parallel too). */
  slots: number;
  /** -sps: how much of a request's prompt a free slot's context must share for the request to take it (Slots). */
  slotPromptSimilarity: number;
  ask: string[];
  /** Where the model runs, for the log. */
  where: string;
  /** What the server serves otherwise than the flags asked, for the log (llama-server warns and serves too). */
  warnings: string[];
}

/**
 * The model to serve: a file, or a Hugging Face repo to download it from first (-hf), through the SDK's
 * downloadModel (which reads HF_ENDPOINT and LLAMA_CACHE, as llama-server does).
 */
export function modelSource(
  options: ServeOptions,
  defaultModel: () => string,
): { path: string } | { hub: { reference: string; options: DownloadModelOptions } } {
  if (options.hfRepo === undefined) return { path: options.model ?? defaultModel() };
  return {
    hub: {
      reference: options.hfRepo,
      options: {
        ...(options.hfFile !== undefined ? { file: options.hfFile } : {}),
        ...(options.hfToken !== undefined ? { token: options.hfToken } : {}),
        ...(options.offline ? { offline: true } : {}),
      },
    },
  };
}

/**
 * Everything the server is started with, from the options and the model file's header (its layers and trained
 * context). Refuses (UsageError) flags the model or the machine cannot obey; `gpus` as {@link placement} takes it.
 */
export async function launchSettings(options: ServeOptions, modelPath: string, gpus?: number): Promise<Launch> {
  const info = await readGgufInfo(modelPath);
  const { layers, contextLength } = info.summary;
  if (options.reranking && !info.tensors.some((t) => t.name === "cls.output.weight")) {
    throw new UsageError("--reranking: the model has no reranker head (cls.output): it cannot rank");
  }
  if (options.pooling !== undefined && !options.embedding && !options.reranking) {
    throw new UsageError("--pooling: pools embeddings, which need --embedding");
  }
  const warnings: string[] = [];
  const contextSize = slotContext(options, contextLength, warnings);
  const where = await placement(
    modelPath,
    options,
    { layers, ...(contextSize !== undefined ? { contextSize } : {}) },
    gpus,
  );
  const draft = drafts(options);
  const load: LoadModelOptions = {
    gpu: where.gpu,
    ...(where.hostRam !== undefined ? { hostRam: where.hostRam } : {}),
    ...(where.residency !== undefined ? { residency: where.residency } : {}),
    ...(where.plan ? { plan: where.plan } : {}),
    // Every slot decodes in the same pass: -np slots, -np sequences per pass.
    parallel: options.parallel,
    mlock: options.mlock,
    mmap: !options.noMmap,
    ...(options.cacheRamMiB !== undefined
      ? { cacheRam: options.cacheRamMiB < 0 ? totalmem() : options.cacheRamMiB * 1024 ** 2 }
      : {}),
    ...(options.threads !== undefined ? { threads: options.threads } : {}),
    ...(contextSize !== undefined ? { contextSize } : {}),
    ...(options.chatTemplate !== undefined ? { chatTemplate: options.chatTemplate } : {}),
    ...draft,
  };
  const config: ServerConfig = {
    modelPath,
    ...(draft.draft ? { draft: draft.draft } : {}),
    // llama-server keeps the names in a sorted set and answers with the first.
    ...(options.aliases.length > 0 ? { alias: [...options.aliases].sort()[0]!, aliases: options.aliases } : {}),
    tags: options.tags,
    ...(options.seed !== undefined ? { seed: options.seed } : {}),
    ...(options.nPredict !== undefined ? { nPredict: options.nPredict } : {}),
    batchSize: options.batchSize,
    jinja: options.jinja,
    reasoning: options.reasoning,
    verbose: options.verbose,
    contextShift: options.contextShift,
    ...(options.corsOrigins ? { corsOrigins: options.corsOrigins } : {}),
    apiKeys: options.apiKeys,
    metrics: options.metrics,
    slotsEndpoint: options.slots,
    ...(options.slotSavePath !== undefined ? { slotSavePath: options.slotSavePath } : {}),
    temperature: options.temperature,
    reasoningFormat: options.reasoningFormat,
    ...(options.chatTemplateKwargs ? { chatTemplateKwargs: options.chatTemplateKwargs } : {}),
    embedding: options.embedding || options.reranking,
    ...(options.pooling !== undefined ? { pooling: options.pooling } : {}),
    reranking: options.reranking,
  };
  return {
    load,
    config,
    app: { timeoutSeconds: options.timeoutSeconds, webui: options.webui },
    listen: { host: options.host, port: options.port },
    slots: options.parallel,
    slotPromptSimilarity: options.slotPromptSimilarity,
    ask: options.ask,
    where: where.description,
    warnings,
  };
}

/**
 * Each slot's context from -c, which is llama-server's total over the -np slots (each gets -c/-np; with --kv-unified
 * each may use all -c). -c 0 is the model's trained context; without -c each slot gets the model's, at most 4096
 * (loadModel's default). A slot is never given more than the trained context: the engine refuses it, so the server
 * serves the trained context and says so, where llama-server warns and serves the larger one.
 */
function slotContext(options: ServeOptions, trained: number, warnings: string[]): number | undefined {
  if (options.ctxSize === undefined) return undefined;
  const total = options.ctxSize === 0 ? trained : options.ctxSize;
  const perSlot = options.kvUnified ? total : Math.floor(total / options.parallel);
  if (perSlot < 1) throw new UsageError(`-c ${total} gives ${options.parallel} slots (-np) less than a token each`);
  if (perSlot <= trained) return perSlot;
  warnings.push(
    `-c ${options.ctxSize} gives each slot ${perSlot} tokens, more than the model's trained context of ${trained}: ` +
      `each slot gets ${trained}`,
  );
  return trained;
}

/** loadModel's draft options from -md, --spec-type, --draft-max, --draft-min and --draft-p-min. */
function drafts(options: ServeOptions): { draft: DraftSettings | false; draftModel?: string } {
  const type = options.specType ?? (options.draftModel !== undefined ? "draft-simple" : "none");
  const draftModel = options.draftModel !== undefined ? { draftModel: options.draftModel } : {};
  if (type === "none") return { draft: false, ...draftModel };
  return {
    draft: {
      source: type === "draft-simple" ? "model" : type === "draft-mtp" ? "mtp" : "ngram",
      ...(options.draftMax !== undefined ? { max: options.draftMax } : {}),
      ...(options.draftMin !== undefined ? { min: options.draftMin } : {}),
      ...(options.draftPMin !== undefined ? { pMin: options.draftPMin } : {}),
    },
    ...draftModel,
  };
}
