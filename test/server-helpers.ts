// Starts bloomery-serve's app on the default model, on an ephemeral loopback port, or the built
// bloomery-serve as a child process.
import { spawn, type ChildProcess } from "node:child_process";
import type { FastifyInstance } from "fastify";
import { createApp, type ServerApp } from "../examples/server/app.js";
import type { ServerConfig, ServerContext } from "../examples/server/context.js";
import { Slots } from "../examples/server/slots.js";
import { loadModel, type Model } from "../src/index.js";
import { defaultModelPath } from "../tools/default-model.js";

export interface TestServer {
  app: FastifyInstance;
  context: ServerContext;
  model: Model;
  /** The app's drain (as on SIGTERM), with its deadline. */
  shutdown: ServerApp["shutdown"];
  url: string;
  close(): Promise<void>;
}

export async function startServer(
  options: {
    apiKeys?: string[];
    parallel?: number;
    temperature?: number;
    /** The model's threads (default 2). */
    threads?: number;
    modelPath?: string;
    chatTemplate?: string;
    config?: Pick<
      ServerConfig,
      | "reasoningFormat"
      | "chatTemplateKwargs"
      | "slotSavePath"
      | "slotsEndpoint"
      | "contextShift"
      | "embedding"
      | "pooling"
      | "reranking"
    >;
    contextSize?: number;
    /** The slots' -sps (default llama-server's 0.10). */
    slotPromptSimilarity?: number;
  } = {},
): Promise<TestServer> {
  const modelPath = options.modelPath ?? defaultModelPath();
  const model = await loadModel(modelPath, {
    gpu: false,
    threads: options.threads ?? 2,
    parallel: options.parallel ?? 2, // as bloomery-serve loads it: every slot in one pass
    ...(options.contextSize !== undefined ? { contextSize: options.contextSize } : {}),
    ...(options.chatTemplate !== undefined ? { chatTemplate: options.chatTemplate } : {}),
  });
  const { app, context, shutdown } = createApp({
    modelPath,
    alias: "tiny",
    apiKeys: options.apiKeys ?? [],
    metrics: true,
    temperature: options.temperature ?? 0.8,
    ...options.config,
  });
  context.serve(new Slots(model, options.parallel ?? 2, options.slotPromptSimilarity));
  const url = await app.listen({ host: "127.0.0.1", port: 0 });
  return {
    app,
    context,
    model,
    shutdown,
    url,
    async close() {
      await app.close();
      model.dispose();
    },
  };
}

/** What the SDK's greedy generate answers to a chat, for comparison with the server. */
export async function greedyChat(model: Model, question: string, maxTokens: number): Promise<string> {
  const prompt = model.applyChatTemplate([{ role: "user", content: question }]);
  const session = model.createSession();
  try {
    return (await session.generate(prompt, { maxTokens }).result).text;
  } finally {
    session.dispose();
  }
}

/** A fetch Response whose JSON is loosely typed: the assertions check its shape. */
// eslint-disable-next-line @typescript-eslint/no-explicit-any
export type JsonResponse = Omit<Response, "json"> & { json(): Promise<any> };

export function getUrl(url: string): Promise<JsonResponse> {
  return fetch(url);
}

export function postJson(url: string, body: unknown, headers: Record<string, string> = {}): Promise<JsonResponse> {
  return fetch(url, {
    method: "POST",
    headers: { "content-type": "application/json", ...headers },
    body: typeof body === "string" ? body : JSON.stringify(body),
  });
}

/** bloomery-serve (the built dist/serve-cli.js) running as a child process, its stderr collected. */
export interface ServeProcess {
  child: ChildProcess;
  stderr(): string;
  stdout(): string;
  /** Resolves with the server's address once it has loaded the model; rejects if it exits first. */
  loaded(): Promise<string>;
  /** The exit code (null when a signal ended it) and signal, and when it came. */
  exited: Promise<{ code: number | null; signal: NodeJS.Signals | null; at: number }>;
  /** Kills it (SIGKILL) if it still runs. */
  kill(): Promise<void>;
}

export function spawnServe(args: string[], env: NodeJS.ProcessEnv = {}): ServeProcess {
  // The tests' own LLAMA_* or HF_* variables would change the server's flags: only those given reach it.
  const inherited = Object.entries(process.env).filter(([key]) => !/^(LLAMA_|HF_)/.test(key));
  const child = spawn(process.execPath, ["dist/serve-cli.js", ...args], {
    stdio: ["ignore", "pipe", "pipe"],
    env: { ...Object.fromEntries(inherited), ...env },
  });
  let stderr = "";
  let stdout = "";
  child.stderr!.on("data", (d: Buffer) => (stderr += d.toString()));
  child.stdout!.on("data", (d: Buffer) => (stdout += d.toString()));
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null; at: number }>((resolve) =>
    child.once("exit", (code, signal) => resolve({ code, signal, at: performance.now() })),
  );
  return {
    child,
    stderr: () => stderr,
    stdout: () => stdout,
    exited,
    loaded: () =>
      new Promise((resolve, reject) => {
        const check = () => {
          const address = /listening on (http:\/\/\S+),/.exec(stderr)?.[1];
          if (address && stderr.includes("model loaded")) resolve(address);
        };
        child.stderr!.on("data", check);
        check();
        void exited.then(({ code }) => reject(new Error(`bloomery-serve exited with ${code}: ${stderr}`)));
      }),
    async kill() {
      if (child.exitCode === null && child.signalCode === null) {
        child.kill("SIGKILL");
        await exited;
      }
    },
  };
}

/** The server's exit, or undefined when it still runs after `ms`. */
export function exitWithin(server: ServeProcess, ms: number): Promise<Awaited<ServeProcess["exited"]> | undefined> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<undefined>((resolve) => (timer = setTimeout(() => resolve(undefined), ms)));
  return Promise.race([server.exited, late]).finally(() => clearTimeout(timer));
}
