// A chat in the terminal on bloomery's public API: one conversation, streamed as the model writes
// it, with reasoning shown dimmed and tool calls shown as they are made.
//
//   npm run build && node examples/chat.mjs [model.gguf]
//
// Without a path it talks to the small model bundled with the package. Lines are read from the
// terminal (or a pipe); /reset starts a new conversation, /exit (or Ctrl-D) leaves, and Ctrl-C
// stops an answer midway (or leaves between answers).
import { readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";
import { BloomeryError, loadModel } from "bloomery";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
const bundled = JSON.parse(readFileSync(join(root, "package.json"), "utf8")).bloomery.defaultModel;
const path = process.argv[2] ?? join(root, bundled);

const DIM = "\x1b[2m";
const PLAIN = "\x1b[0m";

async function main() {
  const model = await loadModel(path, {
    onProgress: ({ stage }) => process.stderr.write(`loading ${path}: ${stage}\n`),
  });
  model.on("warning", (warning) => console.error(`warning: ${warning.message}`));
  const session = model.createSession();
  const lines = createInterface({ input: process.stdin, output: process.stdout, terminal: process.stdin.isTTY });
  let messages = [];
  let answering;
  lines.on("SIGINT", () => (answering ? answering.abort() : lines.close()));
  try {
    lines.setPrompt("> ");
    lines.prompt();
    for await (const line of lines) {
      const text = line.trim();
      if (text === "/exit") break;
      if (text === "/reset") messages = [];
      else if (text) {
        if (!process.stdin.isTTY) process.stdout.write(`${text}\n`);
        messages.push({ role: "user", content: text });
        answering = new globalThis.AbortController();
        const run = session.chat(messages, { maxTokens: 256, signal: answering.signal });
        for await (const chunk of run) {
          if (chunk.reasoning) process.stdout.write(DIM + chunk.reasoning + PLAIN);
          process.stdout.write(chunk.text);
          for (const call of chunk.toolCalls ?? []) {
            process.stdout.write(`\n[call ${call.name}(${JSON.stringify(call.arguments)})]`);
          }
        }
        const { message, stopReason } = await run.result;
        process.stdout.write(stopReason === "abort" ? " [stopped]\n" : "\n");
        answering = undefined;
        messages.push(message);
      }
      lines.prompt();
    }
  } finally {
    lines.close();
    model.dispose();
  }
}

main().catch((error) => {
  console.error(error instanceof BloomeryError ? `${error.code}: ${error.message}` : error);
  process.exit(1);
});
