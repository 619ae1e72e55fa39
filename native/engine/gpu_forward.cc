#include "engine/gpu_forward.h"

#include "base/error.h"

#ifdef BLOOMERY_CUDA

#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>
#include <mutex>
#include <numeric>
#include <optional>
#include <shared_mutex>
#include <string>

#include "cuda/device.h"
#include "cuda/ops.h"
#include "cuda/runtime.h"
#include "engine/expert_stream.h"
#include "quant/ggml_types.h"

namespace bloomery::engine {

namespace {

using cuda::ActivationBlock;
using cuda::DeviceBuffer;
using cuda::DeviceMatrix;

// Rows per pass: longer prompts run as several passes, so the workspace stays bounded.
constexpr int64_t kMaxBatch = 512;
// Device memory left to the CUDA context, graphs and kernels' local memory.
constexpr uint64_t kReserve = 512ull << 20;

std::string gib(uint64_t bytes) {
  char text[32];
  std::snprintf(text, sizeof text, "%.2f GiB", static_cast<double>(bytes) / (1ull << 30));
  return text;
}

std::string type_name(uint32_t type) {
  const auto info = quant::ggml_type(type);
  return info ? std::string(info->name) : "type " + std::to_string(type);
}

struct GpuLayer {
  const float* attention_norm = nullptr;
  DeviceMatrix q, k, v, attention_output;
  const float* q_bias = nullptr;
  const float* k_bias = nullptr;
  const float* v_bias = nullptr;
  const float* q_norm = nullptr;
  const float* k_norm = nullptr;
  const float* ffn_norm = nullptr;
  DeviceMatrix ffn_gate, ffn_up, ffn_down;
  DeviceMatrix router, expert_gate, expert_up, expert_down;  // the experts: the layer's slot pool
  const int32_t* expert_slots = nullptr;                     // expert -> slot in the pool, -1: in host memory
};

// Where each of the model's host ranges goes in the one device allocation of weights.
class WeightPlan {
 public:
  size_t place(const void* host, size_t bytes) {
    if (!host) return kNone;
    const auto [it, added] = offsets_.try_emplace(host, total_);
    if (added) {
      ranges_.push_back({host, bytes, total_});
      total_ += (bytes + 255) / 256 * 256;
    }
    return it->second;
  }
  // Host ranges of `bytes_each` placed back to back (a slot pool); ranges adjacent on both
  // sides upload as one copy.
  size_t gather(const std::vector<const uint8_t*>& sources, size_t bytes_each) {
    const size_t offset = total_;
    for (size_t i = 0; i < sources.size(); ++i) {
      if (i > 0 && static_cast<const uint8_t*>(ranges_.back().host) + ranges_.back().bytes == sources[i]) {
        ranges_.back().bytes += bytes_each;
      } else {
        ranges_.push_back({sources[i], bytes_each, offset + i * bytes_each});
      }
    }
    total_ += (sources.size() * bytes_each + 255) / 256 * 256;
    return offset;
  }
  size_t total() const { return total_; }
  void upload(const DeviceBuffer& arena) const {
    for (const Range& r : ranges_) cuda::upload(arena.as<uint8_t>() + r.offset, r.host, r.bytes);
  }
  static constexpr size_t kNone = ~size_t{0};

 private:
  struct Range {
    const void* host;
    size_t bytes;
    size_t offset;
  };
  std::map<const void*, size_t> offsets_;
  std::vector<Range> ranges_;
  size_t total_ = 0;
};

}  // namespace

// The pass's buffers, sized for kMaxBatch rows.
struct Workspace {
  DeviceBuffer residual, normed, q, k, v, attention, gate, up, hidden, expert_out, router_logits, routing_weights;
  DeviceBuffer chosen, order, chunks, chunk_count, tokens, positions, activations, last_logits;
  DeviceBuffer all_logits;  // grown on demand for LogitRows::kAll
};

// The weights' places in device memory, and which experts are there: what bind_weights
// fills (also for gpu_footprint, which needs no device).
struct GpuWeights {
  std::vector<std::vector<int32_t>> resident;     // per layer, the GPU's experts, in slot order
  std::vector<std::vector<int32_t>> slot_tables;  // per layer, expert -> slot (-1: host), uploaded with the weights
  DeviceMatrix token_embedding, output;
  const float* output_norm = nullptr;
  const float* freq_factors = nullptr;
  std::vector<GpuLayer> layers;
};

class GpuModel : public GpuWeights {
 public:
  int device = 0;
  model::HyperParams params;
  std::unique_ptr<HostExperts> host_experts;    // set when some experts live in host memory: decode and short prompts
  std::unique_ptr<ExpertStream> expert_stream;  // with host_experts: long prompts copy them to the GPU
  DeviceBuffer weights;
  cuda::Stream stream;
  Workspace work;
  int64_t max_chunks = 0;

  // Sequences released while a hybrid pass runs anywhere (see hybrid_passes), freed later.
  std::mutex retired_mutex;
  std::vector<GpuSequence*> retired;

