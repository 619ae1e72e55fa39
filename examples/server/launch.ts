// What bloomery-serve's command line asks for, as the values the server hands on: where the model comes from,
// loadModel's options, the app's settings, where to listen, the slots and the questions of --ask. cli.ts passes
// them on as they are, so a test of these values is a test of what runs: each flag reaches what it controls.
import { totalmem } from "node:os";
import { readGgufInfo, type LoadModelOptions } from "../../src/index.js";
import type { AppOptions } from "./app.js";
import type { ServerConfig } from "./context.js";
import { hubLocation, type HubRequest } from "./hf.js";
import type { ServeOptions } from "./options.js";
import { placement } from "./placement.js";

export interface Launch {
  /** loadModel's options (cli.ts adds only the signal that a shutdown during the load aborts). */
  load: LoadModelOptions;
  config: ServerConfig;
  app: AppOptions;
  listen: { host: string; port: number };
  /** Slots: requests served at once (loadModel's parallel too). */
  slots: number;
  ask: string[];
  /** Where the model runs, for the log. */
  where: string;
}

/** The model to serve: a file, or a Hugging Face repo to download it from first (-hf). */
export function modelSource(
  options: ServeOptions,
  env: NodeJS.ProcessEnv,
  defaultModel: () => string,
): { path: string } | { hub: Omit<HubRequest, "log"> } {
  if (options.hfRepo === undefined) return { path: options.model ?? defaultModel() };
  return {
    hub: {
      repo: options.hfRepo,
      ...(options.hfFile !== undefined ? { file: options.hfFile } : {}),
      ...(options.hfToken !== undefined ? { token: options.hfToken } : {}),
      ...hubLocation(env),
    },
  };
}

/**
 * Everything the server is started with, from the options and the model file's header (its layers and trained
 * context). Refuses (UsageError) flags the model or the machine cannot obey; `gpus` as {@link placement} takes it.
 */
export async function launchSettings(options: ServeOptions, modelPath: string, gpus?: number): Promise<Launch> {
  const { layers, contextLength } = (await readGgufInfo(modelPath)).summary;
  // -c 0 is llama-server's "the model's trained context".
  const contextSize = options.ctxSize === 0 ? contextLength : options.ctxSize;
  const where = await placement(
    modelPath,
    options,
    { layers, ...(contextSize !== undefined ? { contextSize } : {}) },
    gpus,
  );
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
  };
  const config: ServerConfig = {
    modelPath,
    ...(options.alias !== undefined ? { alias: options.alias } : {}),
    apiKeys: options.apiKeys,
    metrics: options.metrics,
    slotsEndpoint: options.slots,
    ...(options.slotSavePath !== undefined ? { slotSavePath: options.slotSavePath } : {}),
    temperature: options.temperature,
    reasoningFormat: options.reasoningFormat,
    ...(options.chatTemplateKwargs ? { chatTemplateKwargs: options.chatTemplateKwargs } : {}),
  };
  return {
    load,
    config,
    app: { timeoutSeconds: options.timeoutSeconds },
    listen: { host: options.host, port: options.port },
    slots: options.parallel,
    ask: options.ask,
    where: where.description,
  };
}
