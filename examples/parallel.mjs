// Parallel sessions: several conversations generating at once on one model. The model's
// scheduler thread runs the next token of every running session in one forward pass, so the
// weights are read once per step for all of them; loadModel's `parallel` says how many run
// together, and the others wait their turn in the order they asked.
//
//   npm run build && node examples/parallel.mjs [model.gguf]
//
// Without an argument it runs the bundled default model.
import { readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { performance } from "node:perf_hooks";
import { fileURLToPath } from "node:url";
import { loadModel } from "bloomery";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
const defaultModel = JSON.parse(readFileSync(join(root, "package.json"), "utf8")).bloomery.defaultModel;
const path = process.argv[2] ?? join(root, defaultModel);
const questions = ["What is a river?", "What does happy mean?", "Tell me a fortune.", "What is a mountain?"];

const model = await loadModel(path, { gpu: false, parallel: 3 });
try {
  const answers = questions.map(() => "");
  const started = performance.now();
  await Promise.all(
    questions.map(async (question, i) => {
      const session = model.createSession();
      const prompt = model.tokenize(model.applyChatTemplate([{ role: "user", content: question }]), {
        special: true,
      });
      // Tokens arrive as the shared passes produce them; the fourth question waits for a place.
      for await (const chunk of session.generate(prompt, { maxTokens: 48 })) answers[i] += chunk.text;
      console.log(`[${((performance.now() - started) / 1000).toFixed(2)} s] answered ${i + 1}`);
      session.dispose();
    }),
  );
  questions.forEach((question, i) => console.log(`\n> ${question}\n${answers[i].trim()}`));

  const stats = model.stats();
  console.log(
    `\n${stats.passes} passes, ${stats.meanSequencesPerPass.toFixed(2)} sessions and ` +
      `${stats.meanRowsPerPass.toFixed(2)} tokens per pass; decode ${stats.decodeTokensPerSecond.toFixed(0)} tokens/s ` +
      `for all streams together`,
  );
} finally {
  model.dispose();
}