  ~GpuModel();
  void free_retired();
};

class GpuSequence {
 public:
  DeviceBuffer keys, values;  // layers * capacity * kv_width f16 each
  int64_t layer_elements = 0;
  cuda::Graph decode_step;
};

GpuModel::~GpuModel() { free_retired(); }

void GpuModel::free_retired() {
  std::vector<GpuSequence*> sequences;
  {
    std::lock_guard lock(retired_mutex);
    sequences.swap(retired);
  }
  if (!sequences.empty()) cuda::use_device(device);
  for (GpuSequence* sequence : sequences) delete sequence;
}

namespace {

// A hybrid pass's kernels wait for the host's expert sums, while freeing (and pinning) device
// or host memory waits for the whole device and holds the driver meanwhile: a free from any
// thread while a hybrid pass of any model runs would leave the GPU, the pass's host thread and
// the free waiting on one another for ever. Hybrid passes hold this shared; loading, creating and
// freeing models and sequences hold it exclusively (passes of whole-GPU models need neither).
std::shared_mutex& hybrid_passes() {
  static std::shared_mutex passes;
  return passes;
}

// The deleter of create_gpu_sequence's sequences: frees at once unless a hybrid pass is running;
// then the model's next pass, or its end, frees it.
void release_sequence(GpuModel& model, GpuSequence* sequence) {
  std::unique_lock exclusive(hybrid_passes(), std::try_to_lock);
  if (exclusive.owns_lock()) {
    cuda::use_device(model.device);
    delete sequence;
    return;
  }
  std::lock_guard lock(model.retired_mutex);
  model.retired.push_back(sequence);
}

}  // namespace

namespace {

size_t kv_bytes(const model::HyperParams& p, int64_t context_size) {
  return 2 * static_cast<size_t>(p.layers * context_size * p.kv_heads * p.head_dim) * sizeof(uint16_t);
}

// The workspace's buffers, in bytes, in Workspace's order (all_logits excepted).
std::vector<std::pair<const char*, size_t>> workspace_sizes(const model::HyperParams& p) {
  const auto floats = [](int64_t count) { return static_cast<size_t>(count) * sizeof(float); };
  const auto ints = [](int64_t count) { return static_cast<size_t>(count) * sizeof(int32_t); };
  const int64_t b = kMaxBatch;
  const int64_t q_width = p.heads * p.head_dim, kv_width = p.kv_heads * p.head_dim;
  const int64_t routed = b * p.experts_used;
  const int64_t hidden = std::max(b * p.feed_forward, routed * p.expert_feed_forward);
  const int64_t widest = std::max({b * p.embedding, b * q_width, hidden});
  const int64_t chunks = p.experts > 0 ? cuda::max_expert_chunks(b, p.experts, p.experts_used) : 0;
  return {{"residual", floats(b * p.embedding)},
          {"normed", floats(b * p.embedding)},
          {"q", floats(b * q_width)},
          {"k", floats(b * kv_width)},
          {"v", floats(b * kv_width)},
          {"attention", floats(b * q_width)},
          {"gate", floats(b * p.feed_forward)},
          {"up", floats(b * p.feed_forward)},
          {"hidden", floats(hidden)},
          {"expert_out", floats(routed * p.embedding)},
          {"router_logits", floats(b * p.experts)},
          {"routing_weights", floats(routed)},
          {"chosen", ints(routed)},
          {"order", ints(routed)},
          {"chunks", ints(3 * chunks)},
          {"chunk_count", ints(1)},
          {"tokens", ints(b)},
          {"positions", ints(b)},
          {"activations", static_cast<size_t>(widest / 32) * sizeof(ActivationBlock)},
          {"last_logits", floats(p.vocab)}};
}

void allocate_workspace(const model::HyperParams& p, Workspace& w) {
  DeviceBuffer* buffers[] = {&w.residual,
                             &w.normed,
                             &w.q,
                             &w.k,
                             &w.v,
                             &w.attention,
                             &w.gate,
                             &w.up,
                             &w.hidden,
                             &w.expert_out,
                             &w.router_logits,
                             &w.routing_weights,
                             &w.chosen,
                             &w.order,
                             &w.chunks,
                             &w.chunk_count,
                             &w.tokens,
                             &w.positions,
                             &w.activations,
                             &w.last_logits};
  const auto sizes = workspace_sizes(p);
  for (size_t i = 0; i < sizes.size(); ++i) *buffers[i] = DeviceBuffer(sizes[i].second, sizes[i].first);
}

class Uploader {
 public:
  explicit Uploader(const model::HyperParams& p) : p_(p) {}

  // First pass: place every tensor; second pass (after allocation): resolve device pointers.
  DeviceMatrix matrix(const cpu::WeightMatrix& w, int64_t count = 1) {
    const size_t matrix_bytes = static_cast<size_t>(w.rows) * w.row_bytes;
    DeviceMatrix d;
    if (w.empty()) return d;
    d.type = w.kernels->type;
    d.rows = w.rows;
    d.cols = w.cols;
    d.row_bytes = w.row_bytes;
    d.matrix_bytes = matrix_bytes;
    d.count = count;
    if (count > 0) d.data = resolve<uint8_t>(plan_.place(w.data, matrix_bytes * static_cast<size_t>(count)));
    return d;
  }
  const float* vector(const float* host, int64_t length) {
    return resolve<float>(plan_.place(host, static_cast<size_t>(length) * sizeof(float)));
  }
  const int32_t* table(const std::vector<int32_t>& host) {
    return resolve<int32_t>(plan_.place(host.data(), host.size() * sizeof(int32_t)));
  }
  // A slot pool holding the `resident` experts of a stack, slot i = resident[i].
  DeviceMatrix experts(const cpu::ExpertMatrices& w, const std::vector<int32_t>& resident) {
    DeviceMatrix d = matrix(w.first, 0);
    d.count = static_cast<int64_t>(resident.size());
    if (arena_.data()) {
      d.data = resolve<uint8_t>(pools_[next_pool_++]);
      return d;
    }
    std::vector<const uint8_t*> sources;
    for (const int32_t e : resident) sources.push_back(w.expert(e).data);
    pools_.push_back(plan_.gather(sources, d.matrix_bytes));
    return d;
  }
  void allocate() {
    arena_ = DeviceBuffer(plan_.total(), "model weights");
    plan_.upload(arena_);
  }
  size_t bytes() const { return plan_.total(); }
  DeviceBuffer take() { return std::move(arena_); }

