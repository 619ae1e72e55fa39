// The model and session bindings: loadModel(path, options) resolves to a model handle;
// sessions are created from it; evaluate hands its tokens to the model's scheduler thread and
// resolves once a pass has run them. Handles are type-tagged externals that own shared
// pointers, so a session keeps its model's weights alive, and a dispose() while a pass runs
// waits for nothing.
#include "model/model.h"

#include <algorithm>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "addon/async.h"
#include "addon/bindings.h"
#include "addon/errors.h"
#include "addon/js_thread.h"
#include "engine/pooling.h"
#include "engine/scheduler.h"
#include "engine/session.h"

namespace bloomery::addon {

namespace {

constexpr napi_type_tag kModelTag{0x6c6f6f6d6d6f6465, 0x0000000000000001};
constexpr napi_type_tag kSessionTag{0x6c6f6f6d73657373, 0x0000000000000002};

struct ModelHandle {
  std::shared_ptr<engine::Runtime> runtime;
};

struct SessionHandle {
  std::shared_ptr<engine::Session> session;
};

template <typename Handle>
Handle& unwrap(const Napi::CallbackInfo& info, size_t index, const napi_type_tag& tag, const char* what) {
  if (info.Length() <= index || !info[index].IsExternal() ||
      !info[index].As<Napi::External<Handle>>().CheckTypeTag(&tag)) {
    throw to_js_error(info.Env(), "INVALID_ARGUMENT", std::string("expected a ") + what + " handle");
  }
  return *info[index].As<Napi::External<Handle>>().Data();
}

template <typename Handle>
Napi::External<Handle> wrap(Napi::Env env, Handle handle, const napi_type_tag& tag) {
  auto external =
      Napi::External<Handle>::New(env, new Handle(std::move(handle)), [](Napi::Env, Handle* h) { delete h; });
  external.TypeTag(&tag);
  return external;
}

engine::Runtime& live(ModelHandle& h, Napi::Env env) {
  if (!h.runtime) throw to_js_error(env, "DISPOSED", "the model has been disposed");
  return *h.runtime;
}

std::shared_ptr<engine::Session> live(SessionHandle& h, Napi::Env env) {
  if (!h.session) throw to_js_error(env, "DISPOSED", "the session has been disposed");
  return h.session;
}

// A positive integer option of at most 2^31 - 1 (every one is stored in 32 bits somewhere); 0 when absent.
int64_t option_integer(Napi::Object options, const char* name) {
  const Napi::Value v = options.Get(name);
  if (v.IsUndefined()) return 0;
  const double d = v.IsNumber() ? v.As<Napi::Number>().DoubleValue() : 0;
  if (!(d >= 1 && d <= 2147483647.0) || d != static_cast<double>(static_cast<int64_t>(d))) {
    throw to_js_error(options.Env(), "INVALID_ARGUMENT", std::string(name) + " must be a positive integer");
  }
  return static_cast<int64_t>(d);
}

// experts: one array of expert ids per layer (src/model.ts takes them from the offload plan).
std::vector<std::vector<int32_t>> expert_lists(Napi::Value value, const char* what) {
  const auto refuse = [&] {
    return to_js_error(value.Env(), "INVALID_ARGUMENT",
                       std::string(what) + " must be an array of arrays of expert ids");
  };
  if (!value.IsArray()) throw refuse();
  const Napi::Array layers = value.As<Napi::Array>();
  std::vector<std::vector<int32_t>> experts(layers.Length());
  for (uint32_t l = 0; l < layers.Length(); ++l) {
    const Napi::Value layer = layers.Get(l);
    if (!layer.IsArray()) throw refuse();
    const Napi::Array ids = layer.As<Napi::Array>();
    for (uint32_t i = 0; i < ids.Length(); ++i) {
      const Napi::Value id = ids.Get(i);
      if (!id.IsNumber() || id.As<Napi::Number>().DoubleValue() != id.As<Napi::Number>().Int32Value()) throw refuse();
      experts[l].push_back(id.As<Napi::Number>().Int32Value());
    }
  }
  return experts;
}

// gpu: { device?, budget?, experts? } (src/model.ts resolves "auto", budget strings and the plan to this).
engine::GpuOptions gpu_options(Napi::Object gpu) {
  engine::GpuOptions g;
  const Napi::Value device = gpu.Get("device");
  if (!device.IsUndefined()) {
    if (!device.IsNumber() || device.As<Napi::Number>().Int32Value() < 0 ||
        device.As<Napi::Number>().DoubleValue() != device.As<Napi::Number>().Int32Value()) {
      throw to_js_error(gpu.Env(), "INVALID_ARGUMENT", "gpu.device must be a non-negative integer");
    }
    g.device = device.As<Napi::Number>().Int32Value();
  }
  const Napi::Value budget = gpu.Get("budget");
  if (!budget.IsUndefined()) {
    if (!budget.IsNumber() || !(budget.As<Napi::Number>().DoubleValue() >= 1)) {
      throw to_js_error(gpu.Env(), "INVALID_ARGUMENT", "gpu.budget must be a positive number of bytes");
    }
    g.budget = static_cast<uint64_t>(budget.As<Napi::Number>().DoubleValue());
  }
  if (!gpu.Get("experts").IsUndefined()) g.gpu_experts = expert_lists(gpu.Get("experts"), "gpu.experts");
  return g;
}

// disk: { experts, arenaBytes } (src/model.ts takes them from the offload plan).
engine::DiskTierOptions disk_options(Napi::Object disk) {
  engine::DiskTierOptions d;
  d.experts = expert_lists(disk.Get("experts"), "disk.experts");
  const Napi::Value bytes = disk.Get("arenaBytes");
  if (!bytes.IsNumber() || !(bytes.As<Napi::Number>().DoubleValue() >= 0)) {
    throw to_js_error(disk.Env(), "INVALID_ARGUMENT", "disk.arenaBytes must be a non-negative number of bytes");
  }
  d.arena_bytes = static_cast<uint64_t>(bytes.As<Napi::Number>().DoubleValue());
  return d;
}

// The planner's footprint object (src/plan.ts ModelFootprint).
Napi::Object footprint_object(Napi::Env env, const engine::GpuFootprint& f, uint64_t arena_slot_bytes) {
  Napi::Object o = Napi::Object::New(env);
  o.Set("contextSize", double(f.context_size));
  o.Set("experts", double(f.experts));
  o.Set("denseBytes", double(f.dense_bytes));
  Napi::Array experts = Napi::Array::New(env, f.expert_bytes.size());
  for (size_t l = 0; l < f.expert_bytes.size(); ++l) experts.Set(uint32_t(l), double(f.expert_bytes[l]));
  o.Set("expertBytes", experts);
  o.Set("kvBytes", double(f.kv_bytes));
  o.Set("workspaceBytes", double(f.workspace_bytes));
  o.Set("streamBytes", double(f.stream_bytes));
  o.Set("reserveBytes", double(f.reserve_bytes));
  o.Set("arenaSlotBytes", double(arena_slot_bytes));
  Napi::Array gaps = Napi::Array::New(env, f.kernel_gaps.size());
  for (size_t i = 0; i < f.kernel_gaps.size(); ++i) {
    const engine::GpuKernelGap& g = f.kernel_gaps[i];
    Napi::Object gap = Napi::Object::New(env);
    gap.Set("tensor", g.tensor);
    gap.Set("reason", g.reason);
    gap.Set("expertLayer",
            g.expert_layer >= 0 ? Napi::Value(Napi::Number::New(env, double(g.expert_layer))) : env.Null());
    gaps.Set(uint32_t(i), gap);
  }
  o.Set("kernelGaps", gaps);
  return o;
}

// The body of hostFootprint and gpuFootprint: (path, contextSize) checked, the model loaded off
// the JavaScript thread, footprint(model, context size) made into an object with the disk
// tier's slot size (contextSize 0 takes the runtime's default).
template <typename Footprint>
Napi::Value footprint_call(const Napi::CallbackInfo& info, const char* usage, Footprint footprint) {
  return guarded(info, [&]() -> Napi::Value {
    if (info.Length() < 2 || !info[0].IsString() || !info[1].IsNumber()) {
      throw to_js_error(info.Env(), "INVALID_ARGUMENT", usage);
    }
    return run_async(
        info.Env(),
        [path = info[0].As<Napi::String>().Utf8Value(), requested = info[1].As<Napi::Number>().Int64Value(),
         footprint] {
          const std::unique_ptr<model::Model> model = model::load_model(path);
          return std::pair{footprint(*model, engine::resolve_context_size(model->params, requested)),
                           engine::arena_slot_bytes(*model)};
        },
        [](Napi::Env env, const std::pair<engine::GpuFootprint, uint64_t>& r) -> Napi::Value {
          return footprint_object(env, r.first, r.second);
        });
  });
}

// hostFootprint(path, contextSize) -> Promise<the footprint of a model on the CPU: its routed
// experts' bytes and the disk tier's slot size; every device term 0, no kernel gaps> (any build).
Napi::Value host_footprint(const Napi::CallbackInfo& info) {
  return footprint_call(info, "hostFootprint(path, contextSize)", [](const model::Model& model, int64_t context) {
    engine::GpuFootprint f;
    f.context_size = context;
    f.experts = model.params.experts;
    for (const model::LayerWeights& w : model.layers) f.expert_bytes.push_back(engine::routed_expert_bytes(w));
    return f;
  });
}

// gpuFootprint(path, contextSize) -> Promise<the device memory terms the offload planner needs>
// (engine::GpuFootprint).
Napi::Value gpu_footprint(const Napi::CallbackInfo& info) {
  return footprint_call(info, "gpuFootprint(path, contextSize)", [](const model::Model& model, int64_t context) {
    return engine::gpu_footprint(model, context);
  });
}

// cacheRam: bytes of the prompt-state cache, 0 for none (src/model.ts resolves the default and size strings).
uint64_t cache_ram_option(Napi::Object options) {
  const Napi::Value v = options.Get("cacheRam");
  if (v.IsUndefined()) return 0;
  const double bytes = v.IsNumber() ? v.As<Napi::Number>().DoubleValue() : -1;
  if (!(bytes >= 0 && bytes <= 9007199254740991.0) || bytes != static_cast<double>(static_cast<uint64_t>(bytes))) {
    throw to_js_error(options.Env(), "INVALID_ARGUMENT", "cacheRam must be a non-negative integer number of bytes");
  }
  return static_cast<uint64_t>(bytes);
}

const char* load_step_name(engine::LoadStep step) {
  switch (step) {
    case engine::LoadStep::kRead:
      return "read";
    case engine::LoadStep::kUpload:
      return "upload";
    case engine::LoadStep::kMap:
      return "map";
  }
  return "";
}

// Calls the JS progress listener of a load (on the JS thread) with (step, done, total), and lets
// go of it when the load's worker is freed, however the load ends (the runtime keeps no copy).
class LoadListener {
 public:
  LoadListener(Napi::Env env, Napi::Function listener)
      : js_(std::make_shared<JsThread>(env, "bloomery.loadModel", listener)) {}
  ~LoadListener() {
    if (js_) js_->close();
  }
  LoadListener(LoadListener&& other) noexcept : js_(std::move(other.js_)) {}
  LoadListener(const LoadListener&) = delete;

