// Every bloomery-serve flag reaches what it controls (issue 17, finding 10: `--residency static` was accepted and
// never reached loadModel). For each flag the test builds what cli.ts starts the server with (the model source,
// loadModel's options, the app's settings, where to listen) with and without it, and wants a difference, or a
// refusal by name, or, for a documented no-op, none; then it runs those settings and checks their effects.
import { copyFileSync, existsSync, mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Template } from "@huggingface/jinja";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createApp } from "../examples/server/app.js";
import { launchSettings, modelSource } from "../examples/server/launch.js";
import { FLAGS, parseServeOptions, usage } from "../examples/server/options.js";
import { cpuExpertLayers } from "../examples/server/placement.js";
import { Slots } from "../examples/server/slots.js";
import { getSystemInfo, loadModel, type Model } from "../src/index.js";
import { defaultModelPath } from "../tools/default-model.js";
import { writeSyntheticModel } from "../tools/synth/synth.js";
import { exitWithin, spawnServe } from "./server-helpers.js";

const folder = mkdtempSync(join(tmpdir(), "bloomery-flags-"));
const file = (name: string, text: string) => {
  const path = join(folder, name);
  writeFileSync(path, text);
  return path;
};
const otherModel = join(folder, "other.gguf");
copyFileSync(defaultModelPath(), otherModel);
/** A reranker (cls.output head) for --rerank: written before the tests, at the top level. */
const rerankerModel = join(folder, "reranker.gguf");
await writeSyntheticModel(rerankerModel, { preset: "tiny-qwen3-reranker" });

/** What cli.ts starts the server with for this command line, as if on a machine with one GPU. */
async function settings(argv: string[], env: NodeJS.ProcessEnv = {}) {
  const options = parseServeOptions(argv, env);
  const source = modelSource(options, defaultModelPath);
  const launch = await launchSettings(options, "path" in source ? source.path : defaultModelPath(), 1);
  return { help: options.help, source, launch };
}

/**
 * One command line per flag (by its first name): `base` the flags it needs, `args` the flag with a value other than
 * its default. "no effect" marks a flag whose --help says it has none.
 */
const SAMPLES: Record<
  string,
  { base?: string[]; args: string[] } | { noEffect: string[] } | { refused: string[] } | "no effect"
