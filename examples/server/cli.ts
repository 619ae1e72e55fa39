// bloomery-serve: a llama-server-compatible HTTP server on bloomery's public API.
//   bloomery-serve [-m model.gguf] [--host H] [--port P] [-c N] [-np N] [--api-key K] ... (--help lists all)
// It listens at once (GET /health answers 503 until the model is loaded), then serves.
import { totalmem } from "node:os";
import { BloomeryError, loadModel, readGgufInfo } from "../../src/index.js";
import { defaultModelPath } from "../../tools/default-model.js";
import { createApp } from "./app.js";
import { fetchHubModel, HubError, hubLocation } from "./hf.js";
import { parseServeOptions, usage, UsageError } from "./options.js";
import { placement } from "./placement.js";
import { Slots } from "./slots.js";

async function main(): Promise<void> {
  const options = parseServeOptions(process.argv.slice(2), process.env);
  if (options.help) {
    process.stdout.write(usage());
    return;
  }
  const modelPath = options.hfRepo
    ? await fetchHubModel({
        repo: options.hfRepo,
        ...(options.hfFile !== undefined ? { file: options.hfFile } : {}),
        ...(options.hfToken !== undefined ? { token: options.hfToken } : {}),
        ...hubLocation(process.env),
        log: (line) => console.error(`bloomery-serve: ${line}`),
      })
    : (options.model ?? defaultModelPath());
  // Flags are checked against the file before listening, so a bad one fails at once.
  const where = await placement(modelPath, options, (await readGgufInfo(modelPath)).summary.layers);
  const { app, context } = createApp(
    {
      modelPath,
      alias: options.alias,
      apiKeys: options.apiKeys,
      metrics: options.metrics,
      slotsEndpoint: options.slots,
      ...(options.slotSavePath !== undefined ? { slotSavePath: options.slotSavePath } : {}),
      temperature: options.temperature,
      reasoningFormat: options.reasoningFormat,
      ...(options.chatTemplateKwargs ? { chatTemplateKwargs: options.chatTemplateKwargs } : {}),
    },
    { timeoutSeconds: options.timeoutSeconds },
  );
  const address = await app.listen({ host: options.host, port: options.port });
  console.error(`bloomery-serve: listening on ${address}, loading ${modelPath} ${where.description}`);
  const model = await loadModel(modelPath, {
    gpu: where.gpu,
    ...(where.hostRam !== undefined ? { hostRam: where.hostRam } : {}),
    // Every slot decodes in the same pass: -np slots, -np sequences per pass.
    parallel: options.parallel,
    mlock: options.mlock,
    mmap: !options.noMmap,
    ...(where.plan ? { plan: where.plan } : {}),
    ...(options.cacheRamMiB !== undefined
      ? { cacheRam: options.cacheRamMiB < 0 ? totalmem() : options.cacheRamMiB * 1024 ** 2 }
      : {}),
    ...(options.threads !== undefined ? { threads: options.threads } : {}),
    ...(options.ctxSize !== undefined ? { contextSize: options.ctxSize } : {}),
    ...(options.chatTemplate !== undefined ? { chatTemplate: options.chatTemplate } : {}),
  });
  const slots = new Slots(model, options.parallel);
  context.serve(slots);
  console.error(`bloomery-serve: model loaded, ${options.parallel} slot(s) of ${model.info.contextSize} tokens`);
  for (const question of options.ask) {
    process.stdout.write(`> ${question}\n${await askOverHttp(address, question, options.apiKeys[0])}\n\n`);
  }
  if (options.ask.length > 0) console.error(`bloomery-serve: serving on ${address} (Ctrl-C stops it)`);

  const shutdown = () => {
    void app.close().finally(() => {
      model.dispose();
      process.exit(0);
    });
  };
  process.once("SIGINT", shutdown);
  process.once("SIGTERM", shutdown);
}

/** One greedy chat turn through the server's own OpenAI endpoint, as any client would send it. */
async function askOverHttp(address: string, question: string, apiKey: string | undefined): Promise<string> {
  const response = await fetch(`${address}/v1/chat/completions`, {
    method: "POST",
    headers: { "content-type": "application/json", ...(apiKey ? { authorization: `Bearer ${apiKey}` } : {}) },
    body: JSON.stringify({ messages: [{ role: "user", content: question }], temperature: 0, max_tokens: 96 }),
  });
  const body = (await response.json()) as { choices?: { message: { content: string } }[]; error?: { message: string } };
  if (!response.ok || !body.choices)
    throw new Error(`--ask ${JSON.stringify(question)}: ${body.error?.message ?? response.status}`);
  return body.choices[0]!.message.content.trim();
}

main().catch((error: unknown) => {
  if (error instanceof UsageError) console.error(`bloomery-serve: ${error.message}\n\n${usage()}`);
  else if (error instanceof HubError || error instanceof BloomeryError)
    console.error(`bloomery-serve: ${error.code}: ${error.message}`);
  else console.error(error);
  process.exit(1);
});
