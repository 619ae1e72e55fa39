// The fastify app: JSON bodies (strict UTF-8, whatever the content type, as llama-server reads
// them), the API key check, llama-server's error shapes, the routes of each API family, and the drain
// that shuts it down.
import { timingSafeEqual } from "node:crypto";
import type { Readable } from "node:stream";
import Fastify, { type FastifyInstance, type FastifyRequest } from "fastify";
import { BodyParser } from "./body.js";
import { HttpError, sendError } from "./errors.js";
import { ServerContext, type ServerConfig } from "./context.js";
import { registerCors } from "./cors.js";
import { drain, OpenRequests, type DrainReport } from "./drain.js";
import { registerInfo } from "./routes/info.js";
import { registerTokenize } from "./routes/tokenize.js";
import { registerOpenAiChat } from "./routes/openai-chat.js";
import { registerOpenAiCompletions } from "./routes/openai-completions.js";
import { registerLlamaNative } from "./routes/llama-native.js";
import { registerAnthropic } from "./routes/anthropic.js";
import { registerOpenAiResponses } from "./routes/openai-responses.js";
import { registerUnsupported } from "./routes/unsupported.js";
import { registerEmbeddings } from "./routes/embeddings.js";
import { registerSlots } from "./routes/slots.js";
import { registerWebui, WEBUI_PATHS } from "./routes/webui.js";
import { shuttingDown } from "./slots.js";

export interface AppOptions {
  /** Largest request body in bytes (default 8 MiB); larger ones get a 413. */
  bodyLimit?: number;
  /** Log requests through fastify's logger (pino) to stdout. */
  logger?: boolean;
  /**
   * Seconds a client may take to send its whole request, headers and body (llama-server's --timeout, its read
   * timeout; default 600); a slower one is answered 408 and disconnected. 0: no limit.
   */
  timeoutSeconds?: number;
  /** Serve the web page at / (default true; --no-ui / --no-webui turn it off, as llama-server's). */
  webui?: boolean;
}

/** Endpoints that answer without an API key, as llama-server's. */
const PUBLIC_PATHS = new Set(["/health", "/v1/health", "/models", "/v1/models"]);

export interface ServerApp {
  app: FastifyInstance;
  context: ServerContext;
  /** Drains and closes the server (see drain.ts), giving running generations `deadlineMs` to end. */
  shutdown(deadlineMs: number): Promise<DrainReport>;
}

export function createApp(config: ServerConfig, options: AppOptions = {}): ServerApp {
  // A blank key would let in every request that sends it, or none: refused however the caller got it.
  if (config.apiKeys.some((key) => key.trim() === "")) throw new Error("an API key is empty");
  const context = new ServerContext(config);
  const requestTimeout = (options.timeoutSeconds ?? 600) * 1000;
  const webui = options.webui ?? true;
  const bodyLimit = options.bodyLimit ?? 8 * 1024 * 1024;
  const app = Fastify({
    bodyLimit,
    logger: options.logger ?? false,
    // A shutdown answers new requests itself, in llama-server's error shape.
    return503OnClosing: false,
    requestTimeout,
    // Node checks the timeout every connectionsCheckingInterval (30 s by default): often enough for a short one
    // to be kept, and its headers timeout (60 s by default) may not exceed it.
    http: {
      headersTimeout: requestTimeout === 0 ? 60_000 : Math.min(60_000, requestTimeout),
      connectionsCheckingInterval: requestTimeout === 0 ? 30_000 : Math.min(30_000, Math.ceil(requestTimeout / 4)),
    },
  });

  // Bodies are JSON whatever their content type (curl -d sends form-urlencoded), and must be
  // valid UTF-8: a replacement character silently standing in for bad bytes would change the prompt.
  app.removeAllContentTypeParsers();
  const bodies = new BodyParser(bodyLimit);
  app.addContentTypeParser("*", (request: FastifyRequest, payload: Readable) => bodies.parse(request, payload));
  app.addHook("onClose", () => bodies.close());

  const requests = new OpenRequests();
  requests.register(app);
  registerCors(app, config.corsOrigins);
  app.addHook("onRequest", async (request, reply) => {
    if (context.stopping) {
      reply.header("connection", "close");
      throw shuttingDown("it takes no new requests");
    }
    const path = request.url.split("?")[0]!;
    // The page's files are public and load while the model does, as llama-server's.
    const page = webui && WEBUI_PATHS.has(path);
    if (config.apiKeys.length > 0 && !PUBLIC_PATHS.has(path) && !page && !hasKey(request, config.apiKeys)) {
      throw new HttpError(401, "Invalid API Key");
    }
    if (!context.loaded && path !== "/health" && path !== "/v1/health" && !page)
      throw new HttpError(503, "Loading model");
  });

  app.setErrorHandler((error, request, reply) => sendError(reply, error, request));
  app.setNotFoundHandler((_request, reply) => sendError(reply, new HttpError(404, "File Not Found")));

  registerInfo(app, context);
  registerTokenize(app, context);
  registerOpenAiChat(app, context);
  registerOpenAiCompletions(app, context);
  registerLlamaNative(app, context);
  registerAnthropic(app, context);
  registerOpenAiResponses(app, context);
  registerUnsupported(app);
  registerEmbeddings(app, context);
  registerSlots(app, context);
  if (webui) registerWebui(app, context);
  return { app, context, shutdown: (deadlineMs) => drain(app, context, requests, deadlineMs) };
}

/** The key from `Authorization: Bearer <key>` (OpenAI) or `x-api-key` (Anthropic). */
function hasKey(request: FastifyRequest, keys: string[]): boolean {
  const auth = request.headers.authorization;
  const given = auth?.startsWith("Bearer ") ? auth.slice(7) : request.headers["x-api-key"];
  if (typeof given !== "string") return false;
  const a = Buffer.from(given);
  return keys.some((key) => {
    const b = Buffer.from(key);
    return a.length === b.length && timingSafeEqual(a, b);
  });
}