 private:
  template <typename T>
  const T* resolve(size_t offset) {
    if (offset == WeightPlan::kNone || !arena_.data()) return nullptr;
    return reinterpret_cast<const T*>(arena_.as<uint8_t>() + offset);
  }
  const model::HyperParams& p_;
  WeightPlan plan_;
  DeviceBuffer arena_;
  std::vector<size_t> pools_;  // each pool's offset, in the order bind_weights places them
  size_t next_pool_ = 0;
};

void bind_weights(const model::Model& m, Uploader& up, GpuWeights& g) {
  const model::HyperParams& p = m.params;
  const int64_t q_width = p.heads * p.head_dim, kv_width = p.kv_heads * p.head_dim;
  g.token_embedding = up.matrix(m.token_embedding);
  g.output = up.matrix(m.output);
  g.output_norm = up.vector(m.output_norm, p.embedding);
  g.freq_factors = up.vector(p.rope.freq_factors, p.rope.dims / 2);
  g.layers.resize(m.layers.size());
  for (size_t l = 0; l < m.layers.size(); ++l) {
    const model::LayerWeights& w = m.layers[l];
    GpuLayer& d = g.layers[l];
    d.attention_norm = up.vector(w.attention_norm, p.embedding);
    d.q = up.matrix(w.q);
    d.k = up.matrix(w.k);
    d.v = up.matrix(w.v);
    d.attention_output = up.matrix(w.attention_output);
    d.q_bias = up.vector(w.q_bias, q_width);
    d.k_bias = up.vector(w.k_bias, kv_width);
    d.v_bias = up.vector(w.v_bias, kv_width);
    d.q_norm = up.vector(w.q_norm, p.head_dim);
    d.k_norm = up.vector(w.k_norm, p.head_dim);
    d.ffn_norm = up.vector(w.ffn_norm, p.embedding);
    d.ffn_gate = up.matrix(w.ffn_gate);
    d.ffn_up = up.matrix(w.ffn_up);
    d.ffn_down = up.matrix(w.ffn_down);
    d.router = up.matrix(w.router);
    if (p.experts == 0) continue;
    d.expert_gate = up.experts(w.expert_gate, g.resident[l]);
    d.expert_up = up.experts(w.expert_up, g.resident[l]);
    d.expert_down = up.experts(w.expert_down, g.resident[l]);
    d.expert_slots = up.table(g.slot_tables[l]);
  }
}

// Per layer, the GPU's experts (sorted, so neighbours upload as one range), from the
// requested lists (empty: all of them); INVALID_ARGUMENT for lists that do not fit the model.
std::vector<std::vector<int32_t>> resident_experts(const model::HyperParams& p,
                                                   const std::vector<std::vector<int32_t>>& requested) {
  std::vector<std::vector<int32_t>> resident(static_cast<size_t>(p.layers));
  if (p.experts == 0) {
    for (const auto& r : requested) {
      if (!r.empty()) throw Error("INVALID_ARGUMENT", "gpu experts were listed for a model without routed experts");
    }
    return resident;
  }
  if (requested.empty()) {
    for (auto& r : resident) {
      r.resize(static_cast<size_t>(p.experts));
      std::iota(r.begin(), r.end(), 0);
    }
    return resident;
  }
  if (static_cast<int64_t>(requested.size()) != p.layers) {
    throw Error("INVALID_ARGUMENT", "gpu experts name " + std::to_string(requested.size()) + " layers; the model has " +
                                        std::to_string(p.layers));
  }
  for (size_t l = 0; l < requested.size(); ++l) {
    std::vector<bool> seen(static_cast<size_t>(p.experts), false);
    for (const int32_t e : requested[l]) {
      if (e < 0 || e >= p.experts || seen[e]) {
        throw Error("INVALID_ARGUMENT", "layer " + std::to_string(l) + "'s gpu experts list expert " +
                                            std::to_string(e) + (e >= 0 && e < p.experts ? " twice" : "") +
                                            "; the model has " + std::to_string(p.experts) + " experts per layer");
      }
      seen[e] = true;
    }
    resident[l] = requested[l];
    std::sort(resident[l].begin(), resident[l].end());
  }
  return resident;
}

void set_residency(const model::HyperParams& p, std::vector<std::vector<int32_t>> resident, GpuWeights& g) {
  g.resident = std::move(resident);
  g.slot_tables.assign(g.resident.size(), std::vector<int32_t>(static_cast<size_t>(p.experts), -1));
  for (size_t l = 0; l < g.resident.size(); ++l) {
    for (size_t slot = 0; slot < g.resident[l].size(); ++slot) g.slot_tables[l][g.resident[l][slot]] = int32_t(slot);
  }
}

size_t workspace_bytes(const model::HyperParams& p) {
  size_t bytes = 0;
  for (const auto& [name, size] : workspace_sizes(p)) bytes += (size + 255) / 256 * 256;
  return bytes;
}

// Every tensor the GPU's kernels cannot serve, in the model's order.
std::vector<GpuKernelGap> kernel_gaps(const model::Model& m) {
  std::vector<GpuKernelGap> gaps;
  const auto no_kernel = [&](const cpu::WeightMatrix& w, const std::string& tensor, const char* kernel) {
    gaps.push_back({tensor, tensor + " is " + type_name(w.kernels->type) + ", which has no GPU " + kernel + " kernel"});
  };
  if (!cuda::embedding_supports(m.token_embedding.kernels->type)) {
    no_kernel(m.token_embedding, "token_embd.weight", "embedding");
  }
  if (!cuda::matvec_supports(m.output.kernels->type)) {
    no_kernel(m.output, m.output.data == m.token_embedding.data ? "token_embd.weight" : "output.weight", "matvec");
  }
  for (size_t l = 0; l < m.layers.size(); ++l) {
    const model::LayerWeights& w = m.layers[l];
    const std::string layer = "blk." + std::to_string(l) + ".";
    for (const auto& [matrix, name] :
         {std::pair{&w.q, "attn_q"}, std::pair{&w.k, "attn_k"}, std::pair{&w.v, "attn_v"},
          std::pair{&w.attention_output, "attn_output"}, std::pair{&w.ffn_gate, "ffn_gate"},
          std::pair{&w.ffn_up, "ffn_up"}, std::pair{&w.ffn_down, "ffn_down"}, std::pair{&w.router, "ffn_gate_inp"}}) {
      if (!matrix->empty() && !cuda::matvec_supports(matrix->kernels->type)) {
        no_kernel(*matrix, layer + name + ".weight", "matvec");
      }
    }
    if (m.params.experts == 0) continue;
    const auto expert_gap = [&](const std::string& tensor, const std::string& reason) {
      gaps.push_back({tensor, reason, static_cast<int64_t>(l)});
    };
    for (const auto& [experts, name] :
         {std::pair{&w.expert_gate, "ffn_gate_exps"}, std::pair{&w.expert_up, "ffn_up_exps"},
          std::pair{&w.expert_down, "ffn_down_exps"}}) {
      const uint32_t type = experts->first.kernels->type;
      const std::string tensor = layer + name + ".weight";
      if (!cuda::matvec_supports(type)) {
        expert_gap(tensor, tensor + " is " + type_name(type) + ", which has no GPU matvec kernel");
      }
    }
    const uint32_t gate = w.expert_gate.first.kernels->type, up = w.expert_up.first.kernels->type;
    if (gate != up) {
      expert_gap(layer + "ffn_up_exps.weight", layer + "ffn_gate_exps.weight (" + type_name(gate) + ") and " + layer +
                                                   "ffn_up_exps.weight (" + type_name(up) +
                                                   ") differ in type; the GPU's fused expert kernel needs one");
    }
  }
  return gaps;
}

// Per layer, whether long prompts may stream its host experts to the GPU: not where the GPU's
// kernels cannot serve its expert stacks.
std::vector<bool> streamable_layers(const model::HyperParams& p, const std::vector<GpuKernelGap>& gaps) {
  std::vector<bool> streamed(static_cast<size_t>(p.layers), p.experts > 0);
  for (const GpuKernelGap& gap : gaps) {
    if (gap.expert_layer >= 0) streamed[static_cast<size_t>(gap.expert_layer)] = false;
  }
  return streamed;
}

// Refuses a dense tensor the GPU cannot serve, and GPU-resident experts in a layer whose stacks it cannot.
void check_kernels(const std::vector<GpuKernelGap>& gaps, const GpuWeights& g) {
  for (const GpuKernelGap& gap : gaps) {
    if (gap.expert_layer < 0) {
      throw Error("UNSUPPORTED_QUANT", gap.reason + ", so the model cannot run on the GPU; load it with gpu: false");
    }
    const size_t resident = g.resident[static_cast<size_t>(gap.expert_layer)].size();
    if (resident > 0) {
      throw Error("UNSUPPORTED_QUANT", gap.reason + ", so layer " + std::to_string(gap.expert_layer) +
                                           "'s experts cannot run on the GPU (" + std::to_string(resident) +
                                           " placed there); keep them in host memory");
    }
  }
}

void check_shape(const model::HyperParams& p) {
  if (p.head_dim % 32 != 0 || p.head_dim > 256 || p.embedding % 32 != 0) {
    throw Error("UNSUPPORTED_MODEL",
                "the GPU path needs head_dim a multiple of 32 up to 256 and embedding a multiple "
                "of 32 (head_dim " +
                    std::to_string(p.head_dim) + ", embedding " + std::to_string(p.embedding) + ")");
  }
}

// --- the pass ---

struct Pass {
  GpuModel& m;
  GpuSequence& s;
  int64_t n;
  cuda::StreamHandle stream;

