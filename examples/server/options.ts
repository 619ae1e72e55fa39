// bloomery-serve's command line: llama-server's spellings, each also read from its LLAMA_ARG_*
// environment variable (the command line wins). Unknown flags and variables are refused by name.
import { namedTemplate } from "./named-templates.js";
import { readFileSync, statSync } from "node:fs";
import { REASONING_FORMATS, type ReasoningFormat } from "./context.js";
import { DRAIN_SECONDS } from "./drain.js";
import { POOLINGS, type Pooling } from "../../src/index.js";

/** --spec-type's draft sources bloomery runs (llama.cpp's names). */
const SPEC_TYPES = ["none", "draft-simple", "ngram-simple", "draft-mtp"] as const;
/** engine::kDefaultDraftMax. */
const DEFAULT_DRAFT_MAX = 16;

export interface ServeOptions {
  model?: string;
  /** -hf: `user/model[:quant]` on the Hugging Face hub, downloaded into the cache and served. */
  hfRepo?: string;
  /** --hf-file: the repo's file to serve instead of one picked by quant. */
  hfFile?: string;
  /** --hf-token: the hub's access token. */
  hfToken?: string;
  host: string;
  port: number;
  /**
   * -c: tokens of context over all slots, as llama-server counts them (-c 512 -np 2 gives each slot 256; with
   * --kv-unified each slot may use all of them); 0: the model's trained context.
   */
  ctxSize?: number;
  /** --kv-unified: every slot may use the whole -c (bloomery gives each slot its own cache of that size). */
  kvUnified: boolean;
  /** -t: CPU threads; undefined (also -t 0 or less, as llama-server reads it): one per physical core. */
  threads?: number;
  parallel: number;
  /**
   * -sps: a request without id_slot takes the free slot whose context shares the longest prefix with its
   * prompt, where that prefix is more than this fraction of the prompt (else the free slot idle longest);
   * 0: always the free slot idle longest. As llama-server's, default 0.10.
   */
  slotPromptSimilarity: number;
  apiKeys: string[];
  /** -a: the model's names (comma-separated on the command line); the first in sorted order is its id. */
  aliases: string[];
  /** --tags: labels /v1/models lists with the model. */
  tags: string[];
  /** -s: the seed of requests that set none; undefined: a fresh seed per request (llama-server's -1). */
  seed?: number;
  /** -n: the most tokens a request generates (it may ask for fewer); undefined: until the context is full. */
  nPredict?: number;
  /** -b: prompt tokens per progress report of a request's return_progress (llama-server's logical batch). */
  batchSize: number;
  /** --no-jinja: requests with tools are refused, as llama-server refuses them without --jinja. */
  jinja: boolean;
  /** --reasoning: the templates' enable_thinking, false with off, true with on or auto (as llama-server's). */
  reasoning: "on" | "off" | "auto";
  /** -v: responses carry llama-server's `__verbose` object (the prompt as the model saw it). */
  verbose: boolean;
  /** --context-shift: a full slot discards half of its context after n_keep and generates on (default off). */
  contextShift: boolean;
  /** --offline: a -hf model must be in the cache already; nothing is downloaded. */
  offline: boolean;
  /** --ui / --no-ui (and --webui / --no-webui): serve the web page at / (default true). */
  webui: boolean;
  /** --cors-origins: the origins allowed to call (comma-separated; "localhost" means any local address). */
  corsOrigins?: string[];

  chatTemplate?: string;
  chatTemplateKwargs?: Record<string, unknown>;
  reasoningFormat: ReasoningFormat;
  metrics: boolean;
  /** -ngl as given: "auto", "all" or a layer count; undefined: the GPU when there is one. */
  gpuLayers?: string;
  /** --cpu-moe: every routed expert on the CPU. */
  cpuMoe: boolean;
  /** --n-cpu-moe: the routed experts of the first N layers on the CPU. */
  nCpuMoe?: number;
  /** -ot patterns, `regex=buffer type`. */
  overrideTensors: string[];
  /** --ask: questions the server puts to itself once loaded, printing the answers (npm start's demo). */
  ask: string[];
  /** --mlock: lock the model's bytes in RAM. */
  mlock: boolean;
  /** --no-mmap: read the model into private memory instead of mapping it. */
  noMmap: boolean;
  /** GET /slots (llama-server's --slots / --no-slots; on by default). */
  slots: boolean;
  /** --slot-save-path: where slots are saved to and restored from. */
  slotSavePath?: string;
  /** --cache-ram in MiB: -1 no limit, 0 off. */
  cacheRamMiB?: number;
  /** --timeout: seconds a client may take to send its request (0: no limit). */
  timeoutSeconds: number;
  /** --gpu-budget: bytes or a size such as "8GiB" of GPU memory the model may use (loadModel's gpu.budget). */
  gpuBudget?: string;
  /** --host-ram: bytes or a size such as "64GiB" of host RAM for the experts off the GPU (loadModel's hostRam). */
  hostRam?: string;
  /** --embedding: serve the embeddings endpoints. */
  embedding: boolean;
  /** --pooling: the pooling of embeddings; undefined: the file's. */
  pooling?: Pooling;
  /** --reranking: serve the rerank endpoints (and embeddings, pooled by rank unless --pooling says otherwise). */
  reranking: boolean;
  /** -md: the draft model's file. */
  draftModel?: string;
  /** --spec-type: the draft source; undefined: draft-simple with -md, none without. */
  specType?: (typeof SPEC_TYPES)[number];
  /** --draft-max, --draft-min, --draft-p-min: loadModel's draft settings. */
  draftMax?: number;
  draftMin?: number;
  draftPMin?: number;
  /** --residency: loadModel's residency; undefined: its default (adaptive). */
  residency?: "adaptive" | "static";
  temperature: number;
  help: boolean;
}

