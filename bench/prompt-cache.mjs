// Prompt-state cache benchmark (run on the GPU machine; runs anywhere): the first token of a
// 4,000-token prompt evaluated whole, against the first token of a prompt that shares 3,900 of its
// tokens with that one's state in the prompt-state cache (a new session: the state is restored
// from the cache, then 100 tokens evaluated), and of a third prompt with the same 3,900 tokens in
// the session that evaluated the first (no restore: what its 100 tokens cost alone). Times are from
// generate() to its first token, as a user sees them; each round uses prompts of its own. A model
// with recurrent layers reuses the nearest checkpoint inside the shared tokens (512·2^i before the
// first prompt's end: 3,488 of 3,900), and evaluates the rest.
// With --server, the same through bloomery-serve (one slot, `-c` the prompt and 64 more): the first
// token of a streamed /completion of the whole prompt, against the next request's sharing 3,900 of its
// tokens (the slot's own state, or the prompt-state cache's), as a client sees them; the server's
// timings say what it reused (cache_n) and evaluated (prompt_n).
// With --extend, the later prompts share the whole first prompt and add 100 tokens (a conversation
// that goes on) instead of replacing its last 100: a model with recurrent layers then restores the
// checkpoint a generation's prompt keeps 4 tokens before its end.
// Writes JSON to $OUT (or the working directory).
//   node bench/prompt-cache.mjs /root/q.gguf [--rounds 4] [--placement whole|cpu] [--prompt 4000] [--server] [--extend]
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { getSystemInfo, loadModel } from "../dist/index.js";
import { secondsSince, takeOption } from "./measure.mjs";
import { completionChunks, startServer } from "./server-client.mjs";

const args = process.argv.slice(2);
const ROUNDS = Number(takeOption(args, "--rounds", "4"));
const PLACEMENT = takeOption(args, "--placement", "whole");
const PROMPT = Number(takeOption(args, "--prompt", "4000"));
const flag = (name) => args.includes(name) && args.splice(args.indexOf(name), 1).length > 0;
const SERVER = flag("--server");
const EXTEND = flag("--extend");
const path = args[0] ?? "/root/q.gguf";
const NEW = 100; // the later prompts' tokens after the shared ones
const SHARED = EXTEND ? PROMPT : PROMPT - NEW;
const PORT = 8178;
const CONTEXT = SHARED + NEW + 64;
const MODE = `--prompt ${PROMPT}${SERVER ? " --server" : ""}${EXTEND ? " --extend" : ""}`;

// Round r's tokens: spread over the vocabulary as the synthetic models' tokens are, and apart from
// every other round's (no prefix of one round's prompt is another's).
let vocab = 0;
const tokens = (length, salt) => Array.from({ length }, (_, i) => (i * 7919 + 11 + salt * 104729) % vocab);

if (SERVER) await serverRounds();
else await sdkRounds();

async function sdkRounds() {
  const model = await loadModel(path, {
    gpu: PLACEMENT === "whole" ? "auto" : false,
    contextSize: CONTEXT,
    cacheRam: "8GiB",
  });
  vocab = model.info.vocabSize;

  /** Milliseconds from generate() to its first token, and the run's timings. */
  async function firstToken(session, prompt) {
    const start = process.hrtime.bigint();
    const run = session.generate(prompt, { maxTokens: 1 });
    const iterator = run[Symbol.asyncIterator]();
    await iterator.next();
    const ms = secondsSince(start) * 1e3;
    while (!(await iterator.next()).done);
    const { timings } = await run.result;
    return { ms, promptMs: timings.promptMs, cached: timings.cachedPromptTokens, hit: timings.promptCacheHit };
  }

  const warm = model.createSession();
  await firstToken(warm, tokens(PROMPT, 1000000)); // kernels loaded, the pass's shapes seen once
  await firstToken(model.createSession(), [...tokens(SHARED, 1000000), ...tokens(NEW, 1000001)]);

  const rounds = [];
  for (let r = 0; r < ROUNDS; ++r) {
    const first = tokens(PROMPT, 3 * r);
    const second = [...first.slice(0, SHARED), ...tokens(NEW, 3 * r + 1)];
    const third = [...first.slice(0, SHARED), ...tokens(NEW, 3 * r + 2)];
    const owner = model.createSession();
    const full = await firstToken(owner, first);
    const restored = await firstToken(model.createSession(), second);
    const kept = await firstToken(owner, third);
    if (restored.cached === 0 || !restored.hit || kept.cached !== restored.cached || kept.hit) {
      throw new Error(`round ${r}: the shared prefix was not reused (${JSON.stringify({ restored, kept })})`);
    }
    rounds.push({ full, restored, kept });
    console.log(
      `round ${r}: full ${full.ms.toFixed(1)} ms, restored from the cache ${restored.ms.toFixed(1)} ms ` +
        `(${(full.ms / restored.ms).toFixed(2)}x, ${restored.cached} tokens reused), kept in the session ` +
        `${kept.ms.toFixed(1)} ms`,
    );
  }
  model.dispose();

  const fullMs = median(rounds.map((r) => r.full.ms));
  const restoredMs = median(rounds.map((r) => r.restored.ms));
  const keptMs = median(rounds.map((r) => r.kept.ms));
  const { result, out } = save("", rounds, {
    model: { path, architecture: model.info.architecture, placement: PLACEMENT },
    figures: {
      fullFirstTokenMs: fullMs,
      restoredFirstTokenMs: restoredMs,
      keptFirstTokenMs: keptMs,
      fullOverRestored: fullMs / restoredMs,
      restoreMs: restoredMs - keptMs,
    },
  });
  console.log(
    `first token (medians of ${ROUNDS}): full ${fullMs.toFixed(1)} ms, restored ${restoredMs.toFixed(1)} ms ` +
      `(${result.figures.fullOverRestored.toFixed(2)}x sooner), kept ${keptMs.toFixed(1)} ms; wrote ${out}`,
  );
}