  void operator()(engine::LoadStep step, uint64_t done, uint64_t total) const {
    post(load_step_name(step), done, total);
  }
  // ("done", 0, 0) after the last report: the reports trail the load's promise, on their own queue.
  void finish() const { post("done", 0, 0); }

 private:
  void post(const char* name, uint64_t done, uint64_t total) const {
    js_->post([name, done, total](Napi::Env env, Napi::Function listener) {
      listener.Call(
          {Napi::String::New(env, name), Napi::Number::New(env, double(done)), Napi::Number::New(env, double(total))});
    });
  }

  std::shared_ptr<JsThread> js_;
};

// loadModel(path, { threads?, contextSize?, parallel?, gpu?: { device?, budget?, experts? }, cacheRam?, mmap?,
// mlock?, disk?: { experts, arenaBytes }, draftModel?: path }, onProgress?(step, done, total)) -> Promise<model
// handle>; onProgress hears "read", "upload" and "map" steps (engine::LoadStep), then ("done", 0, 0). With mmap (the
// default), the weights the CPU reads are faulted into RAM before it resolves.
Napi::Value load_model(const Napi::CallbackInfo& info) {
  return guarded(info, [&]() -> Napi::Value {
    if (info.Length() < 1 || !info[0].IsString()) {
      throw to_js_error(info.Env(), "INVALID_ARGUMENT", "loadModel(path): path must be a string");
    }
    engine::RuntimeOptions options;
    gguf::MapOptions map;
    if (info.Length() > 1 && info[1].IsObject()) {
      const Napi::Object o = info[1].As<Napi::Object>();
      for (auto [name, slot] : {std::pair{"mmap", &map.mmap}, std::pair{"mlock", &map.mlock}}) {
        const Napi::Value v = o.Get(name);
        if (v.IsUndefined()) continue;
        if (!v.IsBoolean()) throw to_js_error(info.Env(), "INVALID_ARGUMENT", std::string(name) + " must be a boolean");
        *slot = v.As<Napi::Boolean>().Value();
      }
      options.threads = static_cast<uint32_t>(option_integer(o, "threads"));
      options.context_size = option_integer(o, "contextSize");
      if (const int64_t parallel = option_integer(o, "parallel")) {
        options.parallel = static_cast<uint32_t>(parallel);
        options.step_tokens = std::max(options.step_tokens, parallel);
      }
      if (o.Get("gpu").IsObject()) options.gpu = gpu_options(o.Get("gpu").As<Napi::Object>());
      options.cache_ram = cache_ram_option(o);
      const Napi::Value residency = o.Get("residency");
      if (!residency.IsUndefined()) {
        const std::string mode = residency.IsString() ? residency.As<Napi::String>().Utf8Value() : "";
        if (mode != "adaptive" && mode != "static") {
          throw to_js_error(info.Env(), "INVALID_ARGUMENT", "residency must be \"adaptive\" or \"static\"");
        }
        options.adaptive_residency = mode == "adaptive";
      }
      if (o.Get("disk").IsObject()) options.disk = disk_options(o.Get("disk").As<Napi::Object>());
      const Napi::Value draft_model = o.Get("draftModel");
      if (!draft_model.IsUndefined()) {
        if (!draft_model.IsString()) throw to_js_error(info.Env(), "INVALID_ARGUMENT", "draftModel must be a path");
        options.draft_model = draft_model.As<Napi::String>().Utf8Value();
      }
      options.mtp_drafts = o.Get("mtpDrafts").ToBoolean().Value();
    }
    options.fault_in_weights = map.mmap;
    std::shared_ptr<LoadListener> listener;
    if (info.Length() > 2 && !info[2].IsUndefined()) {
      if (!info[2].IsFunction()) throw to_js_error(info.Env(), "INVALID_ARGUMENT", "onProgress must be a function");
      listener = std::make_shared<LoadListener>(info.Env(), info[2].As<Napi::Function>());
    }
    return run_async(
        info.Env(),
        [path = info[0].As<Napi::String>().Utf8Value(), options, map, listener]() mutable {
          if (listener) {
            map.on_read = [listener](uint64_t done, uint64_t total) {
              (*listener)(engine::LoadStep::kRead, done, total);
            };
            options.progress = [listener](engine::LoadStep step, uint64_t done, uint64_t total) {
              (*listener)(step, done, total);
            };
          }
          auto runtime = std::make_shared<engine::Runtime>(model::load_model(path, map), options);
          if (listener) listener->finish();
          return runtime;
        },
        [](Napi::Env env, std::shared_ptr<engine::Runtime>& runtime) {
          return wrap(env, ModelHandle{std::move(runtime)}, kModelTag);
        });
  });
}

// modelInfo(model) -> the hyper-parameters and run settings.
Napi::Value model_info(const Napi::CallbackInfo& info) {
  return guarded(info, [&]() -> Napi::Value {
    const engine::Runtime& runtime = live(unwrap<ModelHandle>(info, 0, kModelTag, "model"), info.Env());
    const model::HyperParams& p = runtime.model().params;
    Napi::Object o = Napi::Object::New(info.Env());
    o.Set("architecture", p.architecture);
    o.Set("layers", double(p.layers));
    o.Set("embeddingLength", double(p.embedding));
    o.Set("vocabSize", double(p.vocab));
    o.Set("heads", double(p.heads));
    o.Set("kvHeads", double(p.kv_heads));
    o.Set("headDim", double(p.head_dim));
    o.Set("experts", double(p.experts));
    o.Set("expertsUsed", double(p.experts_used));
    o.Set("contextLength", double(p.context_length));
    o.Set("contextSize", double(runtime.context_size()));
    o.Set("threads", runtime.threads());
    o.Set("parallel", runtime.parallel());
    o.Set("gpu", runtime.on_gpu());
    o.Set("bosToken", p.bos_token);
    o.Set("eosToken", p.eos_token);
    o.Set("pooling", std::string(engine::pooling_name(p.pooling)));
    o.Set("rankLabels", double(runtime.model().rank_head.output.rows));
    return o;
  });
}

Napi::Value dispose_model(const Napi::CallbackInfo& info) {
  return guarded(info, [&]() -> Napi::Value {
    unwrap<ModelHandle>(info, 0, kModelTag, "model").runtime.reset();
    return info.Env().Undefined();
  });
}

// createSession(model) -> session handle
Napi::Value create_session(const Napi::CallbackInfo& info) {
  return guarded(info, [&]() -> Napi::Value {
    ModelHandle& model = unwrap<ModelHandle>(info, 0, kModelTag, "model");
    live(model, info.Env());
    return wrap_session(info.Env(), std::make_shared<engine::Session>(model.runtime));
  });
}

// The seconds a hybrid model's passes spent on each side (engine::OffloadStats).
Napi::Object offload_times(Napi::Env env, const engine::OffloadStats& s) {
  Napi::Object o = Napi::Object::New(env);
  o.Set("passes", double(s.passes));
  o.Set("streamedPasses", double(s.streamed_passes));
  o.Set("wallSeconds", s.wall_seconds);
  o.Set("cpuExpertSeconds", s.cpu_expert_seconds);
  o.Set("cpuWaitSeconds", s.cpu_wait_seconds);
  o.Set("gpuWaitSeconds", s.gpu_wait_seconds);
  o.Set("streamedBytes", double(s.streamed_bytes));
  o.Set("streamedBytesPerSecond", s.streamed_bytes_per_second);
  return o;
}

// The disk tier's counters (engine::ArenaStats).
Napi::Object disk_tier_stats(Napi::Env env, const engine::ArenaStats& s) {
  Napi::Object o = Napi::Object::New(env);
  o.Set("slots", double(s.slots));
  o.Set("slotBytes", double(s.slot_bytes));
  o.Set("hits", double(s.hits));
  o.Set("misses", double(s.misses));
  o.Set("readAhead", double(s.read_ahead));
  o.Set("bytesRead", double(s.bytes_read));
  o.Set("readSeconds", s.read_seconds);
  o.Set("waitSeconds", s.wait_seconds);
  o.Set("directIo", s.direct_io);
  return o;
}

// modelStats(model) -> the scheduler's counters (src/model.ts derives the rates), and `offload`:
// where a GPU model's passes spent their time, or null on the CPU, and `disk`: the disk tier's
// counters, or null without one.
Napi::Value model_stats(const Napi::CallbackInfo& info) {
  return guarded(info, [&]() -> Napi::Value {
    engine::Runtime& runtime = live(unwrap<ModelHandle>(info, 0, kModelTag, "model"), info.Env());
    const engine::SchedulerStats s = runtime.scheduler().stats();
    Napi::Object o = Napi::Object::New(info.Env());
    o.Set("promptTokens", double(s.prompt_tokens));
    o.Set("decodeTokens", double(s.decode_tokens));
    o.Set("promptSeconds", s.prompt_seconds);
    o.Set("decodeSeconds", s.decode_seconds);
    o.Set("passes", double(s.passes));
    o.Set("decodePasses", double(s.decode_passes));
    o.Set("draftTokens", double(s.draft_tokens));
    o.Set("draftAccepted", double(s.draft_accepted));
    o.Set("draftPasses", double(s.draft_passes));
    o.Set("rows", double(s.rows));
    o.Set("sequenceRows", double(s.sequence_rows));
    o.Set("widestPass", double(s.widest_pass));
    o.Set("active", double(s.active));
    o.Set("waiting", double(s.waiting));
    o.Set("offload", runtime.gpu() ? Napi::Value(offload_times(info.Env(), engine::offload_stats(*runtime.gpu())))
                                   : info.Env().Null());
    const engine::ResidencyStats r = runtime.residency().stats();
    Napi::Object residency = Napi::Object::New(info.Env());
    residency.Set("gpuCalls", double(r.hits.gpu));
    residency.Set("hostCalls", double(r.hits.host));
    residency.Set("diskCalls", double(r.hits.disk));
    residency.Set("steps", double(r.steps));
    residency.Set("moves", double(r.moves));
    residency.Set("adaptive", r.adaptive);
    o.Set("residency", residency);
    o.Set("disk",
          runtime.arena() ? Napi::Value(disk_tier_stats(info.Env(), runtime.arena()->stats())) : info.Env().Null());
    return o;
  });
}

// modelRoutingCounts(model) -> Float64Array: the decaying routing counts, layer after layer.
Napi::Value model_routing_counts(const Napi::CallbackInfo& info) {
  return guarded(info, [&]() -> Napi::Value {
    engine::Runtime& runtime = live(unwrap<ModelHandle>(info, 0, kModelTag, "model"), info.Env());
    const std::vector<double> counts = runtime.residency().counts();
    Napi::Float64Array out = Napi::Float64Array::New(info.Env(), counts.size());
    std::copy(counts.begin(), counts.end(), out.Data());
    return out;
  });
}

// modelTakeMoves(model) -> Int32Array of [layer, slot, evicted, seated] per swap begun since the last call.
Napi::Value model_take_moves(const Napi::CallbackInfo& info) {
  return guarded(info, [&]() -> Napi::Value {
    engine::Runtime& runtime = live(unwrap<ModelHandle>(info, 0, kModelTag, "model"), info.Env());
    const std::vector<engine::Swap> moves = runtime.residency().take_moves();
    Napi::Int32Array out = Napi::Int32Array::New(info.Env(), moves.size() * 4);
    for (size_t i = 0; i < moves.size(); ++i) {
      const engine::Swap& m = moves[i];
      out[4 * i] = m.layer;
      out[4 * i + 1] = m.slot;
      out[4 * i + 2] = m.evicted;
      out[4 * i + 3] = m.seated;
    }
    return out;
  });
}

// modelRoutingTrace(model, on) -> Uint32Array[]: starts (on) or stops keeping each step's routed
// calls (layers * experts), returning those kept so far.
Napi::Value model_routing_trace(const Napi::CallbackInfo& info) {
  return guarded(info, [&]() -> Napi::Value {
    engine::Runtime& runtime = live(unwrap<ModelHandle>(info, 0, kModelTag, "model"), info.Env());
    const bool on = info.Length() > 1 && info[1].ToBoolean().Value();
    const std::vector<std::vector<uint32_t>> steps = runtime.residency().trace(on);
    Napi::Array out = Napi::Array::New(info.Env(), steps.size());
    for (size_t i = 0; i < steps.size(); ++i) {
      Napi::Uint32Array step = Napi::Uint32Array::New(info.Env(), steps[i].size());
      std::copy(steps[i].begin(), steps[i].end(), step.Data());
      out.Set(static_cast<uint32_t>(i), step);
    }
    return out;
  });
}

// modelReplayRouting(model, layers: Int32Array, ids: Int32Array) | (model, null): benchmarks only
// (src/model.ts REPLAY_ROUTING): the passes take each MoE layer's experts from the trace `ids` (steps x
// layers.length x expertsUsed) instead of the routers; null goes back to the routers.
Napi::Value model_replay_routing(const Napi::CallbackInfo& info) {
  return guarded(info, [&]() -> Napi::Value {
    engine::Runtime& runtime = live(unwrap<ModelHandle>(info, 0, kModelTag, "model"), info.Env());
    if (info.Length() > 1 && info[1].IsNull()) {
      runtime.replay_routing(nullptr);
      return info.Env().Undefined();
    }
    if (info.Length() < 3 || !info[1].IsTypedArray() ||
        info[1].As<Napi::TypedArray>().TypedArrayType() != napi_int32_array || !info[2].IsTypedArray() ||
        info[2].As<Napi::TypedArray>().TypedArrayType() != napi_int32_array) {
      throw to_js_error(info.Env(), "INVALID_ARGUMENT", "modelReplayRouting takes layers and ids as Int32Arrays");
    }
    const Napi::Int32Array layers = info[1].As<Napi::Int32Array>();
    const Napi::Int32Array ids = info[2].As<Napi::Int32Array>();
    runtime.replay_routing(std::make_unique<engine::RoutingReplay>(
        runtime.model(), std::span<const int32_t>(layers.Data(), layers.ElementLength()),
        std::span<const int32_t>(ids.Data(), ids.ElementLength())));
    return info.Env().Undefined();
  });
}

// Settles `deferred` with the request's floats (RequestEnd::logits) once it ends, or its error.
engine::RequestEvents resolve_with_floats(std::shared_ptr<Napi::Promise::Deferred> deferred,
                                          std::shared_ptr<JsThread> js) {
  engine::RequestEvents events;
  events.on_end = [deferred, js](engine::RequestEnd end) {
    js->post([deferred, end = std::move(end)](Napi::Env env, Napi::Function) {
      if (end.error) {
        deferred->Reject(to_js_error(env, end.error).Value());
      } else if (end.reason != engine::StopReason::kDone) {
        deferred->Reject(to_js_error(env, "DISPOSED", "the session was disposed before its tokens ran").Value());
      } else {
        Napi::Float32Array out = Napi::Float32Array::New(env, end.logits.size());
        std::memcpy(out.Data(), end.logits.data(), end.logits.size() * sizeof(float));
        deferred->Resolve(out);
      }
    });
    js->close();
  };
  return events;
}

// sessionEvaluate(session, tokens: Int32Array, allLogits: boolean) -> Promise<Float32Array>
Napi::Value session_evaluate(const Napi::CallbackInfo& info) {
  return guarded(info, [&]() -> Napi::Value {
    std::shared_ptr<engine::Session> session = live(unwrap<SessionHandle>(info, 0, kSessionTag, "session"), info.Env());
    if (info.Length() < 2 || !info[1].IsTypedArray() ||
        info[1].As<Napi::TypedArray>().TypedArrayType() != napi_int32_array) {
      throw to_js_error(info.Env(), "INVALID_ARGUMENT", "tokens must be an Int32Array");
    }
    const Napi::Int32Array tokens = info[1].As<Napi::Int32Array>();
    const bool all = info.Length() > 2 && info[2].ToBoolean().Value();
    auto deferred = std::make_shared<Napi::Promise::Deferred>(Napi::Promise::Deferred::New(info.Env()));
    auto js = std::make_shared<JsThread>(info.Env(), "bloomery.evaluate");
    engine::RequestEvents events = resolve_with_floats(deferred, js);
    engine::Scheduler& scheduler = session->runtime().scheduler();
    try {
      scheduler.evaluate(std::move(session),
                         std::vector<int32_t>(tokens.Data(), tokens.Data() + tokens.ElementLength()),
                         all ? engine::LogitRows::kAll : engine::LogitRows::kLast, std::move(events));
    } catch (...) {
      js->close();
      throw;
    }
    return deferred->Promise();
  });
}

// sessionEmbed(session, tokens: Int32Array, pooling: string) -> Promise<Float32Array>: the tokens
// appended, their hidden states pooled (engine/pooling.h).
Napi::Value session_embed(const Napi::CallbackInfo& info) {
  return guarded(info, [&]() -> Napi::Value {
    std::shared_ptr<engine::Session> session = live(unwrap<SessionHandle>(info, 0, kSessionTag, "session"), info.Env());
    if (info.Length() < 3 || !info[1].IsTypedArray() ||
        info[1].As<Napi::TypedArray>().TypedArrayType() != napi_int32_array || !info[2].IsString()) {
      throw to_js_error(info.Env(), "INVALID_ARGUMENT", "sessionEmbed takes an Int32Array and a pooling name");
    }
    const Napi::Int32Array tokens = info[1].As<Napi::Int32Array>();
    const std::string name = info[2].As<Napi::String>().Utf8Value();
    const std::optional<model::Pooling> pooling = engine::pooling_named(name);
    if (!pooling) throw to_js_error(info.Env(), "INVALID_ARGUMENT", "unknown pooling " + name);
    auto deferred = std::make_shared<Napi::Promise::Deferred>(Napi::Promise::Deferred::New(info.Env()));
    auto js = std::make_shared<JsThread>(info.Env(), "bloomery.embed");
    engine::RequestEvents events = resolve_with_floats(deferred, js);
    engine::Scheduler& scheduler = session->runtime().scheduler();
    try {
      scheduler.embed(std::move(session), std::vector<int32_t>(tokens.Data(), tokens.Data() + tokens.ElementLength()),
                      *pooling, std::move(events));
    } catch (...) {
      js->close();
      throw;
    }
    return deferred->Promise();
  });
}

Napi::Value session_reset(const Napi::CallbackInfo& info) {
  return guarded(info, [&]() -> Napi::Value {
    std::shared_ptr<engine::Session> session = live(unwrap<SessionHandle>(info, 0, kSessionTag, "session"), info.Env());
    session->runtime().scheduler().reset(*session);
    return info.Env().Undefined();
  });
}

Napi::Value session_position(const Napi::CallbackInfo& info) {
  return guarded(info, [&]() -> Napi::Value {
    return Napi::Number::New(
        info.Env(), double(live(unwrap<SessionHandle>(info, 0, kSessionTag, "session"), info.Env())->position()));
  });
}

Napi::Float32Array float_array(Napi::Env env, const std::vector<float>& values) {
  Napi::Float32Array out = Napi::Float32Array::New(env, values.size());
  std::copy(values.begin(), values.end(), out.Data());
  return out;
}

// sessionMtpLogits(session, token) -> Float32Array: engine::Session::mtp_logits (tests).
Napi::Value session_mtp_logits(const Napi::CallbackInfo& info) {
  return guarded(info, [&]() -> Napi::Value {
    std::shared_ptr<engine::Session> session = live(unwrap<SessionHandle>(info, 0, kSessionTag, "session"), info.Env());
    if (info.Length() < 2 || !info[1].IsNumber())
      throw to_js_error(info.Env(), "INVALID_ARGUMENT", "token must be a number");
    return float_array(info.Env(), session->mtp_logits(info[1].As<Napi::Number>().Int32Value()));
  });
}

// modelMtpReferenceLogits(model, tokens: Int32Array) -> Float32Array: engine::mtp_reference_logits (tests).
Napi::Value model_mtp_reference_logits(const Napi::CallbackInfo& info) {
  return guarded(info, [&]() -> Napi::Value {
    engine::Runtime& runtime = live(unwrap<ModelHandle>(info, 0, kModelTag, "model"), info.Env());
    if (info.Length() < 2 || !info[1].IsTypedArray() ||
        info[1].As<Napi::TypedArray>().TypedArrayType() != napi_int32_array) {
      throw to_js_error(info.Env(), "INVALID_ARGUMENT", "tokens must be an Int32Array");
    }
    const Napi::Int32Array tokens = info[1].As<Napi::Int32Array>();
    return float_array(info.Env(), runtime.mtp_reference_logits(std::span(tokens.Data(), tokens.ElementLength())));
  });
}

Napi::Value dispose_session(const Napi::CallbackInfo& info) {
  return guarded(info, [&]() -> Napi::Value {
    SessionHandle& handle = unwrap<SessionHandle>(info, 0, kSessionTag, "session");
    if (handle.session) handle.session->runtime().scheduler().cancel_all(*handle.session);
    handle.session.reset();
    return info.Env().Undefined();
  });
}

}  // namespace

Napi::Value wrap_session(Napi::Env env, std::shared_ptr<engine::Session> session) {
  return wrap(env, SessionHandle{std::move(session)}, kSessionTag);
}

std::shared_ptr<engine::Session> session_argument(const Napi::CallbackInfo& info, size_t index) {
  return live(unwrap<SessionHandle>(info, index, kSessionTag, "session"), info.Env());
}

void register_model(Napi::Env env, Napi::Object exports) {
  exports.Set("loadModel", Napi::Function::New(env, load_model, "loadModel"));
  exports.Set("modelInfo", Napi::Function::New(env, model_info, "modelInfo"));
  exports.Set("disposeModel", Napi::Function::New(env, dispose_model, "disposeModel"));
  exports.Set("gpuFootprint", Napi::Function::New(env, gpu_footprint, "gpuFootprint"));
  exports.Set("hostFootprint", Napi::Function::New(env, host_footprint, "hostFootprint"));
  exports.Set("modelStats", Napi::Function::New(env, model_stats, "modelStats"));
  exports.Set("modelRoutingCounts", Napi::Function::New(env, model_routing_counts, "modelRoutingCounts"));
  exports.Set("modelTakeMoves", Napi::Function::New(env, model_take_moves, "modelTakeMoves"));
  exports.Set("modelRoutingTrace", Napi::Function::New(env, model_routing_trace, "modelRoutingTrace"));
  exports.Set("modelReplayRouting", Napi::Function::New(env, model_replay_routing, "modelReplayRouting"));
  exports.Set("createSession", Napi::Function::New(env, create_session, "createSession"));
  exports.Set("sessionEvaluate", Napi::Function::New(env, session_evaluate, "sessionEvaluate"));
  exports.Set("sessionEmbed", Napi::Function::New(env, session_embed, "sessionEmbed"));
  exports.Set("sessionReset", Napi::Function::New(env, session_reset, "sessionReset"));
  exports.Set("sessionPosition", Napi::Function::New(env, session_position, "sessionPosition"));
  exports.Set("disposeSession", Napi::Function::New(env, dispose_session, "disposeSession"));
  exports.Set("sessionMtpLogits", Napi::Function::New(env, session_mtp_logits, "sessionMtpLogits"));
  exports.Set("modelMtpReferenceLogits",
              Napi::Function::New(env, model_mtp_reference_logits, "modelMtpReferenceLogits"));
}

}  // namespace bloomery::addon