  float* f(const DeviceBuffer& b) const { return b.as<float>(); }
  ActivationBlock* blocks() const { return m.work.activations.as<ActivationBlock>(); }

  // Float rows that one or more matrices read, quantized into the one activations buffer in
  // the format each weight type wants, again only when that format changes.
  class Input {
   public:
    Input(const Pass& pass, const float* x, int64_t rows, int64_t cols)
        : pass_(pass), x_(x), rows_(rows), cols_(cols) {}
    cuda::MatvecInput for_type(uint32_t type) {
      if (cuda::is_float_type(type)) return {x_, nullptr};
      const cuda::ActivationFormat format = cuda::activation_format(type);
      if (format != format_) {
        cuda::quantize_activations(x_, rows_, cols_, type, pass_.blocks(), pass_.stream);
        format_ = format;
      }
      return {x_, pass_.blocks()};
    }

   private:
    const Pass& pass_;
    const float* x_;
    int64_t rows_, cols_;
    std::optional<cuda::ActivationFormat> format_;
  };

  void mul(const DeviceMatrix& w, Input& x, int64_t rows, float* y, bool accumulate) const {
    cuda::matvec(w, x.for_type(w.type), rows, y, accumulate, stream);
  }

  void position_heads(float* rows, int64_t heads, const float* head_norm) const {
    const model::HyperParams& p = m.params;
    if (head_norm) cuda::rms_norm(rows, n * heads, p.head_dim, head_norm, p.rms_epsilon, rows, stream);
    const cuda::RopeShape shape{p.rope.style == cpu::RopeStyle::kNeox, p.rope.dims, p.rope.freq_base, p.rope.freq_scale,
                                m.freq_factors};
    cuda::rope(rows, n, heads, p.head_dim, m.work.positions.as<int32_t>(), shape, stream);
  }