type Kind = "string" | "integer" | "number" | "flag";

export interface Flag {
  names: string[];
  env?: string;
  kind: Kind;
  help: string;
  /** Stores the value; `name` is the flag or variable it came from, for errors. */
  apply: (options: ServeOptions, value: string | number | boolean, name: string) => void;
}

/** Every flag bloomery-serve takes (tests check that each reaches what it controls). */
export const FLAGS: readonly Flag[] = [
  {
    names: ["-m", "--model"],
    env: "LLAMA_ARG_MODEL",
    kind: "string",
    help: "model file (default: the bundled model)",
    apply: (o, v) => (o.model = v as string),
  },
  {
    names: ["-hf", "-hfr", "--hf-repo", "--hf"],
    env: "LLAMA_ARG_HF_REPO",
    kind: "string",
    help: "<user>/<model>[:quant] on the Hugging Face hub (quant default Q4_K_M), downloaded into LLAMA_CACHE (default ~/.cache/bloomery); the hub is HF_ENDPOINT",
    apply: (o, v) => (o.hfRepo = v as string),
  },
  {
    names: ["-hff", "--hf-file"],
    env: "LLAMA_ARG_HF_FILE",
    kind: "string",
    help: "the file of the -hf repo to serve, instead of one picked by quant",
    apply: (o, v) => (o.hfFile = v as string),
  },
  {
    names: ["-hft", "--hf-token"],
    env: "HF_TOKEN",
    kind: "string",
    help: "Hugging Face access token, sent to the hub",
    apply: (o, v) => (o.hfToken = v as string),
  },
  {
    names: ["--host"],
    env: "LLAMA_ARG_HOST",
    kind: "string",
    help: "address to listen on (default 127.0.0.1)",
    apply: (o, v) => (o.host = v as string),
  },
  {
    names: ["--port"],
    env: "LLAMA_ARG_PORT",
    kind: "integer",
    help: "port to listen on (default 8080)",
    apply: (o, v) => (o.port = v as number),
  },
  {
    names: ["-c", "--ctx-size"],
    env: "LLAMA_ARG_CTX_SIZE",
    kind: "integer",
    help:
      "tokens of context over all slots, as llama-server counts them: each of the -np slots gets -c/-np " +
      "(with --kv-unified, -c each), at most the model's trained context; 0: the model's trained context " +
      "(default: the model's, at most 4096, per slot)",
    apply: (o, v, name) => (o.ctxSize = atLeast(v as number, 0, name)),
  },
  {
    names: ["-kvu", "--kv-unified"],
    env: "LLAMA_ARG_KV_UNIFIED",
    kind: "flag",
    help: "every slot may use the whole -c, as in llama-server's shared cache (bloomery gives each slot its own cache of -c tokens)",
    apply: (o, v) => (o.kvUnified = v as boolean),
  },
  {
    names: ["-t", "--threads"],
    env: "LLAMA_ARG_THREADS",
    kind: "integer",
    help: "CPU threads (default, also 0 or less: one per physical core)",
    apply: (o, v) => (o.threads = (v as number) > 0 ? (v as number) : undefined),
  },
  {
    names: ["-np", "--parallel"],
    env: "LLAMA_ARG_N_PARALLEL",
    kind: "integer",
    help: "slots: requests served at once (default 2)",
    apply: (o, v) => (o.parallel = v as number),
  },
  {
    names: ["-sps", "--slot-prompt-similarity"],
    kind: "number",
    help:
      "a request takes the free slot whose context shares the longest prefix with its prompt, where that prefix " +
      "is more than this fraction of the prompt, else the slot idle longest (default 0.10; 0: always the slot idle longest)",
    apply: (o, v, name) => (o.slotPromptSimilarity = atMost(atLeast(v as number, 0, name), 1, name)),
  },
  {
    names: ["--api-key"],
    env: "LLAMA_API_KEY",
    kind: "string",
    help: "API keys, comma-separated, that requests must carry (an empty key is refused)",
    apply: (o, v, name) => o.apiKeys.push(...readKeys(v as string, name)),
  },
  {
    names: ["--api-key-file"],
    env: "LLAMA_ARG_API_KEY_FILE",
    kind: "string",
    help: "file of API keys, one per line; blank lines and lines starting with # are skipped (a file of no key is refused)",
    apply: (o, v, name) => o.apiKeys.push(...readKeyFile(v as string, name)),
  },
  {
    names: ["-a", "--alias"],
    env: "LLAMA_ARG_ALIAS",
    kind: "string",
    help: "the model's names, comma-separated: /v1/models lists them all, and the first in sorted order is its id in responses",
    apply: (o, v, name) => (o.aliases = readList(v as string, name)),
  },
  {
    names: ["--tags"],
    env: "LLAMA_ARG_TAGS",
    kind: "string",
    help: "labels of the model, comma-separated, listed by /v1/models",
    apply: (o, v, name) => (o.tags = readList(v as string, name)),
  },
  {
    names: ["-s", "--seed"],
    env: "LLAMA_ARG_SEED",
    kind: "integer",
    help: "seed of the requests that set none, so that their sampled text repeats (default -1: a fresh seed each request)",
    apply: (o, v, name) => (o.seed = atLeast(v as number, -1, name) < 0 ? undefined : (v as number)),
  },
  {
    names: ["-n", "--n-predict", "--predict"],
    env: "LLAMA_ARG_N_PREDICT",
    kind: "integer",
    help: "the most tokens a request that sets no n_predict/max_tokens generates (default -1: until the context is full)",
    apply: (o, v, name) => (o.nPredict = atLeast(v as number, -1, name) < 0 ? undefined : (v as number)),
  },
  {
    names: ["-b", "--batch-size"],
    env: "LLAMA_ARG_BATCH",
    kind: "integer",
    help:
      "prompt tokens between two progress reports of a request that asks for return_progress (default 2048); " +
      "the engine sizes its own forward passes",
    apply: (o, v, name) => (o.batchSize = atLeast(v as number, 1, name)),
  },
  noEffect(
    ["-ub", "--ubatch-size"],
    "integer",
    "accepted for llama-server's command lines, no effect: the engine sizes its own forward passes",
    "LLAMA_ARG_UBATCH",
  ),
  noEffect(
    ["-fa", "--flash-attn"],
    "string",
    "accepted for llama-server's command lines (on, off or auto), no effect: bloomery's attention kernels are its own",
    "LLAMA_ARG_FLASH_ATTN",
    (value, name) => {
      if (!/^(on|off|auto|1|0|true|false)$/i.test(value)) throw new UsageError(`${name} must be on, off or auto`);
    },
  ),
  noEffect(
    ["-cb", "--cont-batching"],
    "flag",
    "accepted for llama-server's command lines, no effect: requests are always batched together (--no-cont-batching is refused)",
    "LLAMA_ARG_CONT_BATCHING",
    (value, name) => {
      if (value === "false") throw new UsageError(`${name} false: bloomery always batches the slots together`);
    },
  ),
  noEffect(
    ["--swa-full"],
    "flag",
    "accepted for llama-server's command lines, no effect: bloomery keeps the whole cache of sliding-window layers",
    "LLAMA_ARG_SWA_FULL",
  ),
  {
    names: ["--context-shift"],
    env: "LLAMA_ARG_CONTEXT_SHIFT",
    kind: "flag",
    help:
      "a generation that fills its slot's context goes on: the oldest half of the tokens after the request's " +
      "n_keep (default 0, plus BOS; -1: the whole prompt) is discarded, as llama-server does (default: off)",
    apply: (o, v) => (o.contextShift = v as boolean),
  },
  {
    names: ["--no-context-shift"],
    kind: "flag",
    help: "a generation ends when its slot's context is full (the default)",
    apply: (o, v) => (o.contextShift = !(v as boolean)),
  },
  {
    names: ["--offline"],
    env: "LLAMA_ARG_OFFLINE",
    kind: "flag",
    help: "with -hf, serve the model from the cache and download nothing (a local -m file is read as always)",
    apply: (o, v) => (o.offline = v as boolean),
  },
  {
    names: ["-rea", "--reasoning"],
    env: "LLAMA_ARG_REASONING",
    kind: "string",
    help:
      "off: the chat templates' enable_thinking is false for every chat (and a think block a template opens is " +
      "closed); on or auto (default): it is true, as llama-server sets it for a template that can think",
    apply: (o, v, name) => (o.reasoning = readChoice(v as string, name, ["on", "off", "auto"] as const)),
  },
  {
    names: ["-v", "--verbose", "--log-verbose"],
    kind: "flag",
    help: "responses carry llama-server's __verbose object (the prompt as the model saw it), as a request's verbose: true asks",
    apply: (o, v) => (o.verbose = v as boolean),
  },
  {
    names: ["--cors-origins"],
    env: "LLAMA_ARG_CORS_ORIGINS",
    kind: "string",
    help:
      "origins a browser may call from, comma-separated (localhost: any local address); others get no " +
      "Access-Control-Allow-Origin (default: every origin)",
    apply: (o, v, name) => (o.corsOrigins = readList(v as string, name)),
  },
  {
    names: ["--ui", "--webui"],
    env: "LLAMA_ARG_UI",
    kind: "flag",
    help: "serve the web page at / (default): a chat, and a live view of where the model's experts run",
    apply: (o, v) => (o.webui = v as boolean),
  },
  {
    names: ["--no-ui", "--no-webui"],
    kind: "flag",
    help: "serve no web page (/ answers 404)",
    apply: (o, v) => (o.webui = !(v as boolean)),
  },
  {
    names: ["--embedding", "--embeddings"],
    env: "LLAMA_ARG_EMBEDDINGS",
    kind: "flag",
    help:
      "serve embeddings: POST /embedding, /embeddings and /v1/embeddings (the model's hidden states after its " +
      "output norm, pooled; computed on the CPU: with a GPU, add -ngl 0)",
    apply: (o, v) => (o.embedding = v as boolean),
  },
  {
    names: ["--pooling"],
    env: "LLAMA_ARG_POOLING",
    kind: "string",
    help: "{none,mean,cls,last,rank}: the pooling of embeddings (default: the model file's pooling_type)",
    apply: (o, v, name) => (o.pooling = readChoice(v as string, name, POOLINGS)),
  },
  {
    names: ["--rerank", "--reranking"],
    env: "LLAMA_ARG_RERANKING",
    kind: "flag",
    help:
      "serve reranking: POST /rerank, /reranking, /v1/rerank and /v1/reranking (needs a reranker model, whose " +
      "file has a cls.output head; implies --embedding --pooling rank)",
    apply: (o, v) => (o.reranking = v as boolean),
  },
  {
    names: ["-md", "--model-draft", "--spec-draft-model"],
    env: "LLAMA_ARG_SPEC_DRAFT_MODEL",
    kind: "string",
    help: "a draft model for speculative decoding (same vocabulary as -m; run on the CPU)",
    apply: (o, v) => (o.draftModel = v as string),
  },
  {
    names: ["--spec-type"],
    env: "LLAMA_ARG_SPEC_TYPE",
    kind: "string",
    help:
      "speculative decoding's draft source: none, draft-simple (the -md model; the default with -md), " +
      "ngram-simple (the tokens that followed the context's last n-gram earlier in it) or draft-mtp (the " +
      "model's own next-token-prediction layer); others are refused",
    apply: (o, v, name) => (o.specType = readChoice(v as string, name, SPEC_TYPES)),
  },
  {
    names: ["--draft", "--draft-n", "--draft-max", "--spec-draft-n-max"],
    env: "LLAMA_ARG_SPEC_DRAFT_N_MAX",
    kind: "integer",
    help: `the most tokens drafted for one pass (default ${DEFAULT_DRAFT_MAX}, at most 64); bloomery drafts fewer where more do not pay`,
    apply: (o, v, name) => (o.draftMax = atMost(atLeast(v as number, 0, name), 64, name)),
  },
  {
    names: ["--draft-min", "--draft-n-min", "--spec-draft-n-min"],
    env: "LLAMA_ARG_SPEC_DRAFT_N_MIN",
    kind: "integer",
    help: "a shorter draft is not verified (default 0)",
    apply: (o, v, name) => (o.draftMin = atLeast(v as number, 0, name)),
  },
  {
    names: ["--draft-p-min", "--spec-draft-p-min"],
    env: "LLAMA_ARG_SPEC_DRAFT_P_MIN",
    kind: "number",
    help: "the draft model's draft ends before a token it gives less probability than this (default 0)",
    apply: (o, v, name) => (o.draftPMin = atMost(atLeast(v as number, 0, name), 1, name)),
  },
  noEffect(
    ["-ngld", "--spec-draft-ngl", "--gpu-layers-draft", "--n-gpu-layers-draft"],
    "string",
    "draft model layers on the GPU: only 0 is taken, with no effect (bloomery runs the draft model on the CPU)",
    "LLAMA_ARG_N_GPU_LAYERS_DRAFT",
    (value, name) => {
      if (value !== "0") throw new UsageError(`${name} ${value}: bloomery runs the draft model on the CPU (${name} 0)`);
    },
  ),
  refused(["--spec-synth-len", "--spec-synth-rates"], "string", "bloomery has no synthetic draft for tests"),
  refused(
    ["--lora", "--lora-scaled"],
    "string",
    "LoRA adapters are not supported: bloomery's expert kernels run the quantized weights as they are",
  ),
  refused(["--media-path"], "string", "bloomery-serve does not take images or audio"),
  refused(["--mmproj", "--mmproj-url"], "string", "bloomery-serve does not take images or audio"),
  refused(["--tools"], "string", "bloomery-serve runs no tools of its own: the client runs them"),
  refused(["--ui-mcp-proxy", "--webui-mcp-proxy"], "flag", "bloomery-serve's web page has no MCP proxy"),
  noEffect(
    ["-bs", "--backend-sampling"],
    "flag",
    "accepted for llama-server's command lines, no effect: llama-server's second sampler draws what its first " +
      "does, and bloomery has one, in its engine",
  ),
  {
    names: ["--chat-template"],
    env: "LLAMA_ARG_CHAT_TEMPLATE",
    kind: "string",
    help:
      "a Jinja chat template to use instead of the model's; chatml names llama.cpp's ChatML, and with --no-jinja " +
      "llama3 and command-r name llama.cpp's built-in formats (its other format names are refused)",
    apply: (o, v) => (o.chatTemplate = v as string),
  },
  {
    names: ["--chat-template-file"],
    env: "LLAMA_ARG_CHAT_TEMPLATE_FILE",
    kind: "string",
    help: "a file holding a Jinja chat template to use instead of the model's",
    apply: (o, v) => (o.chatTemplate = readTemplateFile(v as string)),
  },
  {
    names: ["--chat-template-kwargs"],
    env: "LLAMA_CHAT_TEMPLATE_KWARGS",
    kind: "string",
    help: "a JSON object of template variables for every chat, e.g. '{\"enable_thinking\":false}'",
    apply: (o, v) => (o.chatTemplateKwargs = readKwargs(v as string)),
  },
  {
    names: ["--reasoning-format"],
    env: "LLAMA_ARG_THINK",
    kind: "string",
    help: `where reasoning goes when a request does not say: ${REASONING_FORMATS.join(", ")} (default auto)`,
    apply: (o, v) => (o.reasoningFormat = readReasoningFormat(v as string)),
  },
  {
    names: ["-ngl", "--gpu-layers", "--n-gpu-layers"],
    env: "LLAMA_ARG_N_GPU_LAYERS",
    kind: "string",
    help: "0: run on the CPU; auto, all or at least the model's layers: on the GPU (default: the GPU when there is one)",
    apply: (o, v) => (o.gpuLayers = v as string),
  },
  {
    names: ["-cmoe", "--cpu-moe"],
    env: "LLAMA_ARG_CPU_MOE",
    kind: "flag",
    help: "keep every routed expert in host RAM, run by the CPU",
    apply: (o, v) => (o.cpuMoe = v as boolean),
  },
  {
    names: ["-ncmoe", "--n-cpu-moe"],
    env: "LLAMA_ARG_N_CPU_MOE",
    kind: "integer",
    help: "keep the routed experts of the first N layers in host RAM, run by the CPU",
    apply: (o, v) => (o.nCpuMoe = v as number),
  },
  {
    names: ["-ot", "--override-tensor"],
    env: "LLAMA_ARG_OVERRIDE_TENSOR",
    kind: "string",
    help: "<tensor regex>=CPU for routed expert tensors, comma-separated (e.g. 'blk\\.[0-9]\\.ffn_.*_exps=CPU')",
    // Each rule is checked where it is applied (placement.ts): an empty one is refused there.
    apply: (o, v) => o.overrideTensors.push(...(v as string).split(",").map((rule) => rule.trim())),
  },
  {
    names: ["--ask"],
    kind: "string",
    help: "bloomery's own: once loaded, ask this question through the server's /v1/chat/completions and print the answer (repeatable)",
    apply: (o, v) => o.ask.push(v as string),
  },
  {
    names: ["--mlock"],
    env: "LLAMA_ARG_MLOCK",
    kind: "flag",
    help: "lock the model's bytes in RAM (a refused lock stops the server, naming why)",
    apply: (o, v) => (o.mlock = v as boolean),
  },
  {
    names: ["--no-mmap"],
    env: "LLAMA_ARG_NO_MMAP",
    kind: "flag",
    help: "read the model into private memory instead of mapping the file",
    apply: (o, v) => (o.noMmap = v as boolean),
  },
  {
    names: ["--slots"],
    env: "LLAMA_ARG_ENDPOINT_SLOTS",
    kind: "flag",
    help: "serve GET /slots (default on; --no-slots turns it off)",
    apply: (o, v) => (o.slots = v as boolean),
  },
  {
    names: ["--no-slots"],
    kind: "flag",
    help: "do not serve GET /slots",
    apply: (o, v) => (o.slots = !(v as boolean)),
  },
  {
    names: ["--slot-save-path"],
    env: "LLAMA_ARG_SLOT_SAVE_PATH",
    kind: "string",
    help: "folder of POST /slots/:id?action=save|restore files, which must exist (without it, save and restore are refused)",
    apply: (o, v, name) => (o.slotSavePath = readFolder(v as string, name)),
  },
  {
    names: ["--cache-ram"],
    env: "LLAMA_ARG_CACHE_RAM",
    kind: "integer",
    help: "MiB of host RAM for the prompt-state cache (-1: no limit, 0: off; default: a quarter of RAM, at most 8 GiB)",
    apply: (o, v, name) => (o.cacheRamMiB = atLeast(v as number, -1, name)),
  },
  {
    names: ["-to", "--timeout"],
    env: "LLAMA_ARG_TIMEOUT",
    kind: "integer",
    help: "seconds a client may take to send its request; a slower one gets 408 (0: no limit; default 600)",
    apply: (o, v) => (o.timeoutSeconds = v as number),
  },
  {
    names: ["--gpu-budget"],
    kind: "string",
    help: "GPU memory the model may use: bytes or a size such as 8GiB (default: the card's free memory)",
    apply: (o, v) => (o.gpuBudget = v as string),
  },
  {
    names: ["--host-ram"],
    kind: "string",
    help: "host RAM for the routed experts the GPU does not hold: bytes or a size such as 64GiB (default: RAM available)",
    apply: (o, v) => (o.hostRam = v as string),
  },
  {
    names: ["--residency"],
    kind: "string",
    help:
      "where the routed experts the GPU cannot all hold run: adaptive (default) moves the most-routed host experts " +
      "onto the GPU between steps, static keeps them where the load placed them (needs the GPU; with experts paged " +
      "from disk the placement stays as loaded either way)",
    apply: (o, v, name) => (o.residency = readResidency(v as string, name)),
  },
  {
    names: ["--jinja"],
    env: "LLAMA_ARG_JINJA",
    kind: "flag",
    help: "accepted for llama-server's command lines, no effect: chat templates are always Jinja (--no-jinja refuses tools)",
    apply: (o, v) => (o.jinja = v as boolean),
  },
  {
    names: ["--no-jinja"],
    kind: "flag",
    help:
      "llama-server's templates without Jinja: bloomery renders the same prompt with Jinja, and refuses requests " +
      "with tools, as llama-server does without --jinja",
    apply: (o, v) => (o.jinja = !(v as boolean)),
  },
  {
    names: ["--metrics"],
    env: "LLAMA_ARG_ENDPOINT_METRICS",
    kind: "flag",
    help: "serve GET /metrics",
    apply: (o, v) => (o.metrics = v as boolean),
  },
  {
    names: ["--temp"],
    kind: "number",
    help: "temperature of requests that set none (default 0.8)",
    apply: (o, v, name) => (o.temperature = atLeast(v as number, 0, name)),
  },
  { names: ["-h", "--help"], kind: "flag", help: "print this and exit", apply: (o, v) => (o.help = v as boolean) },
];