> = {
  "-m": { args: ["-m", otherModel] },
  "-hf": { args: ["-hf", "org/model:Q8_0"] },
  "-hff": { base: ["-hf", "org/model"], args: ["--hf-file", "model-Q8_0.gguf"] },
  "-hft": { base: ["-hf", "org/model"], args: ["--hf-token", "secret"] },
  "--host": { args: ["--host", "0.0.0.0"] },
  "--port": { args: ["--port", "9000"] },
  "-c": { args: ["-c", "256"] },
  "-t": { args: ["-t", "3"] },
  "-np": { args: ["-np", "3"] },
  "-sps": { args: ["-sps", "0.5"] },
  "--api-key": { args: ["--api-key", "k1"] },
  "--api-key-file": { args: ["--api-key-file", file("keys.txt", "k2\n")] },
  "-a": { args: ["-a", "tiny"] },
  "--chat-template": { args: ["--chat-template", "{{ messages[0].content }}"] },
  "--chat-template-file": { args: ["--chat-template-file", file("t.jinja", "{{ messages[0].content }}!")] },
  "--chat-template-kwargs": { args: ["--chat-template-kwargs", '{"greeting":"hi"}'] },
  "--reasoning-format": { args: ["--reasoning-format", "none"] },
  "-ngl": { args: ["-ngl", "0"] },
  "-cmoe": { args: ["--cpu-moe"] },
  "-ncmoe": { args: ["--n-cpu-moe", "2"] },
  "-ot": { args: ["-ot", "blk\\.1\\.ffn_.*_exps=CPU"] },
  "--ask": { args: ["--ask", "Why?"] },
  "--mlock": { args: ["--mlock"] },
  "--no-mmap": { args: ["--no-mmap"] },
  "--slots": { base: ["--no-slots"], args: ["--slots"] },
  "--no-slots": { args: ["--no-slots"] },
  "--slot-save-path": { args: ["--slot-save-path", folder] },
  "--cache-ram": { args: ["--cache-ram", "0"] },
  "-to": { args: ["--timeout", "5"] },
  "--gpu-budget": { args: ["--gpu-budget", "8GiB"] },
  "--host-ram": { args: ["--host-ram", "1GiB"] },
  "--residency": { args: ["--residency", "static"] },
  "--jinja": "no effect",
  "--no-jinja": { args: ["--no-jinja"] },
  "-kvu": { base: ["-c", "512"], args: ["--kv-unified"] },
  "--tags": { args: ["--tags", "chat,small"] },
  "-s": { args: ["-s", "42"] },
  "-n": { args: ["-n", "64"] },
  "-b": { args: ["-b", "64"] },
  "-ub": { noEffect: ["-ub", "64"] },
  "-fa": { noEffect: ["-fa", "on"] },
  "-cb": "no effect",
  "--swa-full": "no effect",
  "--no-context-shift": { base: ["--context-shift"], args: ["--no-context-shift"] },
  "--ui": { base: ["--no-ui"], args: ["--ui"] },
  "--no-ui": { args: ["--no-webui"] },
  "--offline": { base: ["-hf", "org/model"], args: ["--offline"] },
  "-rea": { args: ["-rea", "off"] },
  "-v": { args: ["-v"] },
  "--cors-origins": { args: ["--cors-origins", "localhost"] },
  "--context-shift": { args: ["--context-shift"] },
  "--embedding": { base: ["-ngl", "0"], args: ["--embedding"] },
  "--pooling": { base: ["-ngl", "0", "--embedding"], args: ["--pooling", "mean"] },
  "--rerank": { base: ["-ngl", "0", "-m", rerankerModel], args: ["--rerank"] },
  "-md": { args: ["-md", otherModel] },
  "--spec-type": { args: ["--spec-type", "ngram-simple"] },
  "--draft": { base: ["--spec-type", "ngram-simple"], args: ["--draft", "8"] },
  "--draft-min": { base: ["--spec-type", "ngram-simple"], args: ["--draft-min", "2"] },
  "--draft-p-min": { base: ["-md", otherModel], args: ["--draft-p-min", "0.5"] },
  "-ngld": { noEffect: ["-ngld", "0"] },
  "--spec-synth-len": { refused: ["--spec-synth-len", "4"] },
  "--lora": { refused: ["--lora", "adapter.gguf"] },
  "--media-path": { refused: ["--media-path", "."] },
  "--mmproj": { refused: ["--mmproj", "mmproj.gguf"] },
  "--tools": { refused: ["--tools", "all"] },
  "--ui-mcp-proxy": { refused: ["--ui-mcp-proxy"] },
  "-bs": "no effect",
  "--metrics": { args: ["--metrics"] },
  "--temp": { args: ["--temp", "0.5"] },
  "-h": { args: ["--help"] },
};

/** The flags that move routed experts to the CPU, through a plan built from the model's GPU footprint. */
const EXPERT_FLAGS = new Set(["-cmoe", "-ncmoe", "-ot"]);