  void attention_block(const GpuLayer& w, int64_t layer) const {
    const model::HyperParams& p = m.params;
    const Workspace& ws = m.work;
    const int64_t q_width = p.heads * p.head_dim, kv_width = p.kv_heads * p.head_dim;
    cuda::rms_norm(f(ws.residual), n, p.embedding, w.attention_norm, p.rms_epsilon, f(ws.normed), stream);
    Input x(*this, f(ws.normed), n, p.embedding);
    mul(w.q, x, n, f(ws.q), false);
    mul(w.k, x, n, f(ws.k), false);
    mul(w.v, x, n, f(ws.v), false);
    if (w.q_bias) cuda::add_bias(f(ws.q), n, q_width, w.q_bias, stream);
    if (w.k_bias) cuda::add_bias(f(ws.k), n, kv_width, w.k_bias, stream);
    if (w.v_bias) cuda::add_bias(f(ws.v), n, kv_width, w.v_bias, stream);
    position_heads(f(ws.q), p.heads, w.q_norm);
    position_heads(f(ws.k), p.kv_heads, w.k_norm);
    uint16_t* keys = s.keys.as<uint16_t>() + layer * s.layer_elements;
    uint16_t* values = s.values.as<uint16_t>() + layer * s.layer_elements;
    cuda::store_kv(f(ws.k), f(ws.v), n, kv_width, ws.positions.as<int32_t>(), keys, values, stream);
    const cuda::AttentionShape shape{p.heads, p.kv_heads, p.head_dim, 1.0f / std::sqrt(static_cast<float>(p.head_dim))};
    cuda::causal_attention(f(ws.q), n, ws.positions.as<int32_t>(), keys, values, shape, f(ws.attention), stream);
    Input attended(*this, f(ws.attention), n, q_width);
    mul(w.attention_output, attended, n, f(ws.residual), true);
  }

  void dense_ffn(const GpuLayer& w, Input& x) const {
    const model::HyperParams& p = m.params;
    const Workspace& ws = m.work;
    if (cuda::gated_matvec_supports(w.ffn_gate, w.ffn_up)) {
      cuda::gated_matvec(w.ffn_gate, w.ffn_up, x.for_type(w.ffn_gate.type).blocks, n, f(ws.hidden), stream);
    } else {
      mul(w.ffn_gate, x, n, f(ws.gate), false);
      mul(w.ffn_up, x, n, f(ws.up), false);
      cuda::swiglu(f(ws.gate), f(ws.up), n * p.feed_forward, f(ws.hidden), stream);
    }
    Input hidden(*this, f(ws.hidden), n, p.feed_forward);
    mul(w.ffn_down, hidden, n, f(ws.residual), true);
  }

  // Whether this pass copies layer `layer`'s host experts to the GPU rather than handing its rows
  // to the CPU: long prompts do, in layers whose expert stacks the GPU's kernels serve.
  bool streams(int64_t layer) const {
    return m.expert_stream && n >= ExpertStream::kMinRows && m.expert_stream->streams(layer);
  }
  // Whether the CPU runs layer `layer`'s host experts in this pass.
  bool hands_off(int64_t layer) const {
    return m.host_experts && m.host_experts->has_host_experts(layer) && !streams(layer);
  }
  bool hybrid() const {
    for (int64_t l = 0; l < m.params.layers; ++l) {
      if (hands_off(l)) return true;
    }
    return false;
  }
  bool streams_any() const {
    for (int64_t l = 0; l < m.params.layers; ++l) {
      if (m.host_experts && m.host_experts->has_host_experts(l) && streams(l)) return true;
    }
    return false;
  }

  void moe_ffn(const GpuLayer& w, int64_t layer, Input& x) const {
    const model::HyperParams& p = m.params;
    const Workspace& ws = m.work;
    mul(w.router, x, n, f(ws.router_logits), false);
    cuda::route_top_k(f(ws.router_logits), n, p.experts, p.experts_used, p.normalize_expert_weights,
                      ws.chosen.as<int32_t>(), f(ws.routing_weights), stream);
    HostExperts* host = m.host_experts.get();
    const bool hybrid = hands_off(layer);
    ExpertStacks experts{w.expert_gate, w.expert_up, w.expert_down, w.expert_slots};
    if (host && host->has_host_experts(layer) && streams(layer)) {
      experts = m.expert_stream->queue_layer(layer, experts, stream);
    }
    if (hybrid) host->queue_publish(layer, n, f(ws.normed), ws.chosen.as<int32_t>(), f(ws.routing_weights), stream);
    // A layer with no expert on the GPU (all in host memory, as for stacks the GPU's kernels cannot serve) has no GPU
    // half.
    if (experts.gate.count > 0) gpu_experts(experts, x);
    if (hybrid) host->queue_collect(layer, n, f(ws.residual), stream);
  }