/** Thrown for a bad command line; the message names the flag or variable. */
export class UsageError extends Error {}

export function parseServeOptions(argv: readonly string[], env: NodeJS.ProcessEnv = {}): ServeOptions {
  const options: ServeOptions = {
    host: "127.0.0.1",
    port: 8080,
    parallel: 2,
    slotPromptSimilarity: 0.1,
    kvUnified: false,
    apiKeys: [],
    aliases: [],
    tags: [],
    batchSize: 2048,
    jinja: true,
    reasoning: "auto",
    verbose: false,
    contextShift: false,
    offline: false,
    webui: true,
    cpuMoe: false,
    overrideTensors: [],
    slots: true,
    mlock: false,
    noMmap: false,
    ask: [],
    reasoningFormat: "auto",
    metrics: false,
    embedding: false,
    reranking: false,
    temperature: 0.8,
    timeoutSeconds: 600,
    help: false,
  };
  const fromArgs = new Set<Flag>();
  const pending: [Flag, string | undefined, string][] = [];
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i]!;
    const [given, inline] =
      arg.startsWith("--") && arg.includes("=")
        ? [arg.slice(0, arg.indexOf("=")), arg.slice(arg.indexOf("=") + 1)]
        : [arg, undefined];
    // llama-server reads --a_b as --a-b.
    const name = given.startsWith("--") ? given.replaceAll("_", "-") : given;
    const flag = FLAGS.find((f) => f.names.includes(name));
    if (!flag) throw new UsageError(`unknown argument: ${arg}`);
    let value = inline;
    if (flag.kind !== "flag" && value === undefined) {
      value = argv[++i];
      if (value === undefined) throw new UsageError(`${name} needs a value`);
    }
    fromArgs.add(flag);
    pending.push([flag, value, name]);
  }
  for (const [key, value] of Object.entries(env)) {
    if (
      !key.startsWith("LLAMA_ARG_") &&
      key !== "LLAMA_API_KEY" &&
      key !== "LLAMA_CHAT_TEMPLATE_KWARGS" &&
      key !== "HF_TOKEN"
    )
      continue;
    const flag = FLAGS.find((f) => f.env === key);
    if (!flag) throw new UsageError(`unsupported environment variable: ${key}`);
    if (!fromArgs.has(flag) && value !== undefined) pending.unshift([flag, value, key]);
  }
  for (const [flag, value, name] of pending) flag.apply(options, convert(flag, value, name), name);
  if (options.model !== undefined && options.hfRepo !== undefined)
    throw new UsageError("-m and -hf both name the model: give one");
  if (options.hfFile !== undefined && options.hfRepo === undefined) throw new UsageError("--hf-file needs -hf");
  if (options.parallel < 1) throw new UsageError("--parallel must be at least 1");
  if (options.port < 0 || options.port > 65535) throw new UsageError("--port must be between 0 and 65535");
  if (options.timeoutSeconds < 0) throw new UsageError("--timeout must be at least 0");
  checkDrafts(options);
  if (options.chatTemplate !== undefined) options.chatTemplate = namedTemplate(options.chatTemplate, options.jinja);
  return options;
}

