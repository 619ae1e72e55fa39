// bloomery-chat: talk to a model from the terminal, on the CPU.
//   bloomery-chat [--model path.gguf] [--max-tokens N] [--threads N] [question ...]
// Each question given on the command line is answered in turn; without one, it reads
// questions from standard input, one per line, as one conversation.
import { createInterface } from "node:readline";
import { parseArgs } from "node:util";
import { BloomeryError, loadModel, type ChatMessage, type Model } from "../../src/index.js";
import { defaultModelPath } from "../default-model.js";

async function answer(model: Model, messages: ChatMessage[], maxTokens: number): Promise<string> {
  const prompt = model.applyChatTemplate(messages);
  const session = model.createSession();
  try {
    const run = session.generate(model.tokenize(prompt, { special: true }), { maxTokens });
    for await (const chunk of run) process.stdout.write(chunk.text);
    process.stdout.write("\n");
    return (await run.result).text;
  } finally {
    session.dispose();
  }
}

async function main(): Promise<void> {
  const { values, positionals } = parseArgs({
    allowPositionals: true,
    options: {
      model: { type: "string" },
      "max-tokens": { type: "string", default: "128" },
      threads: { type: "string" },
      help: { type: "boolean" },
    },
  });
  if (values.help) {
    console.log("usage: bloomery-chat [--model path.gguf] [--max-tokens N] [--threads N] [question ...]");
    return;
  }
  const maxTokens = Number(values["max-tokens"]);
  const model = await loadModel(values.model ?? defaultModelPath(), {
    gpu: false,
    ...(values.threads ? { threads: Number(values.threads) } : {}),
  });
  try {
    if (positionals.length > 0) {
      for (const question of positionals) {
        console.log(`> ${question}`);
        await answer(model, [{ role: "user", content: question }], maxTokens);
      }
      return;
    }
    const messages: ChatMessage[] = [];
    const lines = createInterface({ input: process.stdin, terminal: false });
    for await (const line of lines) {
      if (!line.trim()) continue;
      messages.push({ role: "user", content: line });
      messages.push({ role: "assistant", content: await answer(model, messages, maxTokens) });
    }
  } finally {
    model.dispose();
  }
}

main().catch((error: unknown) => {
  if (error instanceof BloomeryError) console.error(`bloomery-chat: ${error.code}: ${error.message}`);
  else console.error(error);
  process.exit(1);
});
