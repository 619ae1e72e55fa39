// The sampling bindings: createSampler(options) makes a sampler for one generation, which
// sessionGenerate (generation.cc) hands to the scheduler thread, so the vocabulary-sized
// logits row never crosses into JavaScript.
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "addon/async.h"
#include "addon/bindings.h"
#include "addon/errors.h"
#include "base/low_priority.h"
#include "engine/sampler.h"
#include "tokenizer/tokenizer.h"

namespace bloomery::addon {

namespace {

constexpr napi_type_tag kSamplerTag{0x6c6f6f6d73616d70, 0x0000000000000003};

struct SamplerHandle {
  std::shared_ptr<engine::Sampler> sampler;
};

SamplerHandle& unwrap_sampler(const Napi::CallbackInfo& info, size_t index) {
  if (info.Length() <= index || !info[index].IsExternal() ||
      !info[index].As<Napi::External<SamplerHandle>>().CheckTypeTag(&kSamplerTag)) {
    throw to_js_error(info.Env(), "INVALID_ARGUMENT", "expected a sampler handle");
  }
  return *info[index].As<Napi::External<SamplerHandle>>().Data();
}

// Reads the option `name` into `slot`: false when it is left out, INVALID_ARGUMENT unless a number.
bool number_option(const Napi::Object& options, const char* name, Napi::Value& slot) {
  slot = options.Get(name);
  if (slot.IsUndefined()) return false;
  if (!slot.IsNumber()) throw to_js_error(options.Env(), "INVALID_ARGUMENT", std::string(name) + " must be a number");
  return true;
}

void read_float(const Napi::Object& options, const char* name, float& out) {
  Napi::Value slot;
  if (number_option(options, name, slot)) out = slot.As<Napi::Number>().FloatValue();
}

void read_int(const Napi::Object& options, const char* name, int32_t& out) {
  Napi::Value slot;
  if (!number_option(options, name, slot)) return;
  const double v = slot.As<Napi::Number>().DoubleValue();
  if (v != static_cast<double>(static_cast<int32_t>(v))) {
    throw to_js_error(options.Env(), "INVALID_ARGUMENT", std::string(name) + " must be an integer");
  }
  out = static_cast<int32_t>(v);
}

uint64_t read_seed(const Napi::Object& options) {
  Napi::Value slot;
  if (!number_option(options, "seed", slot)) {
    // No seed: a fresh one from the OS, so unseeded generations differ from run to run.
    std::random_device device;
    return (static_cast<uint64_t>(device()) << 32) ^ device();
  }
  const double v = slot.As<Napi::Number>().DoubleValue();
  if (!(v >= 0 && v <= 9007199254740991.0) || v != static_cast<double>(static_cast<uint64_t>(v))) {
    throw to_js_error(options.Env(), "INVALID_ARGUMENT", "seed must be an integer from 0 to 2^53 - 1");
  }
  return static_cast<uint64_t>(v);
}

std::vector<std::pair<int32_t, float>> read_bias(const Napi::Object& options) {
  const Napi::Value tokens = options.Get("biasTokens");
  const Napi::Value values = options.Get("biasValues");
  if (tokens.IsUndefined() && values.IsUndefined()) return {};
  if (!tokens.IsTypedArray() || tokens.As<Napi::TypedArray>().TypedArrayType() != napi_int32_array ||
      !values.IsTypedArray() || values.As<Napi::TypedArray>().TypedArrayType() != napi_float32_array ||
      tokens.As<Napi::Int32Array>().ElementLength() != values.As<Napi::Float32Array>().ElementLength()) {
    throw to_js_error(options.Env(), "INVALID_ARGUMENT",
                      "logitBias must come as biasTokens (Int32Array) and biasValues (Float32Array) of one length");
  }
  const Napi::Int32Array t = tokens.As<Napi::Int32Array>();
  const Napi::Float32Array b = values.As<Napi::Float32Array>();
  std::vector<std::pair<int32_t, float>> bias;
  for (size_t i = 0; i < t.ElementLength(); ++i) bias.emplace_back(t[i], b[i]);
  return bias;
}

// The settings and tokenizer of createSampler's arguments; left-out settings take
// engine::SamplerParams' defaults.
struct SamplerArguments {
  engine::SamplerParams params;
  std::shared_ptr<const tokenizer::Tokenizer> tokenizer;
};

SamplerArguments read_sampler_arguments(const Napi::CallbackInfo& info) {
  if (info.Length() < 1 || !info[0].IsObject()) {
    throw to_js_error(info.Env(), "INVALID_ARGUMENT", "createSampler(options): options must be an object");
  }
  const Napi::Object o = info[0].As<Napi::Object>();
  SamplerArguments out;
  engine::SamplerParams& params = out.params;
  read_float(o, "temperature", params.temperature);
  read_int(o, "topK", params.top_k);
  read_float(o, "topP", params.top_p);
  read_float(o, "minP", params.min_p);
  read_float(o, "repeatPenalty", params.repeat_penalty);
  read_int(o, "repeatLastN", params.repeat_last_n);
  read_float(o, "presencePenalty", params.presence_penalty);
  read_float(o, "frequencyPenalty", params.frequency_penalty);
  params.seed = read_seed(o);
  params.logit_bias = read_bias(o);
  read_int(o, "logprobs", params.logprobs);
  const Napi::Value after = o.Get("logprobsAfterSampling");
  if (!after.IsUndefined()) {
    if (!after.IsBoolean())
      throw to_js_error(info.Env(), "INVALID_ARGUMENT", "logprobsAfterSampling must be a boolean");
    params.logprobs_after_sampling = after.As<Napi::Boolean>().Value();
  }
  const Napi::Value grammar = o.Get("grammar");
  if (!grammar.IsUndefined()) {
    if (!grammar.IsString()) throw to_js_error(info.Env(), "INVALID_ARGUMENT", "grammar must be a string");
    params.grammar = grammar.As<Napi::String>().Utf8Value();
  }
  const Napi::Value triggers = o.Get("grammarTriggers");
  if (!triggers.IsUndefined()) {
    if (!triggers.IsArray()) throw to_js_error(info.Env(), "INVALID_ARGUMENT", "grammarTriggers must be an array");
    const Napi::Array list = triggers.As<Napi::Array>();
    for (uint32_t i = 0; i < list.Length(); ++i) {
      const Napi::Value trigger = list.Get(i);
      if (!trigger.IsString()) {
        throw to_js_error(info.Env(), "INVALID_ARGUMENT", "grammarTriggers must hold strings");
      }
      params.grammar_triggers.push_back(trigger.As<Napi::String>().Utf8Value());
    }
  }
  if (info.Length() > 1 && !info[1].IsUndefined()) {
    out.tokenizer = tokenizer_argument(info[1], "createSampler's tokenizer");
  }
  return out;
}

Napi::Value sampler_handle(Napi::Env env, std::shared_ptr<engine::Sampler> sampler) {
  auto external = Napi::External<SamplerHandle>::New(env, new SamplerHandle{std::move(sampler)},
                                                     [](Napi::Env, SamplerHandle* h) { delete h; });
  external.TypeTag(&kSamplerTag);
  return external;
}

// createSampler({ temperature?, topK?, topP?, minP?, repeatPenalty?, repeatLastN?, presencePenalty?,
// frequencyPenalty?, seed?, biasTokens?, biasValues?, grammar?, grammarTriggers?, logprobs?, logprobsAfterSampling? },
// tokenizer?) -> sampler
// handle. A grammar needs the model's NativeTokenizer. With logprobs, each token a generation
// delivers carries its log-probabilities (generation.cc).
Napi::Value create_sampler(const Napi::CallbackInfo& info) {
  return guarded(info, [&]() -> Napi::Value {
    SamplerArguments a = read_sampler_arguments(info);
    return sampler_handle(info.Env(), std::make_shared<engine::Sampler>(std::move(a.params), std::move(a.tokenizer)));
  });
}

// createSamplerAsync(options, tokenizer?) -> Promise<sampler handle>: the settings are checked
// at once (INVALID_ARGUMENT is thrown, not a rejection), the grammar is parsed on a worker thread
// at low priority (up to a megabyte of it: kGrammarLimits), whose GRAMMAR_* errors reject the promise.
Napi::Value create_sampler_async(const Napi::CallbackInfo& info) {
  return guarded(info, [&]() -> Napi::Value {
    SamplerArguments a = read_sampler_arguments(info);
    engine::validate(a.params);
    return run_async(
        info.Env(),
        [a = std::move(a)]() mutable {
          return at_low_priority([&] { return std::make_shared<engine::Sampler>(std::move(a.params), a.tokenizer); });
        },
        [](Napi::Env env, const std::shared_ptr<engine::Sampler>& sampler) { return sampler_handle(env, sampler); });
  });
}

// disposeSampler(sampler): frees its buffers now rather than at garbage collection; a running
// generation keeps them until it ends.
Napi::Value dispose_sampler(const Napi::CallbackInfo& info) {
  return guarded(info, [&]() -> Napi::Value {
    unwrap_sampler(info, 0).sampler.reset();
    return info.Env().Undefined();
  });
}

}  // namespace

std::shared_ptr<engine::Sampler> sampler_argument(const Napi::CallbackInfo& info, size_t index) {
  std::shared_ptr<engine::Sampler> sampler = unwrap_sampler(info, index).sampler;
  if (!sampler) throw to_js_error(info.Env(), "DISPOSED", "the sampler has been disposed");
  return sampler;
}

void register_sampling(Napi::Env env, Napi::Object exports) {
  exports.Set("createSampler", Napi::Function::New(env, create_sampler, "createSampler"));
  exports.Set("createSamplerAsync", Napi::Function::New(env, create_sampler_async, "createSamplerAsync"));
  exports.Set("disposeSampler", Napi::Function::New(env, dispose_sampler, "disposeSampler"));
}

}  // namespace bloomery::addon