function median(values) {
  return values.sort((a, b) => a - b)[Math.floor(values.length / 2)];
}

/** Writes the run's JSON (the command, machine, settings and `rounds` beside `fields`) to $OUT; returns it and its path. */
function save(kind, rounds, fields) {
  const result = {
    command: `node bench/prompt-cache.mjs ${path} --rounds ${ROUNDS} --placement ${PLACEMENT} ${MODE}`,
    date: new Date().toISOString(),
    machine: getSystemInfo(),
    settings: { prompt: PROMPT, shared: SHARED, added: NEW, reused: rounds[0].restored.cached, rounds: ROUNDS },
    ...fields,
    rounds,
  };
  const out = join(process.env.OUT ?? ".", `prompt-cache-${kind}${PLACEMENT}${EXTEND ? "-extend" : ""}.json`);
  writeFileSync(out, JSON.stringify(result, null, 2));
  return { result, out };
}

async function serverRounds() {
  const flags = ["-ngl", PLACEMENT === "whole" ? "99" : "0", "-np", "1", "-c", String(CONTEXT), "--cache-ram", "8192"];
  const log = [];
  const server = await startServer(path, PORT, flags, log);
  const rounds = [];
  let name;
  try {
    const models = await (await fetch(`http://127.0.0.1:${PORT}/v1/models`)).json();
    vocab = models.data[0].meta.n_vocab;
    const props = await (await fetch(`http://127.0.0.1:${PORT}/props`)).json();
    name = props.model_alias ?? models.data[0].id;
    /**
     * Milliseconds from the request to its first token's chunk, and what the server says the prompt took (prompt_ms),
     * reused and evaluated.
     */
    const firstToken = async (prompt) => {
      const out = {};
      const start = process.hrtime.bigint();
      let ms;
      for await (const chunk of completionChunks(
        PORT,
        { prompt, n_predict: 1, temperature: 0, cache_prompt: true },
        out,
      )) {
        ms ??= chunk.tokens.length > 0 ? secondsSince(start) * 1e3 : undefined;
      }
      return { ms, promptMs: out.timings.prompt_ms, cached: out.timings.cache_n, evaluated: out.timings.prompt_n };
    };
    await firstToken(tokens(PROMPT, 1000000)); // kernels loaded, the pass's shapes seen once
    await firstToken([...tokens(SHARED, 1000000), ...tokens(NEW, 1000001)]);
    for (let r = 0; r < ROUNDS; ++r) {
      const first = tokens(PROMPT, 3 * r);
      const second = [...first.slice(0, SHARED), ...tokens(NEW, 3 * r + 1)];
      const full = await firstToken(first);
      const restored = await firstToken(second);
      if (restored.cached === 0)
        throw new Error(`round ${r}: the shared prefix was not reused (${JSON.stringify(restored)})`);
      rounds.push({ full, restored });
      console.log(
        `round ${r}: full ${full.ms.toFixed(1)} ms (${full.evaluated} evaluated), sharing ${SHARED} tokens ` +
          `${restored.ms.toFixed(1)} ms (${restored.cached} reused, ${restored.evaluated} evaluated): ` +
          `${(full.ms / restored.ms).toFixed(2)}x sooner`,
      );
    }
  } finally {
    server.kill("SIGTERM");
  }
  const fullMs = median(rounds.map((r) => r.full.ms));
  const restoredMs = median(rounds.map((r) => r.restored.ms));
  const { result, out } = save("server-", rounds, {
    model: { path, name, placement: PLACEMENT },
    server: { flags, log: log.filter((l) => /listening|loaded/.test(l)) },
    figures: {
      fullFirstTokenMs: fullMs,
      sharedFirstTokenMs: restoredMs,
      fullOverShared: fullMs / restoredMs,
      // What the engine's prompt took of the shared request's first token (the rest: HTTP, the server, the client).
      sharedPromptMs: median(rounds.map((r) => r.restored.promptMs)),
    },
  });
  console.log(
    `through the server, first token (medians of ${ROUNDS}): full ${fullMs.toFixed(1)} ms, sharing ${SHARED} ` +
      `tokens ${restoredMs.toFixed(1)} ms (${result.figures.fullOverShared.toFixed(2)}x sooner); wrote ${out}`,
  );
}