/** Refuses draft settings that nothing would use, and --spec-type draft-simple without -md. */
function checkDrafts(o: ServeOptions): void {
  const source = o.specType ?? (o.draftModel !== undefined ? "draft-simple" : "none");
  if (source === "draft-simple" && o.draftModel === undefined) {
    throw new UsageError("--spec-type draft-simple needs a draft model (-md)");
  }
  if (source === "none") {
    const set = (
      [
        ["--draft-max", o.draftMax],
        ["--draft-min", o.draftMin],
        ["--draft-p-min", o.draftPMin],
      ] as const
    ).find(([, value]) => value !== undefined);
    if (set) throw new UsageError(`${set[0]} needs a draft source: -md or --spec-type ngram-simple|draft-mtp`);
  }
  if (o.draftPMin !== undefined && source !== "draft-simple" && source !== "draft-mtp") {
    throw new UsageError("--draft-p-min applies to a draft model's (-md) and MTP drafts only");
  }
  if (o.draftMin !== undefined && o.draftMin > (o.draftMax ?? DEFAULT_DRAFT_MAX)) {
    throw new UsageError("--draft-min must be at most --draft-max");
  }
}

function convert(flag: Flag, value: string | undefined, name: string): string | number | boolean {
  switch (flag.kind) {
    case "flag":
      if (value === undefined) return true;
      if (/^(1|true|on|enabled)$/i.test(value)) return true;
      if (/^(0|false|off|disabled)$/i.test(value)) return false;
      throw new UsageError(`${name} must be true or false, not ${JSON.stringify(value)}`);
    case "integer":
      if (!/^-?\d+$/.test(value!)) throw new UsageError(`${name} must be an integer, not ${JSON.stringify(value)}`);
      return Number(value);
    case "number":
      if (!Number.isFinite(Number(value)) || value!.trim() === "")
        throw new UsageError(`${name} must be a number, not ${JSON.stringify(value)}`);
      return Number(value);
    case "string":
      return value!;
  }
}

