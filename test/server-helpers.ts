// Starts bloomery-serve's app on the default model, on an ephemeral loopback port.
import type { FastifyInstance } from "fastify";
import { createApp } from "../examples/server/app.js";
import type { ServerConfig } from "../examples/server/context.js";
import { Slots } from "../examples/server/slots.js";
import { loadModel, type Model } from "../src/index.js";
import { defaultModelPath } from "../tools/default-model.js";

export interface TestServer {
  app: FastifyInstance;
  model: Model;
  url: string;
  close(): Promise<void>;
}

export async function startServer(
  options: {
    apiKeys?: string[];
    parallel?: number;
    temperature?: number;
    modelPath?: string;
    chatTemplate?: string;
    config?: Pick<ServerConfig, "reasoningFormat" | "chatTemplateKwargs" | "slotSavePath" | "slotsEndpoint">;
  } = {},
): Promise<TestServer> {
  const modelPath = options.modelPath ?? defaultModelPath();
  const model = await loadModel(modelPath, {
    gpu: false,
    threads: 2,
    parallel: options.parallel ?? 2, // as bloomery-serve loads it: every slot in one pass
    ...(options.chatTemplate !== undefined ? { chatTemplate: options.chatTemplate } : {}),
  });
  const { app, context } = createApp({
    modelPath,
    alias: "tiny",
    apiKeys: options.apiKeys ?? [],
    metrics: true,
    temperature: options.temperature ?? 0.8,
    ...options.config,
  });
  context.serve(new Slots(model, options.parallel ?? 2));
  const url = await app.listen({ host: "127.0.0.1", port: 0 });
  return {
    app,
    model,
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
