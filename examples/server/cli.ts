// bloomery-serve: a llama-server-compatible HTTP server on bloomery's public API.
//   bloomery-serve [-m model.gguf] [--host H] [--port P] [-c N] [-np N] [--api-key K] ... (--help lists all)
// It listens at once (GET /health answers 503 until the model is loaded), then serves.
import { basename } from "node:path";
import { BloomeryError, downloadModel, loadModel, type DownloadModelOptions } from "../../src/index.js";
import { defaultModelPath } from "../../tools/default-model.js";
import { createApp } from "./app.js";
import { DRAIN_SECONDS } from "./drain.js";
import { launchSettings, modelSource } from "./launch.js";
import { parseServeOptions, usage, UsageError } from "./options.js";
import { megabytes, ProgressLine } from "./progress.js";
import { Slots } from "./slots.js";

const log = (line: string) => console.error(`bloomery-serve: ${line}`);

/** Aborted by the first SIGTERM or SIGINT once the server listens: from then on the drain decides the exit. */
const stop = new AbortController();

async function main(): Promise<void> {
  const options = parseServeOptions(process.argv.slice(2), process.env);
  if (options.help) {
    process.stdout.write(usage());
    return;
  }
  const source = modelSource(options, defaultModelPath);
  const modelPath = "path" in source ? source.path : await download(source.hub);
  // Flags are checked against the file before listening, so a bad one fails at once.
  const launch = await launchSettings(options, modelPath);
  for (const warning of launch.warnings) log(`warning: ${warning}`);
  const { app, context, shutdown } = createApp(launch.config, launch.app);
  const address = await app.listen(launch.listen);
  log(`listening on ${address}, loading ${modelPath} ${launch.where}`);

  // A first SIGTERM or SIGINT drains (drain.ts) and exits; a second exits at once, as llama-server's.
  const onSignal = (signal: NodeJS.Signals) => {
    if (stop.signal.aborted) {
      log(`${signal} again: exiting now`);
      process.exit(1);
    }
    stop.abort();
    log(`${signal}: shutting down, giving running generations ${DRAIN_SECONDS} s to end`);
    void shutdown(DRAIN_SECONDS * 1000).then((report) => {
      log(
        `stopped: ${report.running} generation(s) were running${report.stopped ? " (stopped at the deadline)" : ""}, ` +
          `${report.waiting} waiting request(s) refused`,
      );
      // A model still busy (a request that outlived the deadline) is left to the exit to free.
      if (report.drained && context.loaded) context.model.dispose();
      process.exit(0);
    });
  };
  process.on("SIGINT", onSignal);
  process.on("SIGTERM", onSignal);

  const loading = new ProgressLine(process.stderr, `bloomery-serve: loading ${basename(modelPath)}`);
  const model = await loadModel(modelPath, {
    ...launch.load,
    signal: stop.signal,
    onProgress: (p) =>
      loading.update(
        p.fraction,
        p.step ? `${p.step} ${megabytes(p.bytes ?? 0)} of ${megabytes(p.totalBytes ?? 0)}` : p.stage,
      ),
  }).finally(() => loading.end());
  context.serve(new Slots(model, launch.slots, launch.slotPromptSimilarity));
  log(`model loaded, ${launch.slots} slot(s) of ${model.info.contextSize} tokens`);
  for (const question of launch.ask) {
    process.stdout.write(`> ${question}\n${await askOverHttp(address, question, launch.config.apiKeys[0])}\n\n`);
  }
  if (launch.ask.length > 0) log(`serving on ${address} (Ctrl-C stops it)`);
}

/** -hf: the model's files from the hub (or the cache), each download with a progress line. */
async function download(hub: { reference: string; options: DownloadModelOptions }): Promise<string> {
  let line: { file: string; progress: ProgressLine } | undefined;
  try {
    return await downloadModel(hub.reference, {
      ...hub.options,
      onProgress: ({ file, bytes, totalBytes }) => {
        if (line?.file !== file) {
          line?.progress.end();
          log(
            `downloading ${hub.reference}: ${file} (${totalBytes} bytes${bytes > 0 ? `, resuming at ${bytes}` : ""})`,
          );
          line = { file, progress: new ProgressLine(process.stderr, `bloomery-serve: downloading ${basename(file)}`) };
        }
        line.progress.update(
          totalBytes > 0 ? bytes / totalBytes : 1,
          `${megabytes(bytes)} of ${megabytes(totalBytes)}`,
        );
      },
    });
  } finally {
    line?.progress.end();
  }
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
  // What fails once a shutdown began (the load it aborts, an --ask it refuses) is the drain's to end.
  if (stop.signal.aborted) return;
  if (error instanceof UsageError) console.error(`bloomery-serve: ${error.message}\n\n${usage()}`);
  else if (error instanceof BloomeryError) log(`${error.code}: ${error.message}`);
  else console.error(error);
  process.exit(1);
});