/**
 * A llama-server flag bloomery takes with no effect (its help says so); `check` refuses values that would ask for
 * something bloomery does not do.
 */
function noEffect(
  names: string[],
  kind: Kind,
  help: string,
  env?: string,
  check?: (value: string, name: string) => void,
): Flag {
  return { names, ...(env ? { env } : {}), kind, help, apply: (_o, v, name) => check?.(String(v), name) };
}

/** A llama-server flag that would change what bloomery cannot change: refused by name, with the reason. */
function refused(names: string[], kind: Kind, reason: string, env?: string): Flag {
  return {
    names,
    ...(env ? { env } : {}),
    kind,
    help: `refused: ${reason}`,
    apply: (_o, _v, name) => {
      throw new UsageError(`${name}: ${reason}`);
    },
  };
}

/** A comma-separated list of non-empty names. */
function readList(text: string, name: string): string[] {
  const items = text.split(",").map((item) => item.trim());
  if (items.some((item) => item === "")) throw new UsageError(`${name} ${JSON.stringify(text)} holds an empty name`);
  return items;
}

function readChoice<T extends string>(text: string, name: string, choices: readonly T[]): T {
  const choice = choices.find((c) => c === text);
  if (!choice) throw new UsageError(`${name} must be one of ${choices.join(", ")}, not ${JSON.stringify(text)}`);
  return choice;
}