describe("every flag reaches what it controls (finding 10)", () => {
  it("has a sample for every flag, and no sample for a flag that does not exist", () => {
    expect(Object.keys(SAMPLES).sort()).toEqual(FLAGS.map((f) => f.names[0]!).sort());
  });

  it.each(FLAGS.map((flag) => ({ name: flag.names[0]!, flag })))(
    "$name changes what the server is started with",
    async ({ name, flag }) => {
      const sample = SAMPLES[name]!;
      if (sample === "no effect" || "noEffect" in sample) {
        expect(flag.help).toMatch(/no effect/);
        expect(await settings(sample === "no effect" ? [name] : sample.noEffect)).toEqual(await settings([]));
        return;
      }
      if ("refused" in sample) {
        // A flag bloomery cannot obey is refused by its name, with the reason its help gives.
        expect(flag.help).toMatch(/^refused: /);
        for (const alias of flag.names) {
          const args = [alias, ...sample.refused.slice(1)];
          expect(() => parseServeOptions(args)).toThrow(`${alias}: ${flag.help.slice("refused: ".length)}`);
        }
        return;
      }
      const base = sample.base ?? [];
      if (EXPERT_FLAGS.has(name) && !getSystemInfo().cuda.compiled) {
        // Their plan needs the GPU's footprint, which a build without CUDA cannot give: here they refuse by name,
        // and the layers they move are checked (the plan built from them is checked where CUDA is built).
        await expect(settings([...base, ...sample.args])).rejects.toMatchObject({ code: "GPU_UNAVAILABLE" });
        const layers = (argv: string[]) => cpuExpertLayers(parseServeOptions(argv), 6);
        expect(layers([...base, ...sample.args])).not.toEqual(layers(base));
        return;
      }
      const without = await settings(base);
      const withFlag = await settings([...base, ...sample.args]);
      expect(withFlag).not.toEqual(without);
      // Every other name of the flag, and its variable (the same value), say the same.
      const value = sample.args.length > 1 ? sample.args.at(-1)! : undefined;
      for (const alias of flag.names.slice(1)) {
        expect(await settings([...base, alias, ...(value !== undefined ? [value] : [])])).toEqual(withFlag);
      }
      if (flag.env && sample.base === undefined) {
        expect(await settings([], { [flag.env]: value ?? "1" })).toEqual(withFlag);
      }
    },
  );

  it("--residency reaches loadModel as given, where the SDK's default is adaptive", async () => {
    expect((await settings([])).launch.load).not.toHaveProperty("residency");
    expect((await settings(["--residency", "static"])).launch.load.residency).toBe("static");
    expect((await settings(["--residency", "adaptive"])).launch.load.residency).toBe("adaptive");
  });

  it("refuses by name the values it cannot obey rather than read them as something else", async () => {
    expect(() => parseServeOptions(["--cache-ram", "-2"])).toThrow(/--cache-ram must be at least -1, not -2/);
    expect(() => parseServeOptions(["-c", "-1"])).toThrow(/-c must be at least 0/);
    expect(() => parseServeOptions(["--temp", "-0.5"])).toThrow(/--temp must be at least 0/);
    expect(() => parseServeOptions(["--slot-save-path", join(folder, "missing")])).toThrow(
      /--slot-save-path \S+missing: ENOENT/,
    );
    expect(() => parseServeOptions(["--slot-save-path", otherModel])).toThrow(/is not a folder/);
    // --embedding serves wherever the model runs; --pooling pools embeddings; --rerank needs a reranker head.
    expect((await settings(["--embedding"])).launch.config.embedding).toBe(true);
    await expect(settings(["-ngl", "0", "--pooling", "mean"])).rejects.toThrow(/--pooling: .* need --embedding/);
    await expect(settings(["-ngl", "0", "--rerank"])).rejects.toThrow(/--reranking: the model has no reranker head/);
    expect(() => parseServeOptions(["--pooling", "max"])).toThrow(
      /--pooling must be one of none, mean, cls, last, rank/,
    );
    return expect(settings(["-ot", "exps=CUDA1"])).rejects.toThrow(/the buffer type must be CPU or CUDA0, not "CUDA1"/);
  });

  it("takes llama.cpp's template names as llama-server does: chatml always, its built-in formats with --no-jinja", () => {
    const render = (argv: string[]) =>
      new Template(parseServeOptions(argv).chatTemplate!).render({
        messages: [
          { role: "system", content: " You are a test. " },
          { role: "user", content: "Hi there" },
        ],
        add_generation_prompt: true,
      });
    const chatml = "<|im_start|>system\n You are a test. <|im_end|>\n<|im_start|>user\nHi there<|im_end|>\n";
    expect(render(["--chat-template", "chatml"])).toBe(`${chatml}<|im_start|>assistant\n`);
    // llama.cpp's C++ formats trim each message (src/llama-chat.cpp).
    expect(render(["--no-jinja", "--chat-template", "command-r"])).toBe(
      "<|START_OF_TURN_TOKEN|><|SYSTEM_TOKEN|>You are a test.<|END_OF_TURN_TOKEN|>" +
        "<|START_OF_TURN_TOKEN|><|USER_TOKEN|>Hi there<|END_OF_TURN_TOKEN|><|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|>",
    );
    expect(render(["--no-jinja", "--chat-template", "llama3"])).toBe(
      "<|start_header_id|>system<|end_header_id|>\n\nYou are a test.<|eot_id|>" +
        "<|start_header_id|>user<|end_header_id|>\n\nHi there<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n",
    );
    // With --jinja (the default) llama-server takes any other text as the template itself.
    expect(parseServeOptions(["--chat-template", "llama3"]).chatTemplate).toBe("llama3");
    expect(() => parseServeOptions(["--no-jinja", "--chat-template", "llama2"])).toThrow(
      /--chat-template llama2 with --no-jinja names llama.cpp's built-in llama2 format/,
    );
  });

  it("takes llama-server's -c 0 (the trained context) and -t 0 (the default threads)", async () => {
    // -c is the total over the slots (2 by default): -c 0 is the trained 1,024, 512 a slot.
    expect((await settings(["-c", "0"])).launch.load.contextSize).toBe(512);
    expect((await settings(["-c", "0", "-np", "1"])).launch.load.contextSize).toBe(1024);
    expect((await settings(["-c", "512", "-np", "4"])).launch.load.contextSize).toBe(128);
    expect((await settings(["-c", "512", "-np", "4", "--kv-unified"])).launch.load.contextSize).toBe(512);
    // More than the trained context a slot is served at the trained context, with a warning.
    const over = await settings(["-c", "8192", "-np", "1"]);
    expect(over.launch.load.contextSize).toBe(1024);
    expect(over.launch.warnings).toEqual([expect.stringMatching(/more than the model's trained context of 1024/)]);
    expect(await settings(["-t", "0"])).toEqual(await settings([]));
    expect(await settings(["-t", "-1"])).toEqual(await settings([]));
  });
});

describe("the settings built from the flags, run (finding 10)", () => {
  const template = "{% for m in messages %}{{ greeting }} {{ m.content }}{% endfor %}";
  let model: Model;
  let launch: Awaited<ReturnType<typeof settings>>["launch"];
  let server: ReturnType<typeof createApp>;

  beforeAll(async () => {
    ({ launch } = await settings([
      ...["-ngl", "0", "-c", "768", "-t", "1", "-np", "3", "--chat-template", template, "--cache-ram", "0"],
      ...["--chat-template-kwargs", '{"greeting":"hi"}', "-a", "tiny", "--temp", "0.25", "--metrics", "--no-slots"],
      ...["--slot-save-path", folder, "--api-key", "k1", "--timeout", "5"],
    ]));
    model = await loadModel(defaultModelPath(), launch.load);
    server = createApp(launch.config, launch.app);
    server.context.serve(new Slots(model, launch.slots, launch.slotPromptSimilarity));
  });
  afterAll(async () => {
    await server?.app.close();
    model?.dispose();
  });

  const get = (url: string, key = "k1") => server.app.inject({ url, headers: { authorization: `Bearer ${key}` } });

  it("loads the model as -ngl 0, -c, -t, -np and --chat-template ask", () => {
    expect(model.info).toMatchObject({ gpu: false, contextSize: 256, threads: 1, parallel: 3, chatTemplate: template });
  });

  it("serves as -a, --temp, -np, --metrics, --no-slots, --api-key, --timeout and --chat-template-kwargs ask", async () => {
    const props = (await get("/props")).json();
    expect(props).toMatchObject({ model_alias: "tiny", total_slots: 3, chat_template: template });
    expect(props.default_generation_settings).toMatchObject({ n_ctx: 256, params: { temperature: 0.25 } });
    expect((await get("/metrics")).statusCode).toBe(200);
    expect((await get("/slots")).statusCode).toBe(501);
    expect((await get("/props", "wrong")).statusCode).toBe(401);
    expect((server.app.initialConfig as { requestTimeout?: number }).requestTimeout).toBe(5000);
    const applied = await server.app.inject({
      method: "POST",
      url: "/apply-template",
      headers: { authorization: "Bearer k1" },
      payload: { messages: [{ role: "user", content: "there" }] },
    });
    expect(applied.json()).toEqual({ prompt: "hi there" });
  });

  it("saves slots into --slot-save-path", async () => {
    const saved = await server.app.inject({
      method: "POST",
      url: "/slots/0?action=save",
      headers: { authorization: "Bearer k1" },
      payload: { filename: "slot0.bin" },
    });
    expect(saved.statusCode).toBe(200);
    expect(existsSync(join(folder, "slot0.bin"))).toBe(true);
  });

  it("bloomery-serve --help prints every flag and exits", async () => {
    const help = spawnServe(["--help"]);
    try {
      expect(await exitWithin(help, 20_000)).toMatchObject({ code: 0 });
      expect(help.stdout()).toBe(usage());
      for (const flag of FLAGS) expect(help.stdout()).toContain(flag.names.join(", "));
    } finally {
      await help.kill();
    }
  });
});

describe("/apply-template renders as the chat endpoints do (llama-server's oaicompat_chat_params_parse)", () => {
  // Shows the variables llama-server gives every template, and opens a think block as DeepSeek-R1's template does.
  const template =
    "{{ enable_thinking }}|{{ date_string }}|{{ functions }}|{% for m in messages %}{{ m.content }}{% endfor %}" +
    "{% if add_generation_prompt %}<think>\n{% endif %}";
  let model: Model;
  beforeAll(async () => {
    model = await loadModel(defaultModelPath(), { gpu: false, threads: 1, contextSize: 256, chatTemplate: template });
  });
  afterAll(() => model?.dispose());

  const render = async (argv: string[], payload: Record<string, unknown>) => {
    const { launch } = await settings(["-ngl", "0", ...argv]);
    const server = createApp(launch.config, launch.app);
    server.context.serve(new Slots(model, 1));
    try {
      const applied = await server.app.inject({ method: "POST", url: "/apply-template", payload });
      expect(applied.statusCode).toBe(200);
      return (applied.json() as { prompt: string }).prompt;
    } finally {
      await server.app.close();
    }
  };

  it("gives enable_thinking (true unless --reasoning off, which also closes the opened think block) and the date", async () => {
    const messages = [{ role: "user", content: "What is today?" }];
    const today = new Date();
    const date = `${String(today.getDate()).padStart(2, "0")} ${today.toLocaleString("en-US", { month: "short" })}`;
    const auto = await render([], { messages });
    expect(auto).toMatch(new RegExp(`^true\\|${date} \\d{4}\\|\\[\\]\\|What is today\\?<think>\\n$`));
    expect(await render(["--reasoning", "on"], { messages })).toBe(auto);
    expect(await render(["--reasoning", "off"], { messages })).toMatch(/^false\|.*<think>\n<\/think>$/s);
    // A request's chat_template_kwargs come over the server's setting, and a final assistant message is a prefill.
    const prefilled = await render(["--reasoning", "off"], {
      messages: [...messages, { role: "assistant", content: "It is" }],
      chat_template_kwargs: { enable_thinking: true },
    });
    expect(prefilled).toMatch(/^true\|.*What is today\?<think>\nIt is$/s);
  });
});

describe("-n is the n_predict of requests that set none (llama-server's n_predict_max)", () => {
  let model: Model;
  beforeAll(async () => {
    model = await loadModel(defaultModelPath(), { gpu: false, threads: 1, contextSize: 256 });
  });
  afterAll(() => model?.dispose());

  it("gives a request without n_predict -n tokens, and one with n_predict its own, more or fewer", async () => {
    const { launch } = await settings(["-ngl", "0", "-n", "6"]);
    const server = createApp(launch.config, launch.app);
    server.context.serve(new Slots(model, 1));
    const predicted = async (fields: Record<string, unknown>) => {
      const payload = { prompt: "Once upon a time", temperature: 0, ignore_eos: true, ...fields };
      const response = await server.app.inject({ method: "POST", url: "/completion", payload });
      expect(response.statusCode).toBe(200);
      return (response.json() as { tokens_predicted: number }).tokens_predicted;
    };
    try {
      expect(await predicted({})).toBe(6);
      expect(await predicted({ n_predict: -1 })).toBe(6);
      expect(await predicted({ n_predict: 9 })).toBe(9);
      expect(await predicted({ n_predict: 3 })).toBe(3);
    } finally {
      await server.app.close();
    }
  });
});
