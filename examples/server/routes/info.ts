// GET /health, /v1/models (and /models), /props and /metrics.
import type { FastifyInstance } from "fastify";
import type { ServerContext } from "../context.js";
import { HttpError } from "../errors.js";
import { headerAsSpelled, unixSeconds } from "../responses.js";

export function registerInfo(app: FastifyInstance, context: ServerContext): void {
  const created = unixSeconds();

  for (const path of ["/health", "/v1/health"]) {
    app.get(path, async () => {
      if (!context.loaded) throw new HttpError(503, "Loading model");
      return { status: "ok" };
    });
  }

  for (const path of ["/models", "/v1/models"]) {
    app.get(path, async () => {
      const info = context.model.info;
      return {
        object: "list",
        data: [
          {
            id: context.modelId,
            aliases: context.config.aliases ?? [context.modelId],
            tags: context.config.tags ?? [],
            object: "model",
            created,
            owned_by: "llamacpp",
            meta: {
              n_vocab: info.vocabSize,
              n_ctx_train: info.contextLength,
              n_embd: info.embeddingLength,
              size: info.bytes,
            },
          },
        ],
      };
    });
  }

  app.get("/props", async () => {
    const { model, slots } = context;
    const special = (token: number) => (token < 0 ? "" : model.detokenize([token], { special: true }));
    return {
      default_generation_settings: {
        n_ctx: model.info.contextSize,
        params: {
          n_predict: context.config.nPredict ?? -1,
          seed: context.config.seed ?? 0xffffffff,
          temperature: context.config.temperature,
          top_k: 40,
          top_p: 0.95,
          min_p: 0.05,
        },
      },
      total_slots: slots.count,
      model_alias: context.modelName,
      model_path: context.config.modelPath,
      chat_template: model.info.chatTemplate ?? "",
      bos_token: special(model.info.bosToken),
      eos_token: special(model.info.eosToken),
      modalities: { vision: false, audio: false },
      build_info: "bloomery",
    };
  });

  app.get("/metrics", async (_request, reply) => {
    if (!context.config.metrics) {
      throw new HttpError(501, "This server does not support metrics endpoint. Start it with `--metrics`");
    }
    const { metrics: m, busy } = context.slots;
    const draft = context.model.stats();
    const rate = (tokens: number, seconds: number) => (seconds > 0 ? tokens / seconds : 0);
    const lines: [string, "counter" | "gauge", string, number][] = [
      ["prompt_tokens_total", "counter", "Number of prompt tokens processed.", m.promptTokens],
      [
        "prompt_tokens_cached_total",
        "counter",
        "Number of prompt tokens reused from a slot's context or the prompt cache.",
        m.promptTokensCached,
      ],
      ["prompt_seconds_total", "counter", "Prompt process time", m.promptSeconds],
      ["tokens_predicted_total", "counter", "Number of generation tokens processed.", m.predictedTokens],
      ["tokens_predicted_seconds_total", "counter", "Predict process time", m.predictedSeconds],
      ["n_decode_total", "counter", "Total number of llama_decode() calls", m.decodes],
      ["n_tokens_max", "counter", "Largest context, in tokens, a request used.", m.tokensMax],
      ["spec_decode_num_draft_tokens_total", "counter", "Speculative: Total draft tokens generated", draft.draftTokens],
      [
        "spec_decode_num_accepted_tokens_total",
        "counter",
        "Speculative: Total draft tokens accepted by the target model",
        draft.draftAccepted,
      ],
      [
        "spec_decode_num_drafts_total",
        "counter",
        "Speculative: Total speculative decoding verification steps",
        draft.draftPasses,
      ],
      [
        "n_busy_slots_per_decode",
        "gauge",
        "Average number of busy slots per llama_decode() call",
        m.decodes ? m.busySlotsSum / m.decodes : 0,
      ],
      [
        "prompt_tokens_seconds",
        "gauge",
        "Average prompt throughput in tokens/s.",
        rate(m.promptTokens, m.promptSeconds),
      ],
      [
        "predicted_tokens_seconds",
        "gauge",
        "Average generation throughput in tokens/s.",
        rate(m.predictedTokens, m.predictedSeconds),
      ],
      ["requests_processing", "gauge", "Number of requests processing.", busy],
      ["requests_deferred", "gauge", "Number of requests deferred.", m.requestsDeferred],
    ];
    const text = lines
      .map(
        ([name, type, help, value]) =>
          `# HELP llamacpp:${name} ${help}\n# TYPE llamacpp:${name} ${type}\nllamacpp:${name} ${value}\n`,
      )
      .join("");
    headerAsSpelled(reply, "Process-Start-Time-Unix", String(created));
    return reply.type("text/plain; version=0.0.4").send(text);
  });
}