function atMost(value: number, most: number, name: string): number {
  if (value > most) throw new UsageError(`${name} must be at most ${most}, not ${value}`);
  return value;
}

function atLeast(value: number, least: number, name: string): number {
  if (value < least) throw new UsageError(`${name} must be at least ${least}, not ${value}`);
  return value;
}

/**
 * Comma-separated API keys. An empty one is refused, never dropped: a server started with `--api-key ''`
 * would otherwise serve everyone, the opposite of what was asked.
 */
function readKeys(list: string, name: string): string[] {
  const keys = list.split(",").map((key) => key.trim());
  if (keys.some((key) => key === "")) {
    const what = list.trim() === "" ? "is empty" : `${JSON.stringify(list)} holds an empty API key`;
    throw new UsageError(`${name} ${what}: give the keys, or leave ${name} out to serve without one`);
  }
  return keys;
}

/** The keys of a key file, one a line, skipping blank lines and # comments as llama-server does; none is refused. */
function readKeyFile(path: string, name: string): string[] {
  let text: string;
  try {
    text = readFileSync(path, "utf8");
  } catch (error) {
    throw new UsageError(`${name} ${path}: ${(error as Error).message}`);
  }
  const keys = text
    .split(/\r?\n/)
    .map((key) => key.trim())
    .filter((key) => key !== "" && !key.startsWith("#"));
  if (keys.length === 0)
    throw new UsageError(
      `${name} ${path} holds no API key (only blank or # lines): give a file of keys, or leave ${name} out to serve without one`,
    );
  return keys;
}

