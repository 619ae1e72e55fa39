// bloomery-serve: a llama-server-compatible HTTP server on bloomery's public API.
//   bloomery-serve [-m model.gguf] [--host H] [--port P] [-c N] [-np N] [--api-key K] ... (--help lists all)
// It listens at once (GET /health answers 503 until the model is loaded), then serves.
import { BloomeryError, loadModel } from "../../src/index.js";
import { defaultModelPath } from "../../tools/default-model.js";
import { createApp } from "./app.js";
import { fetchHubModel, HubError } from "./hf.js";
import { launchSettings, modelSource } from "./launch.js";
import { parseServeOptions, usage, UsageError } from "./options.js";
import { Slots } from "./slots.js";

const log = (line: string) => console.error(`bloomery-serve: ${line}`);

async function main(): Promise<void> {
  const options = parseServeOptions(process.argv.slice(2), process.env);
  if (options.help) {
    process.stdout.write(usage());
    return;
  }
  const source = modelSource(options, process.env, defaultModelPath);
  const modelPath = "path" in source ? source.path : await fetchHubModel({ ...source.hub, log });
  // Flags are checked against the file before listening, so a bad one fails at once.
  const launch = await launchSettings(options, modelPath);
  const { app, context } = createApp(launch.config, launch.app);
  const address = await app.listen(launch.listen);
  log(`listening on ${address}, loading ${modelPath} ${launch.where}`);

  const model = await loadModel(modelPath, launch.load);
  context.serve(new Slots(model, launch.slots));
  log(`model loaded, ${launch.slots} slot(s) of ${model.info.contextSize} tokens`);
  for (const question of launch.ask) {
    process.stdout.write(`> ${question}\n${await askOverHttp(address, question, launch.config.apiKeys[0])}\n\n`);
  }
  if (launch.ask.length > 0) log(`serving on ${address} (Ctrl-C stops it)`);

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
  else if (error instanceof HubError || error instanceof BloomeryError) log(`${error.code}: ${error.message}`);
  else console.error(error);
  process.exit(1);
});