  void gpu_experts(const ExpertStacks& experts, Input& x) const {
    const model::HyperParams& p = m.params;
    const Workspace& ws = m.work;
    cuda::ExpertGroups groups;
    groups.order = ws.order.as<int32_t>();
    groups.chunks = ws.chunks.as<int32_t>();
    groups.chunk_count = ws.chunk_count.as<int32_t>();
    groups.tokens_per_chunk = cuda::tokens_per_expert_chunk(n);
    groups.max_chunks = cuda::max_expert_chunks(n, p.experts, p.experts_used);
    cuda::group_by_expert(ws.chosen.as<int32_t>(), n, p.experts, p.experts_used, experts.slot_of_expert,
                          groups.tokens_per_chunk, ws.order.as<int32_t>(), ws.chunks.as<int32_t>(),
                          ws.chunk_count.as<int32_t>(), stream);
    cuda::expert_gated_matvec(experts.gate, experts.up, x.for_type(experts.gate.type), p.experts_used, groups,
                              f(ws.hidden), stream);
    Input hidden(*this, f(ws.hidden), n * p.experts_used, p.expert_feed_forward);
    cuda::expert_matvec(experts.down, hidden.for_type(experts.down.type), groups, f(ws.expert_out), stream);
    cuda::combine_experts(f(ws.expert_out), f(ws.routing_weights), ws.chosen.as<int32_t>(), experts.slot_of_expert, n,
                          p.experts_used, p.embedding, f(ws.residual), stream);
  }

  void ffn_block(const GpuLayer& w, int64_t layer) const {
    const model::HyperParams& p = m.params;
    const Workspace& ws = m.work;
    cuda::rms_norm(f(ws.residual), n, p.embedding, w.ffn_norm, p.rms_epsilon, f(ws.normed), stream);
    Input x(*this, f(ws.normed), n, p.embedding);
    if (p.experts > 0) {
      moe_ffn(w, layer, x);
    } else {
      dense_ffn(w, x);
    }
  }