function readFolder(path: string, name: string): string {
  let folder: boolean;
  try {
    folder = statSync(path).isDirectory();
  } catch (error) {
    throw new UsageError(`${name} ${path}: ${(error as Error).message}`);
  }
  if (!folder) throw new UsageError(`${name} ${path} is not a folder`);
  return path;
}

function readKwargs(text: string): Record<string, unknown> {
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch {
    value = undefined;
  }
  if (typeof value !== "object" || value === null || Array.isArray(value)) {
    throw new UsageError(`--chat-template-kwargs must be a JSON object, not ${JSON.stringify(text)}`);
  }
  return value as Record<string, unknown>;
}

function readReasoningFormat(text: string): ReasoningFormat {
  const format = REASONING_FORMATS.find((f) => f === text);
  if (!format)
    throw new UsageError(
      `--reasoning-format must be one of ${REASONING_FORMATS.join(", ")}, not ${JSON.stringify(text)}`,
    );
  return format;
}

function readResidency(text: string, name: string): "adaptive" | "static" {
  if (text === "adaptive" || text === "static") return text;
  throw new UsageError(`${name} must be adaptive or static, not ${JSON.stringify(text)}`);
}

function readTemplateFile(path: string): string {
  try {
    return readFileSync(path, "utf8");
  } catch (error) {
    throw new UsageError(`--chat-template-file ${path}: ${(error as Error).message}`);
  }
}

/** The --help text: every flag with its environment variable. */
export function usage(): string {
  const rows = FLAGS.map((f) => {
    const names = f.names.join(", ") + (f.kind === "flag" ? "" : f.kind === "string" ? " VALUE" : " N");
    return `  ${names.padEnd(24)} ${f.help}${f.env ? ` (env: ${f.env})` : ""}`;
  });
  return [
    "usage: bloomery-serve [options]",
    "",
    ...rows,
    "",
    "On SIGTERM or SIGINT the server takes no new requests and answers 503 to those waiting for a slot, gives the",
    `generations running ${DRAIN_SECONDS} s to end (a fixed drain deadline; then they are stopped: a 503, or an error`,
    "event on a stream), closes every connection left and exits; a second signal exits at once.",
    "",
  ].join("\n");
}
