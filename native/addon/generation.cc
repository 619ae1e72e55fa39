// The generation bindings: sessionGenerate(session, prompt, sampler, maxTokens, listener) hands a
// generation to the model's scheduler thread, which delivers each drawn token to `listener` on
// the JS thread as it comes; generationCancel(generation, keptTokens) ends it at once. Stop
// strings, abort signals and iteration stay in src/session.ts.
#include <memory>
#include <string>
#include <vector>

#include "addon/bindings.h"
#include "addon/errors.h"
#include "addon/js_thread.h"
#include "engine/scheduler.h"
#include "engine/session.h"

namespace bloomery::addon {

namespace {

constexpr napi_type_tag kGenerationTag{0x6c6f6f6d67656e65, 0x0000000000000004};

struct GenerationHandle {
  std::shared_ptr<engine::Session> session;
  std::shared_ptr<engine::Request> request;
};

Napi::Object timings_object(Napi::Env env, const engine::GenerationTimings& t) {
  Napi::Object o = Napi::Object::New(env);
  o.Set("promptTokens", double(t.prompt_tokens));
  o.Set("cachedPromptTokens", double(t.cached_prompt_tokens));
  o.Set("promptCacheHit", t.prompt_cache_hit);
  o.Set("promptMs", t.prompt_ms);
  o.Set("decodeTokens", double(t.decode_tokens));
  o.Set("decodeMs", t.decode_ms);
  o.Set("discardedTokens", double(t.discarded_tokens));
  o.Set("draftTokens", double(t.draft_tokens));
  o.Set("draftAccepted", double(t.draft_accepted));
  return o;
}

Napi::Object token_logprob(Napi::Env env, const engine::TokenLogprob& t) {
  Napi::Object o = Napi::Object::New(env);
  o.Set("token", t.token);
  o.Set("logprob", t.logprob);
  return o;
}

// { token, logprob, top: [{ token, logprob }] }: a drawn token's log-probability and the most likely tokens.
Napi::Object logprobs_object(Napi::Env env, const engine::DrawLogprobs& draw) {
  Napi::Object o = token_logprob(env, draw.drawn);
  Napi::Array top = Napi::Array::New(env, draw.top.size());
  for (size_t i = 0; i < draw.top.size(); ++i) top.Set(static_cast<uint32_t>(i), token_logprob(env, draw.top[i]));
  o.Set("top", top);
  return o;
}

// A non-negative integer field of the draft options; `fallback` when absent.
int32_t draft_integer(Napi::Object o, const char* name, int32_t fallback) {
  const Napi::Value v = o.Get(name);
  if (v.IsUndefined()) return fallback;
  const double d = v.IsNumber() ? v.As<Napi::Number>().DoubleValue() : -1;
  if (!(d >= 0 && d <= 2147483647.0) || d != static_cast<double>(static_cast<int32_t>(d))) {
    throw to_js_error(o.Env(), "INVALID_ARGUMENT", std::string("draft.") + name + " must be a non-negative integer");
  }
  return static_cast<int32_t>(d);
}

// { source: "ngram" | "model" | "mtp", max?, min?, pMin?, adaptive?, ngramMax?, ngramMin? } (engine::DraftOptions; the
// ranges are checked by Scheduler::generate); undefined: no drafts.
engine::DraftOptions draft_options(Napi::Value value) {
  engine::DraftOptions d;
  if (value.IsUndefined()) return d;
  if (!value.IsObject()) throw to_js_error(value.Env(), "INVALID_ARGUMENT", "draft must be an object");
  const Napi::Object o = value.As<Napi::Object>();
  const Napi::Value source = o.Get("source");
  const std::string name = source.IsString() ? source.As<Napi::String>().Utf8Value() : "";
  if (name == "ngram") {
    d.source = engine::DraftSource::kNgram;
  } else if (name == "model") {
    d.source = engine::DraftSource::kModel;
  } else if (name == "mtp") {
    d.source = engine::DraftSource::kMtp;
  } else {
    throw to_js_error(value.Env(), "INVALID_ARGUMENT", "draft.source must be \"ngram\", \"model\" or \"mtp\"");
  }
  d.max = draft_integer(o, "max", d.max);
  d.min = draft_integer(o, "min", d.min);
  d.ngram_max = draft_integer(o, "ngramMax", d.ngram_max);
  d.ngram_min = draft_integer(o, "ngramMin", d.ngram_min);
  const Napi::Value p_min = o.Get("pMin");
  if (!p_min.IsUndefined()) {
    if (!p_min.IsNumber()) throw to_js_error(value.Env(), "INVALID_ARGUMENT", "draft.pMin must be a number");
    d.p_min = p_min.As<Napi::Number>().FloatValue();
  }
  const Napi::Value adaptive = o.Get("adaptive");
  if (!adaptive.IsUndefined()) {
    if (!adaptive.IsBoolean()) throw to_js_error(value.Env(), "INVALID_ARGUMENT", "draft.adaptive must be a boolean");
    d.adaptive = adaptive.As<Napi::Boolean>().Value();
  }
  return d;
}

// sessionGenerate(session, prompt: Int32Array, sampler, maxTokens: number, listener, shiftKeep?: number, draft?)
// -> generation handle. The prompt replaces the session's context (what the context or the prompt-state
// cache holds of it is kept: Scheduler::generate). shiftKeep (default -1: no shift): a full context
// is shifted, keeping its first shiftKeep tokens (GenerationLimits). listener({ token, logprobs?, timings }) for each
// token (logprobs when the sampler was made with them), then listener({ end, timings, error? }) once: end is "eos",
// "maxTokens", "contextFull" or "abort". draft: see draft_options. reusePrefix (default true): false evaluates
// the whole prompt (GenerationLimits::reuse_prefix).
Napi::Value session_generate(const Napi::CallbackInfo& info) {
  return guarded(info, [&]() -> Napi::Value {
    Napi::Env env = info.Env();
    std::shared_ptr<engine::Session> session = session_argument(info, 0);
    if (info.Length() < 2 || !info[1].IsTypedArray() ||
        info[1].As<Napi::TypedArray>().TypedArrayType() != napi_int32_array) {
      throw to_js_error(env, "INVALID_ARGUMENT", "prompt must be an Int32Array");
    }
    const Napi::Int32Array prompt = info[1].As<Napi::Int32Array>();
    std::shared_ptr<engine::Sampler> sampler = sampler_argument(info, 2);
    if (info.Length() < 4 || !info[3].IsNumber() || info[3].As<Napi::Number>().DoubleValue() < 0 ||
        info[3].As<Napi::Number>().DoubleValue() != double(info[3].As<Napi::Number>().Int64Value())) {
      throw to_js_error(env, "INVALID_ARGUMENT", "maxTokens must be a non-negative integer");
    }
    if (info.Length() < 5 || !info[4].IsFunction()) {
      throw to_js_error(env, "INVALID_ARGUMENT", "listener must be a function");
    }
    engine::GenerationLimits limits;
    limits.max_tokens = info[3].As<Napi::Number>().Int64Value();
    if (info.Length() > 5 && !info[5].IsUndefined()) {
      if (!info[5].IsNumber() || info[5].As<Napi::Number>().DoubleValue() < -1 ||
          info[5].As<Napi::Number>().DoubleValue() != double(info[5].As<Napi::Number>().Int64Value())) {
        throw to_js_error(env, "INVALID_ARGUMENT", "shiftKeep must be an integer of at least -1");
      }
      limits.shift_keep = info[5].As<Napi::Number>().Int64Value();
    }
    const engine::DraftOptions draft = draft_options(info.Length() > 6 ? info[6] : env.Undefined());
    if (info.Length() > 7 && !info[7].IsUndefined()) {
      if (!info[7].IsBoolean()) throw to_js_error(env, "INVALID_ARGUMENT", "reusePrefix must be a boolean");
      limits.reuse_prefix = info[7].As<Napi::Boolean>().Value();
    }
    auto js = std::make_shared<JsThread>(env, "bloomery.generate", info[4].As<Napi::Function>());

    engine::RequestEvents events;
    events.on_token = [js](const engine::DrawnToken& drawn, const engine::GenerationTimings& timings) {
      js->post([drawn, timings](Napi::Env env, Napi::Function listener) {
        Napi::Object event = Napi::Object::New(env);
        event.Set("token", drawn.token);
        if (drawn.logprobs) event.Set("logprobs", logprobs_object(env, *drawn.logprobs));
        event.Set("timings", timings_object(env, timings));
        listener.Call({event});
      });
    };
    events.on_end = [js](engine::RequestEnd end) {
      js->post([end = std::move(end)](Napi::Env env, Napi::Function listener) {
        Napi::Object event = Napi::Object::New(env);
        event.Set("end", std::string(engine::stop_reason_name(end.reason)));
        event.Set("timings", timings_object(env, end.timings));
        if (end.error) event.Set("error", to_js_error(env, end.error).Value());
        listener.Call({event});
      });
      js->close();
    };

    engine::Scheduler& scheduler = session->runtime().scheduler();
    std::shared_ptr<engine::Request> request;
    try {
      request = scheduler.generate(session, std::vector<int32_t>(prompt.Data(), prompt.Data() + prompt.ElementLength()),
                                   std::move(sampler), limits, std::move(events), draft);
    } catch (...) {
      js->close();
      throw;
    }
    auto external =
        Napi::External<GenerationHandle>::New(env, new GenerationHandle{std::move(session), std::move(request)},
                                              [](Napi::Env, GenerationHandle* h) { delete h; });
    external.TypeTag(&kGenerationTag);
    return external;
  });
}

// generationCancel(generation, keptTokens: number): ends the generation before its next pass; the
// session keeps the prompt and keptTokens - 1 of the tokens drawn (nothing of it for 0). The
// listener still gets its end event ("abort"). Cancelling an ended generation does nothing.
Napi::Value generation_cancel(const Napi::CallbackInfo& info) {
  return guarded(info, [&]() -> Napi::Value {
    if (info.Length() < 1 || !info[0].IsExternal() ||
        !info[0].As<Napi::External<GenerationHandle>>().CheckTypeTag(&kGenerationTag)) {
      throw to_js_error(info.Env(), "INVALID_ARGUMENT", "expected a generation handle");
    }
    if (info.Length() < 2 || !info[1].IsNumber() || info[1].As<Napi::Number>().Int64Value() < 0) {
      throw to_js_error(info.Env(), "INVALID_ARGUMENT", "keptTokens must be a non-negative integer");
    }
    GenerationHandle& h = *info[0].As<Napi::External<GenerationHandle>>().Data();
    h.session->runtime().scheduler().cancel(*h.request, info[1].As<Napi::Number>().Int64Value());
    return info.Env().Undefined();
  });
}

}  // namespace

void register_generation(Napi::Env env, Napi::Object exports) {
  exports.Set("sessionGenerate", Napi::Function::New(env, session_generate, "sessionGenerate"));
  exports.Set("generationCancel", Napi::Function::New(env, generation_cancel, "generationCancel"));
}

}  // namespace bloomery::addon