  // Queues the pass over the batch uploaded to work.tokens / work.positions: begin(), each
  // layer(), then finish(), which writes the logits of the last `out_rows` rows (none for an
  // early batch of a long prompt) to `logits` (device).
  void begin() const {
    if (hybrid()) m.host_experts->queue_begin_pass(stream);
    cuda::embed(m.token_embedding, m.work.tokens.as<int32_t>(), n, f(m.work.residual), stream);
  }
  void layer(int64_t l) const {
    attention_block(m.layers[l], l);
    ffn_block(m.layers[l], l);
  }
  void run(int64_t out_rows, float* logits) const {
    begin();
    for (int64_t l = 0; l < m.params.layers; ++l) layer(l);
    finish(out_rows, logits);
  }
  void finish(int64_t out_rows, float* logits) const {
    const model::HyperParams& p = m.params;
    const Workspace& ws = m.work;
    cuda::check_launch("the GPU forward pass");
    if (out_rows == 0) return;
    const float* last = f(ws.residual) + (n - out_rows) * p.embedding;
    cuda::rms_norm(last, out_rows, p.embedding, m.output_norm, p.rms_epsilon, f(ws.normed), stream);
    Input normed(*this, f(ws.normed), out_rows, p.embedding);
    mul(m.output, normed, out_rows, logits, false);
    cuda::check_launch("the GPU forward pass");
  }
};

// Serves the host's half of every hybrid layer of the pass the stream runs, in order; on a
// failure, lets the GPU's waits end and realigns the step counters, then rethrows.
void serve_host_experts(HostExperts& host, int64_t layers, int64_t n, const cuda::Stream& stream) {
  try {
    for (int64_t layer = 0; layer < layers; ++layer) {
      if (host.has_host_experts(layer)) host.serve(layer, n, stream);
    }
  } catch (...) {
    host.recover(stream);
    throw;
  }
}

// A hybrid pass not captured in a graph: the host stays one layer ahead of the GPU with its
// launches (the GPU waits in stream order anyway) and serves each layer as it comes.
void run_hybrid(const Pass& pass, int64_t out_rows, float* logits, const cuda::Stream& stream) {
  HostExperts& host = *pass.m.host_experts;
  const int64_t layers = pass.m.params.layers;
  host.start_pass();
  try {
    pass.begin();
    pass.layer(0);
    for (int64_t layer = 0; layer < layers; ++layer) {
      if (layer + 1 < layers) {
        pass.layer(layer + 1);
      } else {
        pass.finish(out_rows, logits);
      }
      if (pass.hands_off(layer)) host.serve(layer, pass.n, stream);
    }
  } catch (...) {
    host.recover(stream);
    throw;
  }
}

}  // namespace

GpuFootprint gpu_footprint(const model::Model& model, int64_t context_size) {
  const model::HyperParams& p = model.params;
  GpuWeights none;
  set_residency(p, std::vector<std::vector<int32_t>>(static_cast<size_t>(p.layers)), none);
  Uploader planner(p);
  bind_weights(model, planner, none);
  GpuFootprint f;
  f.context_size = context_size;
  f.experts = p.experts;
  f.dense_bytes = planner.bytes();
  for (const model::LayerWeights& w : model.layers) {
    if (p.experts == 0) {
      f.expert_bytes.push_back(0);
      continue;
    }
    uint64_t bytes = 0;
    for (const cpu::ExpertMatrices* m : {&w.expert_gate, &w.expert_up, &w.expert_down}) {
      bytes += static_cast<uint64_t>(m->first.rows) * m->first.row_bytes;
    }
    f.expert_bytes.push_back(bytes);
    f.dense_bytes += 3 * 256;  // each of the layer's three pools may round up to 256 bytes
  }
  f.kv_bytes = kv_bytes(p, context_size);
  f.workspace_bytes = workspace_bytes(p);
  f.kernel_gaps = kernel_gaps(model);
  f.stream_bytes = ExpertStream::staging_bytes(model, streamable_layers(p, f.kernel_gaps));
  f.reserve_bytes = kReserve;
  return f;
}

std::shared_ptr<GpuModel> upload_model(const model::Model& model, const GpuOptions& options, int64_t context_size,
                                       cpu::ThreadPool& pool) {
  const cuda::CudaStatus status = cuda::query_cuda();
  if (!status.available) throw Error("GPU_UNAVAILABLE", status.reason);
  if (options.device < 0 || options.device >= static_cast<int>(status.devices.size())) {
    throw Error("GPU_UNAVAILABLE", "gpu.device " + std::to_string(options.device) + " does not exist (" +
                                       std::to_string(status.devices.size()) + " CUDA devices)");
  }
  const model::HyperParams& p = model.params;
  check_shape(p);
  const std::vector<GpuKernelGap> gaps = kernel_gaps(model);

  cuda::use_device(options.device);
  std::shared_ptr<GpuModel> g(new GpuModel, [](GpuModel* m) {
    const std::lock_guard freeing(hybrid_passes());
    delete m;
  });
  // Taken after g, so that a failed upload lets go of it before g's deleter takes it again.
  const std::lock_guard exclusive(hybrid_passes());
  g->device = options.device;
  g->params = p;
  set_residency(p, resident_experts(p, options.gpu_experts), *g);
  check_kernels(gaps, *g);
  const std::vector<bool> streamed = streamable_layers(p, gaps);
  int64_t resident = 0;
  for (const auto& r : g->resident) resident += static_cast<int64_t>(r.size());
  const int64_t all = p.experts * p.layers;
  Uploader planner(p);
  bind_weights(model, planner, *g);
  const size_t workspace = workspace_bytes(p);
  const size_t weights = planner.bytes();
  const size_t kv = kv_bytes(p, context_size);
  const cuda::MemoryInfo memory = cuda::memory_info();
  const uint64_t usable = memory.free > kReserve ? memory.free - kReserve : 0;
  const uint64_t available = options.budget > 0 ? std::min<uint64_t>(options.budget, usable) : usable;
  const uint64_t staging = resident < all ? ExpertStream::staging_bytes(model, streamed) : 0;
  const uint64_t needed = weights + workspace + kv + staging;
  if (needed > available) {
    const std::string limit = options.budget > 0 && options.budget < usable
                                  ? "the gpu budget of " + gib(options.budget)
                                  : gib(memory.free) + " free on " + status.devices[options.device].name +
                                        " less a reserve of " + gib(kReserve);
    const std::string experts =
        all > 0 ? " (" + std::to_string(resident) + " of " + std::to_string(all) + " routed experts on the GPU)" : "";
    throw Error("INSUFFICIENT_MEMORY", "the model needs " + gib(needed) + " of GPU memory: weights " + gib(weights) +
                                           experts + " + KV cache " + gib(kv) + " (contextSize " +
                                           std::to_string(context_size) + ") + workspace " + gib(workspace) +
                                           (staging > 0 ? " + prompt expert staging " + gib(staging) : "") +
                                           "; more than " + limit);
  }
  planner.allocate();
  bind_weights(model, planner, *g);
  g->weights = planner.take();
  allocate_workspace(p, g->work);
  if (resident < all) {
    std::vector<std::vector<uint8_t>> on_host;
    for (const auto& table : g->slot_tables) {
      std::vector<uint8_t> mask;
      for (const int32_t slot : table) mask.push_back(slot < 0 ? 1 : 0);
      on_host.push_back(std::move(mask));
    }
    g->host_experts = std::make_unique<HostExperts>(model, std::move(on_host), kMaxBatch, pool);
    if (staging > 0) g->expert_stream = std::make_unique<ExpertStream>(model, g->slot_tables, streamed);
  }
  return g;
}

std::shared_ptr<GpuSequence> create_gpu_sequence(GpuModel& model, int64_t context_size) {
  cuda::use_device(model.device);
  const model::HyperParams& p = model.params;
  const size_t bytes = kv_bytes(p, context_size);
  const cuda::MemoryInfo memory = cuda::memory_info();
  if (bytes + kReserve > memory.free) {
    throw Error("INSUFFICIENT_MEMORY", "a session's KV cache needs " + gib(bytes) + " (contextSize " +
                                           std::to_string(context_size) + "); the GPU has " + gib(memory.free) +
                                           " free, less a reserve of " + gib(kReserve));
  }
  std::shared_ptr<GpuSequence> s(new GpuSequence, [m = &model](GpuSequence* q) { release_sequence(*m, q); });
  const std::lock_guard exclusive(hybrid_passes());  // after s: see upload_model
  s->layer_elements = context_size * p.kv_heads * p.head_dim;
  s->keys = DeviceBuffer(bytes / 2, "KV cache (keys)");
  s->values = DeviceBuffer(bytes / 2, "KV cache (values)");
  return s;
}

void gpu_forward(GpuModel& model, GpuSequence& sequence, std::span<const int32_t> tokens, int64_t first_position,
                 LogitRows rows, std::vector<float>& logits) {
  const auto started = std::chrono::steady_clock::now();
  cuda::use_device(model.device);
  {
    std::unique_lock exclusive(hybrid_passes(), std::try_to_lock);
    if (exclusive.owns_lock()) model.free_retired();
  }
  std::shared_lock<std::shared_mutex> hybrid_pass;
  if (model.host_experts) hybrid_pass = std::shared_lock(hybrid_passes());
  const model::HyperParams& p = model.params;
  Workspace& ws = model.work;
  const cuda::StreamHandle stream = model.stream.handle();
  const int64_t total = static_cast<int64_t>(tokens.size());
  const bool all = rows == LogitRows::kAll;
  logits.resize(static_cast<size_t>((all ? total : 1) * p.vocab));
  if (all && total > 1) {
    const size_t bytes = static_cast<size_t>(std::min(total, kMaxBatch) * p.vocab) * sizeof(float);
    if (ws.all_logits.bytes() < bytes) ws.all_logits = DeviceBuffer(bytes, "logits of every row");
  }
  std::vector<int32_t> positions;
  for (int64_t first = 0; first < total; first += kMaxBatch) {
    const int64_t n = std::min(kMaxBatch, total - first);
    positions.resize(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) positions[i] = static_cast<int32_t>(first_position + first + i);
    cuda::copy_to_device(ws.tokens.data(), tokens.data() + first, n * sizeof(int32_t), stream);
    cuda::copy_to_device(ws.positions.data(), positions.data(), n * sizeof(int32_t), stream);
    const Pass pass{model, sequence, n, stream};
    const bool last_batch = first + n == total;
    HostExperts* host = model.host_experts.get();
    if (n == 1) {
      // A decode step: every launch reads its position (and a hybrid step its step number)
      // from device memory, so one graph serves each step.
      if (!sequence.decode_step.ready()) {
        sequence.decode_step.begin_capture(stream);
        try {
          pass.run(1, ws.last_logits.as<float>());
        } catch (...) {
          sequence.decode_step.end_capture(stream);
          throw;
        }
        sequence.decode_step.end_capture(stream);
      }
      sequence.decode_step.launch(stream);
      if (host) host->start_pass();  // after the launch, so a failed one leaves the steps aligned
      if (host) serve_host_experts(*host, p.layers, 1, model.stream);
      if (all || last_batch) {
        cuda::copy_to_host(logits.data() + (all ? first * p.vocab : 0), ws.last_logits.data(), p.vocab * sizeof(float),
                           stream);
      }
    } else {
      const int64_t out_rows = all ? n : last_batch ? 1 : 0;
      float* device_logits = all ? ws.all_logits.as<float>() : ws.last_logits.as<float>();
      if (host && pass.streams_any()) host->count_streamed_pass();
      if (pass.hybrid()) {
        run_hybrid(pass, out_rows, device_logits, model.stream);
      } else {
        pass.run(out_rows, device_logits);
      }
      if (out_rows > 0) {
        cuda::copy_to_host(logits.data() + (all ? first * p.vocab : 0), device_logits,
                           out_rows * p.vocab * sizeof(float), stream);
      }
    }
  }
  model.stream.synchronize();
  if (model.host_experts) {
    model.host_experts->add_pass_time(
        std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count());
  }
}

OffloadStats offload_stats(GpuModel& model) {
  if (!model.host_experts) return {};
  cuda::use_device(model.device);
  return model.host_experts->stats();
}

void copy_kv_to_host(GpuModel& model, const GpuSequence& sequence, int64_t n, int64_t packed, uint16_t* keys,
                     uint16_t* values) {
  cuda::use_device(model.device);
  const int64_t width = model.params.kv_heads * model.params.head_dim;
  const size_t bytes = static_cast<size_t>(n * width) * sizeof(uint16_t);
  for (int64_t layer = 0; layer < model.params.layers; ++layer) {
    const int64_t device = layer * sequence.layer_elements, host = layer * packed * width;
    cuda::copy_to_host(keys + host, sequence.keys.as<uint16_t>() + device, bytes, model.stream.handle());
    cuda::copy_to_host(values + host, sequence.values.as<uint16_t>() + device, bytes, model.stream.handle());
  }
  model.stream.synchronize();
}

void copy_kv_to_device(GpuModel& model, GpuSequence& sequence, int64_t n, int64_t packed, const uint16_t* keys,
                       const uint16_t* values) {
  cuda::use_device(model.device);
  const int64_t width = model.params.kv_heads * model.params.head_dim;
  const size_t bytes = static_cast<size_t>(n * width) * sizeof(uint16_t);
  for (int64_t layer = 0; layer < model.params.layers; ++layer) {
    const int64_t device = layer * sequence.layer_elements, host = layer * packed * width;
    cuda::copy_to_device(sequence.keys.as<uint16_t>() + device, keys + host, bytes, model.stream.handle());
    cuda::copy_to_device(sequence.values.as<uint16_t>() + device, values + host, bytes, model.stream.handle());
  }
  model.stream.synchronize();
}

}  // namespace bloomery::engine

#else

namespace bloomery::engine {

class GpuModel {};
class GpuSequence {};

namespace {
[[noreturn]] void refuse() {
  throw Error("GPU_UNAVAILABLE", "this build of bloomery has no CUDA (nvcc was not found when it was compiled)");
}
}  // namespace

GpuFootprint gpu_footprint(const model::Model&, int64_t) { refuse(); }
std::shared_ptr<GpuModel> upload_model(const model::Model&, const GpuOptions&, int64_t, cpu::ThreadPool&) { refuse(); }
std::shared_ptr<GpuSequence> create_gpu_sequence(GpuModel&, int64_t) { refuse(); }
void gpu_forward(GpuModel&, GpuSequence&, std::span<const int32_t>, int64_t, LogitRows, std::vector<float>&) {
  refuse();
}
OffloadStats offload_stats(GpuModel&) { refuse(); }
void copy_kv_to_host(GpuModel&, const GpuSequence&, int64_t, int64_t, uint16_t*, uint16_t*) { refuse(); }
void copy_kv_to_device(GpuModel&, GpuSequence&, int64_t, int64_t, const uint16_t*, const uint16_t*) { refuse(); }

}  // namespace bloomery::engine

#endif
