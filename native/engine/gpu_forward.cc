#include "engine/gpu_forward.h"

#include "base/error.h"

#ifdef BLOOMERY_CUDA

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <list>
#include <map>
#include <mutex>
#include <numeric>
#include <shared_mutex>
#include <span>
#include <string>

#include "cuda/device.h"
#include "cuda/ops.h"
#include "cuda/runtime.h"
#include "engine/expert_stream.h"
#include "engine/gpu_residency.h"
#include "engine/gpu_rope.h"
#include "quant/ggml_types.h"

namespace bloomery::engine {

namespace {

using cuda::ActivationBlock;
using cuda::DeviceBuffer;
using cuda::DeviceMatrix;

// Device memory left to the CUDA context, graphs and kernels' local memory.
constexpr uint64_t kReserve = 512ull << 20;
// Decode-step graphs kept at once: one per set of sequences recently decoded together.
constexpr size_t kDecodeGraphs = 8;

std::string gib(uint64_t bytes) {
  char text[32];
  std::snprintf(text, sizeof text, "%.2f GiB", static_cast<double>(bytes) / (1ull << 30));
  return text;
}

std::string type_name(uint32_t type) {
  const auto info = quant::ggml_type(type);
  return info ? std::string(info->name) : "type " + std::to_string(type);
}

// A block's hyper-connection weights on the card (model::HyperConnectionWeights; empty: none).
struct GpuHyper {
  DeviceMatrix mix;
  const float* base = nullptr;
  const float* scale = nullptr;
};

// One of DeepSeek-V4's compressors on the card (model::CompressorWeights).
struct GpuCompressor {
  DeviceMatrix kv, gate, position_bias;
  const float* norm = nullptr;
};

// A layer's blocks on the card: model::LayerWeights with the weights in device memory.
struct GpuAttention {
  model::AttentionKind kind = model::AttentionKind::kGqa;
  const float* norm = nullptr;
  DeviceMatrix q, k, v, output;  // GQA's q, k, v (MLA: q is attn_q or attn_q_b)
  const float* q_bias = nullptr;
  const float* k_bias = nullptr;
  const float* v_bias = nullptr;
  const float* q_norm = nullptr;
  const float* k_norm = nullptr;
  bool qk_norm_whole = false;        // q_norm and k_norm span each row's whole projection (MiniMax-M2)
  int64_t kv_heads = 0;              // GQA: this layer's (MiMo's differ by layer; the cache's rows hold the most)
  DeviceMatrix q_a, kv_a, k_b, v_b;  // MLA's (k_b and v_b: a stack of one matrix per head)
  const float* q_a_norm = nullptr;
  const float* kv_a_norm = nullptr;
  // A lightning indexer of the layer's own (model::IndexerWeights; empty for a layer that attends
  // the last indexer's choice, or without sparse attention).
  DeviceMatrix indexer_q, indexer_k, indexer_weights;
  const float* indexer_k_norm = nullptr;
  const float* indexer_k_bias = nullptr;
  bool windowed = false;               // attends the last HyperParams::sliding_window positions only
  const float* sinks = nullptr;        // one logit per query head (gpt-oss), or null
  const float* output_bias = nullptr;  // added to the output product (gpt-oss), or null
  // Each head of q's output is [query, gate]: the attention's output is multiplied by sigmoid(gate).
  bool output_gate = false;
  // Gated DeltaNet (model::DeltaNetWeights): qkv and z, or one qkvz; beta and alpha, or one beta_alpha.
  DeviceMatrix qkv, z, qkvz, beta, alpha, beta_alpha;
  const float* conv = nullptr;
  const float* dt_bias = nullptr;
  const float* decay_rate = nullptr;  // DeltaNetWeights::a
  const float* head_norm = nullptr;   // DeltaNetWeights::norm
  // DeepSeek-V4's compressed attention (model::CompressedWeights): q_a, q_a_norm, q (its q_b), kv_a
  // (its kv), kv_a_norm (its kv_norm), indexer_q, indexer_weights and output (its output_b) above;
  // the compressors, and output_a's stack of one matrix per group of heads (the ratio: LayerKinds').
  GpuCompressor compressor, indexer_compressor;
  DeviceMatrix output_a;
  GpuHyper hyper;
};

struct GpuFfn {
  model::FfnKind kind = model::FfnKind::kDense;
  const float* norm = nullptr;
  DeviceMatrix gate, up, down;  // the dense FFN, or an MoE layer's shared experts (empty: none)
  DeviceMatrix router;
  const float* router_bias = nullptr;  // added to the router's logits (gpt-oss), or null
  const float* selection_bias = nullptr;
  const int32_t* token_experts = nullptr;            // hash routing's table (model::RoutedExperts), or null
  DeviceMatrix expert_gate, expert_up, expert_down;  // the routed experts: the layer's slot pool
  const int32_t* expert_slots = nullptr;             // expert -> slot in the pool, -1: in host memory
  // Per-expert biases of the products (gpt-oss), by expert (not slot): all of the layer's experts.
  const float* gate_bias = nullptr;
  const float* up_bias = nullptr;
  const float* down_bias = nullptr;
  DeviceMatrix shared_gate;  // one row: the shared experts' output times sigmoid(shared_gate x) (empty: none)
  GpuHyper hyper;
};

struct GpuLayer {
  GpuAttention attention;
  GpuFfn ffn;
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
  // Copies every range to its place in `arena`, in pieces between which `progress` hears how far.
  void upload(const DeviceBuffer& arena, const LoadProgress& progress) const {
    uint64_t total = 0, done = 0;
    for (const Range& r : ranges_) total += r.bytes;
    const uint64_t piece = progress_piece(total);
    if (progress) progress(LoadStep::kUpload, 0, total);
    for (const Range& r : ranges_) {
      for (size_t at = 0; at < r.bytes; at += piece) {
        const size_t bytes = std::min<size_t>(piece, r.bytes - at);
        cuda::upload(arena.as<uint8_t>() + r.offset + at, static_cast<const uint8_t*>(r.host) + at, bytes);
        done += bytes;
        if (progress) progress(LoadStep::kUpload, done, total);
      }
    }
    if (progress && total == 0) progress(LoadStep::kUpload, 0, 0);
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

// The pass's buffers, sized for the model's pass rows; `logits` holds one row at first and grows to
// the most rows of logits a pass has returned, `embeddings` (the normed hidden states of
// kEmbeddings rows) is empty until a pass returns some and grows likewise.
struct Workspace {
  DeviceBuffer residual, normed, q, k, v, attention, gate, up, hidden, expert_out, router_logits, routing_weights;
  DeviceBuffer chosen, order, chunks, chunk_count, tokens, positions, activations, logits, embeddings;
  DeviceBuffer attention_scratch;
  DeviceBuffer route_ticket;  // cuda::route_decode's counter, zero between launches
  // A pass's routing taken from a trace (engine/routing_replay.h): [layer][row][used], allocated
  // on the first such pass.
  DeviceBuffer replayed_routing;
  // Multi-head latent attention (empty for other models): the per-head products run as routed
  // experts do, each (token, head) slot routed to its head's matrix by a fixed routing
  // (latent_heads[token * heads + h] = h, latent_slots[h] = h) grouped once per pass.
  DeviceBuffer latent_a, latent_b, latent_heads, latent_slots, latent_order, latent_chunks, latent_chunk_count;
  // Gated DeltaNet (empty for other models): the convolution's channels, the output gate z, the
  // fused projections' rows before they are split, each head's beta and decay.
  DeviceBuffer mixed, z, grouped, beta, decay;
  // Gated attention's [query, gate] heads and its gates; the gated shared experts' output and gate.
  DeviceBuffer q_gated, attention_gate, shared_out, shared_gate;
  // DeepSeek sparse attention (empty for other models): the lightning indexer's queries, keys and
  // head weights, each row's selected positions (kept from layer to layer: a layer without an
  // indexer attends the last one's choice), and the scores' scratch.
  DeviceBuffer indexer_q, indexer_k, indexer_weights, selected, indexer_scratch;
  // Hyper-connections (DeepSeek-V4; empty for other models; the residual holds each row's streams):
  // the streams normed as one row, a block's mixes and its input, output and streams' weights; the
  // block's input before its norm (also the head's join of the streams), and its output, which
  // hyper_post spreads over the streams.
  DeviceBuffer hyper_normed, hyper_mixes, hyper_pre, hyper_post, hyper_comb, hyper_input, block_out;
  // DeepSeek-V4's compressed attention: its compressors' values and scores (the attention's rows'
  // and the indexer's keys'), and output_a's products run as the per-head ones are, each (token,
  // group) slot routed to its group's matrix (group_heads[token * groups + g] = g, group_slots[g] = g).
  DeviceBuffer compressor_values, compressor_scores, indexer_values, indexer_scores;
  DeviceBuffer group_heads, group_slots, group_order, group_chunks, group_chunk_count;
};

// The weights' places in device memory, and which experts are there: what bind_weights
// fills (also for gpu_footprint, which needs no device).
struct GpuWeights {
  std::vector<std::vector<int32_t>> resident;  // per layer, the GPU's experts, in slot order
  // Per layer, expert -> slot (-1: host), uploaded with the weights: the host's view of the device
  // tables, which adaptive residency (GpuResidency) rewrites between passes.
  std::vector<std::vector<int32_t>> slot_tables;
  DeviceMatrix token_embedding, output;
  const float* output_norm = nullptr;
  GpuHyper output_hyper;  // the head's mix of the residual streams (DeepSeek-V4), or empty
  const float* freq_factors = nullptr;
  std::vector<GpuLayer> layers;
};

// The KV caches a decode step's launches address, sequence by sequence: its keys, values,
// recurrent states and compressed rows, and the position its windowed layers' storage begins at.
struct StepCaches {
  const void* keys = nullptr;
  const void* values = nullptr;
  const void* recurrent = nullptr;
  const void* compressed = nullptr;
  int64_t window_first = 0;
  bool operator==(const StepCaches&) const = default;
};

// The graph of decode steps of one set of sequences, and the caches it was captured with: its
// attention launches' parameters.
struct DecodeGraph {
  cuda::Graph graph;
  std::vector<StepCaches> caches;
};

// The layers' kinds that size a sequence's cache and the workspace: per layer, 1 for a
// sliding-window layer (`windowed`), 1 for a layer of linear attention (`linear`: a recurrent
// state, no rows), and compressed attention's ratio (`ratio`: DeepSeek-V4's
// CompressedParams::ratios; 0 for other layers); whether any attention has an output gate, and
// any FFN a gated shared expert.
struct LayerKinds {
  std::vector<uint8_t> windowed, linear;
  std::vector<int64_t> ratio;
  bool output_gate = false, shared_gate = false;
  LayerKinds() = default;
  explicit LayerKinds(const model::Model& m) : windowed(model::windowed_layers(m)) {
    for (size_t l = 0; l < m.layers.size(); ++l) {
      const model::LayerWeights& w = m.layers[l];
      linear.push_back(w.attention.kind == model::AttentionKind::kDeltaNet);
      ratio.push_back(w.attention.kind == model::AttentionKind::kCompressed ? w.attention.compressed.ratio : 0);
      output_gate = output_gate || w.attention.gqa.output_gate;
      shared_gate = shared_gate || !w.ffn.shared_gate.empty();
    }
  }
  // Rows of layer l's cache for a context of `context`, `window` rows in a windowed layer.
  int64_t rows(size_t l, int64_t context, int64_t window) const {
    if (linear[l]) return 0;
    return windowed[l] ? window : context;
  }
  int64_t linear_layers() const { return std::count(linear.begin(), linear.end(), 1); }
  // Floats of layer l's recurrent state: linear attention's, or the rings of a compressed layer's
  // compressors (as the CPU's KvCache holds them); 0: none.
  int64_t state_floats(const model::HyperParams& p, size_t l) const {
    if (linear[l]) return p.delta_net.state_floats();
    return model::CompressedParams::state_floats(ratio[l], p.head_dim, p.indexer.head_dim);
  }
  int64_t recurrent_floats(const model::HyperParams& p) const {
    int64_t floats = 0;
    for (size_t l = 0; l < linear.size(); ++l) floats += state_floats(p, l);
    return floats;
  }
  // Halves of layer l's compressed rows for a context of `context` (one row per `ratio` positions).
  int64_t compressed_halves(const model::HyperParams& p, size_t l, int64_t context) const {
    return ratio[l] > 0 ? context / ratio[l] * model::compressed_width_at_ratio(p, ratio[l]) : 0;
  }
  int64_t compressed_halves(const model::HyperParams& p, int64_t context) const {
    int64_t halves = 0;
    for (size_t l = 0; l < ratio.size(); ++l) halves += compressed_halves(p, l, context);
    return halves;
  }
};

class GpuModel : public GpuWeights {
 public:
  int device = 0;
  model::HyperParams params;
  int64_t context_size = 0;          // the most positions a sequence's KV cache holds: what the workspace is sized for
  int64_t pass_rows = kGpuPassRows;  // the most rows of a pass (gpu_pass_rows)
  LayerKinds kinds;
  // Whether every layer's per-head latent products (k_b, v_b) have tiled kernels: one grouping
  // of a pass's (token, head) slots serves them all, so they take the tiles together or not at all.
  bool latent_tiles = false;
  bool group_tiles = false;                     // the same for DeepSeek-V4's output groups (output_a)
  std::unique_ptr<HostExperts> host_experts;    // set when some experts live in host memory: decode and short prompts
  std::unique_ptr<ExpertStream> expert_stream;  // with host_experts: long prompts copy them to the GPU
  std::unique_ptr<GpuResidency> residency;      // with host_experts: moves experts between passes
  // Rows routed to each (layer, expert) since load, counted on the device (wrapping), copied to
  // mapped host memory at the end of each gpu_forward; `routed_taken` is what take_routed_calls saw.
  DeviceBuffer routed;
  cuda::PinnedBuffer routed_host;
  std::vector<uint32_t> routed_taken;
  DeviceBuffer weights;
  cuda::Stream stream;
  cuda::Stream restore_stream;  // restore_kv's copies, beside the passes
  // The prompt-state cache's states of this model's sessions (state_memory).
  std::unique_ptr<cuda::PinnedPool> state_pool;
  Workspace work;
  // Most recently used first, at most kDecodeGraphs. Captured with the workspace's addresses:
  // dropped when `work.logits` grows, and when routing starts or stops being replayed.
  std::list<DecodeGraph> decode_graphs;
  bool replaying_routing = false;  // the passes take their routing from work.replayed_routing

  // Sequences released while a hybrid pass runs anywhere (see hybrid_passes), freed later.
  std::mutex retired_mutex;
  std::vector<GpuSequence*> retired;

  ~GpuModel();
  void free_retired();
};

class GpuSequence {
 public:
  // Per layer, f16 rows of model::cache_row's widths: `capacity` rows of a layer of full
  // attention; window_rows rows of a windowed layer, holding positions [window_first,
  // window_first + window_rows) (see make_window_room).
  DeviceBuffer keys, values;
  int64_t capacity = 0;  // the positions a sequence may reach (its context)
  model::CacheRow row;
  std::vector<uint8_t> windowed;     // per layer
  std::vector<int64_t> rows_before;  // per layer, the rows of the layers before it (a linear layer has none)
  // The recurrent states of the layers of linear attention (model::DeltaNetParams::state_floats
  // each), layer after layer as a SessionState holds them; per layer, the floats before its
  // state (-1: none). Zeroed by the pass that starts the sequence at position 0.
  DeviceBuffer recurrent;
  std::vector<int64_t> recurrent_before;
  std::vector<uint8_t> linear;  // per layer, 1 for linear attention: a recurrent state and no rows
  // DeepSeek-V4's compressed rows (LayerKinds::compressed_halves a layer, f16, rows of
  // model::compressed_row_width), layer after layer; per layer, the halves before its rows (-1: none).
  DeviceBuffer compressed;
  std::vector<int64_t> compressed_before;
  DeviceBuffer kept_recurrent;  // keep_recurrent_on_device's copy (allocated by its first call)
  int64_t window_rows = 0;      // of each windowed layer (0: none)
  int64_t window_first = 0;     // the position a windowed layer's first row holds
  // A restore_kv whose copies may still run: per layer, the event after its rows' copies, and the
  // host rows they read (null when none may run).
  std::vector<std::unique_ptr<cuda::Event>> layer_restored;
  std::shared_ptr<const void> restoring;

  ~GpuSequence() { settle_restore(); }
  // The layer's rows as the kernels address them: position p's at keys_of(layer) + p * row.keys.
  // A windowed layer's address lies window_first rows before its storage (the kernels read no
  // position before the window, which starts at or after window_first).
  uint16_t* keys_of(int64_t layer) const { return address(keys, layer, row.keys); }
  uint16_t* values_of(int64_t layer) const { return address(values, layer, row.values); }
  // The layer's first stored row (position window_first of a windowed layer, else 0).
  uint16_t* stored_keys(int64_t layer) const { return keys.as<uint16_t>() + rows_before[layer] * row.keys; }
  uint16_t* stored_values(int64_t layer) const { return values.as<uint16_t>() + rows_before[layer] * row.values; }
  int64_t first_stored(int64_t layer) const { return windowed[layer] ? window_first : 0; }
  float* recurrent_of(int64_t layer) const { return recurrent.as<float>() + recurrent_before[layer]; }
  uint16_t* compressed_of(int64_t layer) const { return compressed.as<uint16_t>() + compressed_before[layer]; }
  // The host waits for a restore's copies (the last layer's are queued last), then lets go of its rows.
  void settle_restore() {
    if (!restoring) return;
    try {
      layer_restored.back()->synchronize();
    } catch (...) {
      // A failed copy leaves rows no pass reads before another restore or evaluation rewrites them.
    }
    restoring.reset();
  }

 private:
  uint16_t* address(const DeviceBuffer& rows, int64_t layer, int64_t width) const {
    // In unsigned arithmetic: the address may precede the allocation; no kernel reads there.
    const int64_t element = (rows_before[layer] - first_stored(layer)) * width;
    return reinterpret_cast<uint16_t*>(reinterpret_cast<uintptr_t>(rows.data()) +
                                       static_cast<uintptr_t>(element) * sizeof(uint16_t));
  }
};

namespace {

// Makes `device` current for frees, from a destructor or a deleter, which must not throw: if the
// CUDA runtime cannot select it (it is unloading as the process exits), the frees that follow
// fail quietly and the driver reclaims the memory with the context.
void select_device_to_free(int device) noexcept {
  try {
    cuda::use_device(device);
  } catch (...) {
    // Nothing to report to: the memory goes with the context.
  }
}

}  // namespace

GpuModel::~GpuModel() { free_retired(); }

void GpuModel::free_retired() {
  std::vector<GpuSequence*> sequences;
  {
    std::lock_guard lock(retired_mutex);
    sequences.swap(retired);
  }
  if (!sequences.empty()) select_device_to_free(device);
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
    select_device_to_free(model.device);
    delete sequence;
    return;
  }
  std::lock_guard lock(model.retired_mutex);
  model.retired.push_back(sequence);
}

}  // namespace

namespace {

// Attention over a sequence's KV cache of `context_size` positions.
cuda::AttentionShape attention_shape(const model::HyperParams& p, int64_t context_size) {
  cuda::AttentionShape shape{p.heads, p.kv_heads, p.head_dim, p.attention_scale, context_size};
  const model::CacheRow row = model::cache_row(p);
  shape.value_dim = p.value_dim;
  shape.key_row = row.keys;
  shape.value_row = row.values;
  return shape;
}

// Rows of a windowed layer's cache for a context of `context` and passes of `pass_rows` rows:
// the window, its alignment and a pass (which stores all its rows before any of them attends),
// never more than the context. llama.cpp's iSWA cache holds the window and a batch likewise.
int64_t window_rows(const model::HyperParams& p, int64_t context, int64_t pass_rows) {
  return std::min(context, p.sliding_window + model::kWindowAlign + pass_rows);
}

// A sequence's cache: its layers' KV rows, compressed rows and recurrent states.
size_t kv_bytes(const model::HyperParams& p, const LayerKinds& kept, int64_t context_size, int64_t pass_rows) {
  const model::CacheRow row = model::cache_row(p);
  int64_t rows = 0;
  for (size_t l = 0; l < kept.windowed.size(); ++l) {
    rows += kept.rows(l, context_size, window_rows(p, context_size, pass_rows));
  }
  return static_cast<size_t>(rows * (row.keys + row.values) + kept.compressed_halves(p, context_size)) *
             sizeof(uint16_t) +
         static_cast<size_t>(kept.recurrent_floats(p)) * sizeof(float);
}

// The workspace's buffers, in bytes, in Workspace's order (`logits` as first allocated).
std::vector<std::pair<const char*, size_t>> workspace_sizes(const model::HyperParams& p, const LayerKinds& kinds,
                                                            int64_t context_size, int64_t pass_rows) {
  const auto floats = [](int64_t count) { return static_cast<size_t>(count) * sizeof(float); };
  const auto ints = [](int64_t count) { return static_cast<size_t>(count) * sizeof(int32_t); };
  const int64_t b = pass_rows;
  const model::MlaParams& mla = p.mla;
  const bool latent = mla.kv_lora_rank > 0;
  const int64_t q_width = p.heads * p.head_dim, kv_width = model::cache_row(p).keys;
  const int64_t v_width = model::cache_row(p).values;
  // MLA: v holds the rotated queries, attention the attended latents, latent_b the absorbed
  // queries (and the normed low-rank ones), latent_a the unrotated queries and the heads' values.
  const int64_t slots = latent ? b * p.heads : 0;
  const model::DeltaNetParams& d = p.delta_net;
  const bool delta_net = kinds.linear_layers() > 0;
  const int64_t attended =
      std::max({q_width, p.heads * p.value_dim, p.heads * mla.kv_lora_rank, delta_net ? d.value_width() : 0});
  const int64_t latent_a = std::max(mla.nope_dim, mla.value_dim), latent_b = mla.kv_lora_rank;
  const int64_t routed = b * p.experts_used;
  const int64_t dense = std::max(p.feed_forward, p.shared_feed_forward);  // the dense FFN's or the shared experts'
  // Also an attention output product, before add_projection adds its bias.
  const int64_t hidden = std::max({b * dense, routed * p.expert_feed_forward, b * p.embedding});
  const int64_t widest =
      std::max({b * p.embedding, b * attended, hidden, slots * std::max(latent_a, latent_b),
                b * p.hyper.streams * p.embedding, b * p.compressed.output_groups * p.compressed.output_rank});
  // The matvec's chunks are the smaller (kMmqTileTokens for the tiles), so they bound the count.
  const int64_t chunks =
      p.experts > 0 ? cuda::max_expert_chunks(b, p.experts, p.experts_used, cuda::tokens_per_expert_chunk(b)) : 0;
  const int64_t latent_chunks =
      latent ? cuda::max_expert_chunks(b, p.heads, p.heads, cuda::tokens_per_expert_chunk(b)) : 0;
  const size_t attention_scratch =
      latent ? cuda::latent_attention_scratch_bytes(p.heads, mla.kv_lora_rank, context_size, b)
             : cuda::attention_scratch_bytes(attention_shape(p, context_size), b);
  const model::IndexerParams& x = p.indexer;
  const bool sparse = x.top_k > 0;
  const int64_t streams = p.hyper.streams;
  const model::CompressedParams& c = p.compressed;
  const bool compressed = c.q_lora_rank > 0;
  // A compressor's row is twice as wide where blocks overlap (the indexed layers').
  const int64_t compressor_width = compressed ? 2 * p.head_dim : 0, indexer_width = compressed ? 2 * x.head_dim : 0;
  const int64_t group_slots = compressed ? b * c.output_groups : 0;
  const int64_t group_chunks =
      compressed ? cuda::max_expert_chunks(b, c.output_groups, c.output_groups, cuda::tokens_per_expert_chunk(b)) : 0;
  return {{"residual", floats(b * std::max<int64_t>(streams, 1) * p.embedding)},
          {"normed", floats(b * std::max(p.embedding, c.q_lora_rank))},
          {"q", floats(b * q_width)},
          {"k", floats(b * kv_width)},
          {"v", floats(std::max({b * kv_width, b * v_width, slots * mla.rope_dim}))},
          {"attention", floats(b * attended)},
          {"gate", floats(b * dense)},
          {"up", floats(b * dense)},
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
          {"logits", floats(p.vocab)},
          {"attention_scratch", attention_scratch},
          {"route_ticket", ints(1)},
          {"latent_a", floats(slots * latent_a)},
          {"latent_b", floats(std::max({slots * latent_b, b * mla.q_lora_rank, b * c.q_lora_rank}))},
          {"latent_heads", ints(slots)},
          {"latent_slots", ints(latent ? p.heads : 0)},
          {"latent_order", ints(slots)},
          {"latent_chunks", ints(3 * latent_chunks)},
          {"latent_chunk_count", ints(1)},
          {"mixed", floats(delta_net ? b * d.channels() : 0)},
          {"z", floats(delta_net ? b * d.value_width() : 0)},
          {"grouped", floats(std::max(delta_net ? b * std::max(d.channels() + d.value_width(), 2 * d.v_heads) : 0,
                                      group_slots * c.output_rank))},
          {"beta", floats(delta_net ? b * d.v_heads : 0)},
          {"decay", floats(delta_net ? b * d.v_heads : 0)},
          {"q_gated", floats(kinds.output_gate ? 2 * b * q_width : 0)},
          {"attention_gate", floats(kinds.output_gate ? b * q_width : 0)},
          {"shared_out", floats(kinds.shared_gate ? b * p.embedding : 0)},
          {"shared_gate", floats(kinds.shared_gate ? b : 0)},
          {"indexer_q", floats(sparse ? b * x.heads * x.head_dim : 0)},
          {"indexer_k", floats(sparse ? b * x.head_dim : 0)},
          {"indexer_weights", floats(sparse ? b * x.heads : 0)},
          {"selected", ints(sparse ? b * x.top_k : 0)},
          {"indexer_scratch", sparse ? cuda::indexer_scratch_bytes(context_size, b) : 0},
          {"hyper_normed", floats(b * streams * p.embedding)},
          {"hyper_mixes", floats(b * (2 + streams) * streams)},
          {"hyper_pre", floats(b * streams)},
          {"hyper_post", floats(b * streams)},
          {"hyper_comb", floats(b * streams * streams)},
          {"hyper_input", floats(streams > 0 ? b * p.embedding : 0)},
          {"block_out", floats(streams > 0 ? b * p.embedding : 0)},
          {"compressor_values", floats(b * compressor_width)},
          {"compressor_scores", floats(b * compressor_width)},
          {"indexer_values", floats(b * indexer_width)},
          {"indexer_scores", floats(b * indexer_width)},
          {"group_heads", ints(group_slots)},
          {"group_slots", ints(compressed ? c.output_groups : 0)},
          {"group_order", ints(group_slots)},
          {"group_chunks", ints(3 * group_chunks)},
          {"group_chunk_count", ints(compressed ? 1 : 0)}};
}

// Routes slot i of `heads` (token * count + k) to matrix k, and matrix k to slot k of `slots`.
void fixed_routing(int64_t count, const DeviceBuffer& heads, const DeviceBuffer& slots) {
  std::vector<int32_t> head(heads.bytes() / sizeof(int32_t)), slot(static_cast<size_t>(count));
  for (size_t i = 0; i < head.size(); ++i) head[i] = static_cast<int32_t>(i % static_cast<size_t>(count));
  std::iota(slot.begin(), slot.end(), 0);
  cuda::upload(heads.data(), head.data(), head.size() * sizeof(int32_t));
  cuda::upload(slots.data(), slot.data(), slot.size() * sizeof(int32_t));
}

void allocate_workspace(const model::HyperParams& p, const LayerKinds& kinds, int64_t context_size, int64_t pass_rows,
                        Workspace& w) {
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
                             &w.logits,
                             &w.attention_scratch,
                             &w.route_ticket,
                             &w.latent_a,
                             &w.latent_b,
                             &w.latent_heads,
                             &w.latent_slots,
                             &w.latent_order,
                             &w.latent_chunks,
                             &w.latent_chunk_count,
                             &w.mixed,
                             &w.z,
                             &w.grouped,
                             &w.beta,
                             &w.decay,
                             &w.q_gated,
                             &w.attention_gate,
                             &w.shared_out,
                             &w.shared_gate,
                             &w.indexer_q,
                             &w.indexer_k,
                             &w.indexer_weights,
                             &w.selected,
                             &w.indexer_scratch,
                             &w.hyper_normed,
                             &w.hyper_mixes,
                             &w.hyper_pre,
                             &w.hyper_post,
                             &w.hyper_comb,
                             &w.hyper_input,
                             &w.block_out,
                             &w.compressor_values,
                             &w.compressor_scores,
                             &w.indexer_values,
                             &w.indexer_scores,
                             &w.group_heads,
                             &w.group_slots,
                             &w.group_order,
                             &w.group_chunks,
                             &w.group_chunk_count};
  const auto sizes = workspace_sizes(p, kinds, context_size, pass_rows);
  for (size_t i = 0; i < sizes.size(); ++i) *buffers[i] = DeviceBuffer(sizes[i].second, sizes[i].first);
  // The fixed routing of the per-head products: slot token * heads + h to head h, head h in slot h;
  // and of DeepSeek-V4's grouped output product, slot token * groups + g to group g.
  if (p.mla.kv_lora_rank > 0) fixed_routing(p.heads, w.latent_heads, w.latent_slots);
  if (p.compressed.q_lora_rank > 0) fixed_routing(p.compressed.output_groups, w.group_heads, w.group_slots);
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
  const int32_t* ints(const int32_t* host, int64_t count) {
    return resolve<int32_t>(plan_.place(host, static_cast<size_t>(count) * sizeof(int32_t)));
  }
  const int32_t* table(const std::vector<int32_t>& host) {
    return ints(host.data(), static_cast<int64_t>(host.size()));
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
  void allocate(const LoadProgress& progress) {
    arena_ = DeviceBuffer(plan_.total(), "model weights");
    plan_.upload(arena_, progress);
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

GpuHyper bind_hyper(const model::HyperConnectionWeights& h, int64_t base, int64_t scale, Uploader& up) {
  return {up.matrix(h.mix), up.vector(h.base, base), up.vector(h.scale, scale)};
}

GpuCompressor bind_compressor(const model::CompressorWeights& c, int64_t dim, Uploader& up) {
  return {up.matrix(c.kv), up.matrix(c.gate), up.matrix(c.position_bias), up.vector(c.norm, dim)};
}

// DeepSeek-V4's compressed attention into GpuAttention's fields (see there).
void bind_compressed(const model::HyperParams& p, const model::CompressedWeights& c, Uploader& up, GpuAttention& da) {
  da.q_a = up.matrix(c.q_a);
  da.q_a_norm = up.vector(c.q_a_norm, p.compressed.q_lora_rank);
  da.q = up.matrix(c.q_b);
  da.kv_a = up.matrix(c.kv);
  da.kv_a_norm = up.vector(c.kv_norm, p.head_dim);
  da.compressor = bind_compressor(c.compressor, p.head_dim, up);
  da.indexer_compressor = bind_compressor(c.indexer_compressor, p.indexer.head_dim, up);
  da.indexer_q = up.matrix(c.indexer_q);
  da.indexer_weights = up.matrix(c.indexer_weights);
  da.output_a = up.matrix(c.output_a.first, c.output_a.count);
}

void bind_weights(const model::Model& m, Uploader& up, GpuWeights& g) {
  const model::HyperParams& p = m.params;
  const int64_t q_width = p.heads * p.head_dim;
  const int64_t streams = p.hyper.streams;
  g.token_embedding = up.matrix(m.token_embedding);
  g.output = up.matrix(m.output);
  g.output_norm = up.vector(m.output_norm, p.embedding);
  g.output_hyper = bind_hyper(m.output_hyper, streams, 1, up);
  g.freq_factors = up.vector(p.rope.freq_factors, p.rope.dims / 2);
  g.layers.resize(m.layers.size());
  for (size_t l = 0; l < m.layers.size(); ++l) {
    const model::AttentionWeights& a = m.layers[l].attention;
    GpuAttention& da = g.layers[l].attention;
    da.kind = a.kind;
    da.norm = up.vector(a.norm, p.embedding);
    da.q = up.matrix(model::is_latent(a.kind) ? a.mla.q : a.gqa.q);
    da.k = up.matrix(a.gqa.k);
    da.v = up.matrix(a.gqa.v);
    da.output = up.matrix(a.output);
    const int64_t kv_width = a.gqa.kv_heads * p.head_dim;
    da.q_bias = up.vector(a.gqa.q_bias, q_width);
    da.k_bias = up.vector(a.gqa.k_bias, kv_width);
    da.v_bias = up.vector(a.gqa.v_bias, a.gqa.kv_heads * p.value_dim);
    da.qk_norm_whole = a.gqa.qk_norm_whole;
    da.kv_heads = a.gqa.kv_heads;
    da.q_norm = up.vector(a.gqa.q_norm, a.gqa.qk_norm_whole ? q_width : p.head_dim);
    da.k_norm = up.vector(a.gqa.k_norm, a.gqa.qk_norm_whole ? kv_width : p.head_dim);
    da.q_a = up.matrix(a.mla.q_a);
    da.q_a_norm = up.vector(a.mla.q_a_norm, p.mla.q_lora_rank);
    da.kv_a = up.matrix(a.mla.kv_a);
    da.kv_a_norm = up.vector(a.mla.kv_a_norm, p.mla.kv_lora_rank);
    da.k_b = up.matrix(a.mla.k_b.first, a.mla.k_b.count);
    da.v_b = up.matrix(a.mla.v_b.first, a.mla.v_b.count);
    da.indexer_q = up.matrix(a.indexer.q);
    da.indexer_k = up.matrix(a.indexer.k);
    da.indexer_weights = up.matrix(a.indexer.head_weights);
    da.indexer_k_norm = up.vector(a.indexer.k_norm, p.indexer.head_dim);
    da.indexer_k_bias = up.vector(a.indexer.k_norm_bias, p.indexer.head_dim);
    da.windowed = a.windowed;
    da.sinks = up.vector(a.sinks, p.heads);
    da.output_bias = up.vector(a.output_bias, p.embedding);
    da.output_gate = a.gqa.output_gate;
    const model::DeltaNetWeights& dn = a.delta_net;
    const model::DeltaNetParams& d = p.delta_net;
    da.qkv = up.matrix(dn.qkv);
    da.z = up.matrix(dn.z);
    da.qkvz = up.matrix(dn.qkvz);
    da.beta = up.matrix(dn.beta);
    da.alpha = up.matrix(dn.alpha);
    da.beta_alpha = up.matrix(dn.beta_alpha);
    da.conv = up.vector(dn.conv, d.channels() * d.conv_kernel);
    da.dt_bias = up.vector(dn.dt_bias, d.v_heads);
    da.decay_rate = up.vector(dn.a, d.v_heads);
    da.head_norm = up.vector(dn.norm, d.head_dim);
    if (a.kind == model::AttentionKind::kCompressed) bind_compressed(p, a.compressed, up, da);
    da.hyper = bind_hyper(a.hyper, (2 + streams) * streams, 3, up);
    const model::FfnWeights& f = m.layers[l].ffn;
    GpuFfn& df = g.layers[l].ffn;
    df.kind = f.kind;
    df.norm = up.vector(f.norm, p.embedding);
    df.gate = up.matrix(f.dense.gate);
    df.up = up.matrix(f.dense.up);
    df.down = up.matrix(f.dense.down);
    df.shared_gate = up.matrix(f.shared_gate);
    df.hyper = bind_hyper(f.hyper, (2 + streams) * streams, 3, up);
    if (f.kind != model::FfnKind::kMoe) continue;
    df.router = up.matrix(f.routed.router);
    df.router_bias = up.vector(f.routed.router_bias, p.experts);
    df.selection_bias = up.vector(f.routed.selection_bias, p.experts);
    df.token_experts = up.ints(f.routed.token_experts, p.vocab * p.experts_used);
    df.gate_bias = up.vector(f.routed.biases.gate, p.experts * p.expert_feed_forward);
    df.up_bias = up.vector(f.routed.biases.up, p.experts * p.expert_feed_forward);
    df.down_bias = up.vector(f.routed.biases.down, p.experts * p.embedding);
    df.expert_gate = up.experts(f.routed.gate, g.resident[l]);
    df.expert_up = up.experts(f.routed.up, g.resident[l]);
    df.expert_down = up.experts(f.routed.down, g.resident[l]);
    df.expert_slots = up.table(g.slot_tables[l]);
  }
}

// Per layer, the GPU's experts (sorted, so neighbours upload as one range), from the
// requested lists (empty: all of them; none in a layer without routed experts); INVALID_ARGUMENT
// for lists that do not fit the model.
std::vector<std::vector<int32_t>> resident_experts(const model::Model& m,
                                                   const std::vector<std::vector<int32_t>>& requested) {
  const model::HyperParams& p = m.params;
  std::vector<std::vector<int32_t>> resident(static_cast<size_t>(p.layers));
  if (!requested.empty() && static_cast<int64_t>(requested.size()) != p.layers) {
    throw Error("INVALID_ARGUMENT", "gpu experts name " + std::to_string(requested.size()) + " layers; the model has " +
                                        std::to_string(p.layers));
  }
  for (size_t l = 0; l < resident.size(); ++l) {
    const bool routed = !m.layers[l].ffn.routed.empty();
    if (requested.empty()) {
      if (!routed) continue;
      resident[l].resize(static_cast<size_t>(p.experts));
      std::iota(resident[l].begin(), resident[l].end(), 0);
      continue;
    }
    if (!routed && !requested[l].empty()) {
      throw Error("INVALID_ARGUMENT",
                  "gpu experts were listed for layer " + std::to_string(l) + ", which has no routed experts");
    }
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

size_t workspace_bytes(const model::HyperParams& p, const LayerKinds& kinds, int64_t context_size, int64_t pass_rows) {
  size_t bytes = 0;
  for (const auto& [name, size] : workspace_sizes(p, kinds, context_size, pass_rows)) bytes += (size + 255) / 256 * 256;
  return bytes;
}

// The growth of the workspace and of a sequence's windowed layers from passes of kGpuPassRows
// rows to passes of `pass_rows`.
size_t pass_growth(const model::HyperParams& p, const LayerKinds& kinds, int64_t context_size, int64_t pass_rows) {
  return workspace_bytes(p, kinds, context_size, pass_rows) - workspace_bytes(p, kinds, context_size, kGpuPassRows) +
         kv_bytes(p, kinds, context_size, pass_rows) - kv_bytes(p, kinds, context_size, kGpuPassRows);
}

// The rows of a pass that streams host experts through `staging` bytes: kStreamedPassRows where
// the workspace and a sequence's windows grow by no more than the staging takes (so at most
// doubling what streaming costs in device memory), else kGpuPassRows: a small model's experts
// copy in no time, and its workspace would outgrow them.
int64_t streamed_pass_rows(const model::HyperParams& p, const LayerKinds& kinds, int64_t context_size,
                           uint64_t staging) {
  return pass_growth(p, kinds, context_size, kStreamedPassRows) <= staging ? kStreamedPassRows : kGpuPassRows;
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
  if (!m.output_hyper.mix.empty() && !cuda::matvec_supports(m.output_hyper.mix.kernels->type)) {
    no_kernel(m.output_hyper.mix, "output_hc_fn.weight", "matvec");
  }
  for (size_t l = 0; l < m.layers.size(); ++l) {
    const model::AttentionWeights& a = m.layers[l].attention;
    const model::FfnWeights& f = m.layers[l].ffn;
    const std::string layer = "blk." + std::to_string(l) + ".";
    const char* gate = f.kind == model::FfnKind::kMoe ? "ffn_gate_shexp" : "ffn_gate";
    const char* up = f.kind == model::FfnKind::kMoe ? "ffn_up_shexp" : "ffn_up";
    const char* down = f.kind == model::FfnKind::kMoe ? "ffn_down_shexp" : "ffn_down";
    const bool low_rank_q = !a.mla.q_a.empty();
    for (const auto& [matrix, name] :
         {std::pair{&a.gqa.q, "attn_q"},
          std::pair{&a.gqa.k, "attn_k"},
          std::pair{&a.gqa.v, "attn_v"},
          std::pair{&a.mla.q_a, "attn_q_a"},
          std::pair{&a.mla.q, low_rank_q ? "attn_q_b" : "attn_q"},
          std::pair{&a.mla.kv_a, "attn_kv_a_mqa"},
          std::pair{&a.mla.k_b.first, "attn_k_b"},
          std::pair{&a.mla.v_b.first, "attn_v_b"},
          std::pair{&a.indexer.q, "indexer.attn_q_b"},
          std::pair{&a.indexer.k, "indexer.attn_k"},
          std::pair{&a.indexer.head_weights, "indexer.proj"},
          std::pair{&a.output, a.kind == model::AttentionKind::kDeltaNet ? "ssm_out" : "attn_output"},
          std::pair{&f.dense.gate, gate},
          std::pair{&f.dense.up, up},
          std::pair{&f.dense.down, down},
          std::pair{&f.routed.router, "ffn_gate_inp"},
          std::pair{&f.shared_gate, "ffn_gate_inp_shexp"},
          std::pair{&a.delta_net.qkv, "attn_qkv"},
          std::pair{&a.delta_net.z, "attn_gate"},
          std::pair{&a.delta_net.qkvz, "ssm_in"},
          std::pair{&a.delta_net.beta, "ssm_beta"},
          std::pair{&a.delta_net.alpha, "ssm_alpha"},
          std::pair{&a.delta_net.beta_alpha, "ssm_ba"}}) {
      if (!matrix->empty() && !cuda::matvec_supports(matrix->kernels->type)) {
        no_kernel(*matrix, layer + name + ".weight", "matvec");
      }
    }
    const model::CompressedWeights& c = a.compressed;
    for (const auto& [matrix, name] :
         {std::pair{&c.q_a, "attn_q_a"}, std::pair{&c.q_b, "attn_q_b"}, std::pair{&c.kv, "attn_kv"},
          std::pair{&c.compressor.kv, "attn_compressor_kv"}, std::pair{&c.compressor.gate, "attn_compressor_gate"},
          std::pair{&c.indexer_compressor.kv, "indexer_compressor_kv"},
          std::pair{&c.indexer_compressor.gate, "indexer_compressor_gate"}, std::pair{&c.indexer_q, "indexer.attn_q_b"},
          std::pair{&c.indexer_weights, "indexer.proj"}, std::pair{&c.output_a.first, "attn_output_a"},
          std::pair{&a.hyper.mix, "hc_attn_fn"}, std::pair{&f.hyper.mix, "hc_ffn_fn"}}) {
      if (!matrix->empty() && !cuda::matvec_supports(matrix->kernels->type)) {
        no_kernel(*matrix, layer + name + ".weight", "matvec");
      }
    }
    if (f.routed.empty()) continue;
    const auto expert_gap = [&](const std::string& tensor, const std::string& reason) {
      gaps.push_back({tensor, reason, static_cast<int64_t>(l)});
    };
    for (const auto& [experts, name] :
         {std::pair{&f.routed.gate, "ffn_gate_exps"}, std::pair{&f.routed.up, "ffn_up_exps"},
          std::pair{&f.routed.down, "ffn_down_exps"}}) {
      const uint32_t type = experts->first.kernels->type;
      const std::string tensor = layer + name + ".weight";
      if (!cuda::matvec_supports(type)) {
        expert_gap(tensor, tensor + " is " + type_name(type) + ", which has no GPU matvec kernel");
      }
    }
    const uint32_t gate_type = f.routed.gate.first.kernels->type, up_type = f.routed.up.first.kernels->type;
    if (gate_type != up_type) {
      expert_gap(layer + "ffn_up_exps.weight", layer + "ffn_gate_exps.weight (" + type_name(gate_type) + ") and " +
                                                   layer + "ffn_up_exps.weight (" + type_name(up_type) +
                                                   ") differ in type; the GPU's fused expert kernel needs one");
    }
  }
  return gaps;
}

// Per layer, whether long prompts may stream its host experts to the GPU: not where the GPU's
// kernels cannot serve its expert stacks.
std::vector<bool> streamable_layers(const model::Model& m, const std::vector<GpuKernelGap>& gaps) {
  std::vector<bool> streamed;
  for (const model::LayerWeights& w : m.layers) streamed.push_back(!w.ffn.routed.empty());
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

// Gated DeltaNet's sizes as its kernels take them.
// The GPU router's form of the model's gating.
cuda::RouterSpec::Gating router_gating(model::Gating gating) {
  switch (gating) {
    case model::Gating::kSoftmax:
      break;
    case model::Gating::kSigmoid:
      return cuda::RouterSpec::Gating::kSigmoid;
    case model::Gating::kSoftmaxSelected:
      return cuda::RouterSpec::Gating::kSoftmaxSelected;
    case model::Gating::kSqrtSoftplus:
      return cuda::RouterSpec::Gating::kSqrtSoftplus;
  }
  return cuda::RouterSpec::Gating::kSoftmax;
}

// The GPU's form of a SwiGLU's activation (HyperParams::activation, shared_activation).
cuda::GatedActivation gated_activation(const cpu::ExpertActivation& a) {
  switch (a.kind) {
    case cpu::ActivationKind::kSwiglu:
      break;
    case cpu::ActivationKind::kClampedSwiglu:
      return {cuda::GatedActivation::Kind::kClamped, a.alpha, a.limit};
    case cpu::ActivationKind::kLimitedSwiglu:
      return {cuda::GatedActivation::Kind::kLimited, a.alpha, a.limit};
  }
  return {};
}

cuda::DeltaNetShape delta_net_shape(const model::HyperParams& p) {
  const model::DeltaNetParams& d = p.delta_net;
  cuda::DeltaNetShape shape;
  shape.k_heads = d.k_heads;
  shape.v_heads = d.v_heads;
  shape.head_dim = d.head_dim;
  shape.conv_kernel = d.conv_kernel;
  shape.grouped_heads = d.grouped_heads;
  return shape;
}

// A compressor of DeepSeek-V4's layers of `ratio` as its kernels take it: the attention's rows, or
// (`indexer`) the indexer's keys, which follow them in each compressed row.
cuda::CompressorShape compressor_shape(const model::HyperParams& p, int64_t ratio, bool indexer,
                                       const float* device_freq_factors) {
  cuda::CompressorShape shape;
  shape.ratio = ratio;
  shape.dim = indexer ? p.indexer.head_dim : p.head_dim;
  shape.overlap = ratio == model::CompressedParams::kOverlapRatio;
  shape.offset = indexer ? p.head_dim : 0;
  shape.row_stride = model::compressed_width_at_ratio(p, ratio);
  shape.hadamard = indexer;
  shape.rope = gpu_rope_shape(p.compressed.rope, device_freq_factors);
  shape.eps = p.rms_epsilon;
  return shape;
}

// DeepSeek-V4's blocks: what its kernels serve.
void check_compressed(const model::HyperParams& p, const LayerKinds& kinds) {
  const model::CompressedParams& c = p.compressed;
  const model::IndexerParams& x = p.indexer;
  const auto refuse = [&](const std::string& what) {
    throw Error("UNSUPPORTED_MODEL", p.architecture + " on the GPU: " + what + "; load the model with gpu: false");
  };
  if (p.hyper.streams < 1 || p.hyper.streams > 8) {
    refuse("hyper-connections of 1 to 8 streams run there, not " + std::to_string(p.hyper.streams));
  }
  if (!cuda::compressed_attention_supports(p.head_dim)) {
    refuse("compressed attention serves heads of 64 to 512 (multiples of 64), not " + std::to_string(p.head_dim));
  }
  if (p.embedding % 32 != 0 || c.q_lora_rank % 32 != 0 || c.output_rank % 32 != 0 || c.output_groups < 1 ||
      p.heads % c.output_groups != 0 || (p.heads / c.output_groups * p.head_dim) % 32 != 0) {
    refuse("the embedding, q_lora_rank, output rank and each output group's width must be multiples of 32");
  }
  if (c.rope.freq_factors && c.rope.freq_factors != p.rope.freq_factors) {
    refuse("the compressed layers' rotation takes frequency factors of its own");
  }
  for (const int64_t ratio : kinds.ratio) {
    if (ratio == 0) continue;
    if (!cuda::compressor_supports(compressor_shape(p, ratio, false, nullptr))) {
      refuse("no compressor kernel for blocks of " + std::to_string(ratio) + " rows of " + std::to_string(p.head_dim));
    }
    if (ratio != model::CompressedParams::kOverlapRatio) continue;
    if (!cuda::compressor_supports(compressor_shape(p, ratio, true, nullptr)) ||
        !cuda::indexer_supports(x.heads, x.head_dim, x.top_k)) {
      refuse("the lightning indexer serves heads of 64 or 128 (at most 128) choosing at most " +
             std::to_string(cuda::kIndexerMaxTopK) + " positions, not " + std::to_string(x.heads) + " heads of " +
             std::to_string(x.head_dim) + " choosing " + std::to_string(x.top_k));
    }
  }
}

void check_shape(const model::HyperParams& p, const LayerKinds& kinds) {
  if (p.compressed.q_lora_rank > 0) {
    check_compressed(p, kinds);
    return;
  }
  const model::MlaParams& mla = p.mla;
  const model::DeltaNetParams& d = p.delta_net;
  if (kinds.linear_layers() > 0 && !cuda::delta_net_supports(delta_net_shape(p))) {
    throw Error("UNSUPPORTED_MODEL", "the GPU path's Gated DeltaNet kernels do not serve heads of " +
                                         std::to_string(d.head_dim) + " with a convolution of " +
                                         std::to_string(d.conv_kernel) + " taps; load the model with gpu: false");
  }
  if (mla.kv_lora_rank > 0) {
    if (!cuda::latent_attention_supports(mla.kv_lora_rank, mla.rope_dim) || mla.nope_dim % 32 != 0 ||
        mla.value_dim % 32 != 0 || mla.q_lora_rank % 32 != 0 || p.embedding % 32 != 0) {
      throw Error("UNSUPPORTED_MODEL",
                  "the GPU path's latent attention needs kv_lora_rank 512 with 64 rotary dims and "
                  "the other widths multiples of 32 (kv_lora_rank " +
                      std::to_string(mla.kv_lora_rank) + ", rotary " + std::to_string(mla.rope_dim) + ", nope " +
                      std::to_string(mla.nope_dim) + ", value " + std::to_string(mla.value_dim) + ")");
    }
    const model::IndexerParams& x = p.indexer;
    if (x.top_k > 0 && (!cuda::indexer_supports(x.heads, x.head_dim, x.top_k) || model::cache_row(p).keys % 8 != 0)) {
      throw Error("UNSUPPORTED_MODEL",
                  "the GPU path's lightning indexer serves heads of 64 or 128 (at most 128 heads, "
                  "8192 query floats a token, cache rows a multiple of 8 halves) choosing at most " +
                      std::to_string(cuda::kIndexerMaxTopK) + " positions, not " + std::to_string(x.heads) +
                      " heads of " + std::to_string(x.head_dim) + " choosing " + std::to_string(x.top_k) +
                      "; load the model with gpu: false");
    }
    return;
  }
  if (p.head_dim % 32 != 0 || p.head_dim > 256 || p.value_dim % 32 != 0 || p.value_dim > 256 || p.embedding % 32 != 0) {
    throw Error("UNSUPPORTED_MODEL",
                "the GPU path needs key and value heads multiples of 32 up to 256 wide and embedding a multiple "
                "of 32 (head_dim " +
                    std::to_string(p.head_dim) + ", value_dim " + std::to_string(p.value_dim) + ", embedding " +
                    std::to_string(p.embedding) + ")");
  }
}

// Norms over whole Q/K projections run on the GPU where no bias precedes them (MiniMax-M2's have none).
void check_blocks(const model::Model& model) {
  const model::HyperParams& p = model.params;
  for (const model::LayerWeights& w : model.layers) {
    const model::GqaWeights& gqa = w.attention.gqa;
    if (gqa.qk_norm_whole && (gqa.q_bias || gqa.k_bias)) {
      throw Error("UNSUPPORTED_MODEL", p.architecture +
                                           ": Q/K biases before norms over whole projections run on the CPU only; "
                                           "load it with gpu: false");
    }
  }
}

// --- the pass ---

// How a pass's rows lie in the workspace: each sequence's rows together, sequences in batch
// order, and which rows' logits it returns.
struct PassLayout {
  int64_t first = 0, rows = 0;  // the batch's rows [first, first + rows)
  // The parts' kernel family: the tiled products (parts of kMmqMinRows rows or more) or the mat-vecs.
  bool tiled = false;
  struct Segment {
    GpuSequence* sequence;
    int64_t first_row, rows;
    // The part's snapshots in these rows, `rows` counted from the segment's first (at most its
    // rows: a part that goes on in the next pass can take one at this pass's end).
    std::vector<StateSnapshot> snapshots;
  };
  struct Run {  // rows [first_row, first_row + rows)
    int64_t first_row, rows;
  };
  std::vector<Segment> segments;
  std::vector<Run> outputs;  // the rows that return logits
  int64_t output_rows = 0;
  std::vector<Run> hidden;  // the rows that return their normed hidden states (kEmbeddings)
  int64_t hidden_rows = 0;

  void add_output(int64_t first_row, int64_t rows) {
    add(outputs, first_row, rows);
    output_rows += rows;
  }
  void add_hidden(int64_t first_row, int64_t rows) {
    add(hidden, first_row, rows);
    hidden_rows += rows;
  }

 private:
  static void add(std::vector<Run>& runs, int64_t first_row, int64_t rows) {
    if (!runs.empty() && runs.back().first_row + runs.back().rows == first_row) {
      runs.back().rows += rows;
    } else {
      runs.push_back({first_row, rows});
    }
  }
};

struct Pass {
  GpuModel& m;
  const PassLayout& layout;
  int64_t n;
  cuda::StreamHandle stream;
  bool streamed = false;  // a hybrid pass that copies its host experts to the GPU (see ExpertStream)

  float* f(const DeviceBuffer& b) const { return b.as<float>(); }
  // Whether a product over `rows` rows runs in tiles: over the pass's rows, as its parts' kernel
  // family says (PassLayout::tiled); over fewer (the logits of a tiled pass's outputs), by their count.
  bool tiles(uint32_t type, int64_t rows) const {
    return layout.tiled && cuda::mmq_serves(type, rows == n ? cuda::kMmqMinRows : rows);
  }
  // The same for float weights (cuda::float_mmq).
  bool float_tiles(const DeviceMatrix& w, int64_t rows) const {
    return layout.tiled && cuda::float_mmq_serves(w) && (rows == n || rows >= cuda::kMmqMinRows);
  }
  ActivationBlock* blocks() const { return m.work.activations.as<ActivationBlock>(); }

  // The MoE sum of the last layer whose experts all ran here, left for the next norm to add
  // (RmsNorm::pending), which saves a launch per layer.
  mutable cuda::ExpertSum pending;

  // Float rows that one or more matrices read, quantized into the one activations buffer in
  // the format each weight type wants, again only when that format changes; a single row (of a
  // decode step) is left to small products that quantize their input themselves
  // (cuda::quantizes_one_row), while the routed experts' rows are quantized once for all of
  // their experts' blocks.
  class Input {
   public:
    Input(const Pass& pass, const float* x, int64_t rows, int64_t cols)
        : pass_(pass), x_(x), rows_(rows), cols_(cols) {}
    // Rows a norm has already quantized for weights of `type`.
    Input(const Pass& pass, const float* x, int64_t rows, int64_t cols, uint32_t type) : Input(pass, x, rows, cols) {
      format_ = format_of(type);
    }
    // The activation format weights of `type` read (a cuda::ActivationFormat), -1 for float rows.
    static int format_of(uint32_t type) {
      if (cuda::is_float_type(type)) return -1;
      return static_cast<int>(cuda::activation_format(type));
    }
    // Blocks for weights of `type` whatever the row count: the gated products read no float rows.
    const ActivationBlock* quantized_for(uint32_t type) {
      const int format = format_of(type);
      if (format != format_) {
        cuda::quantize_activations(x_, rows_, cols_, type, pass_.blocks(), pass_.stream);
        format_ = format;
      }
      return pass_.blocks();
    }
    // The input of products of `type` through `weight_rows` weight rows in all (a one-row
    // input quantizes in the products while they are small: cuda::quantizes_one_row).
    cuda::MatvecInput for_type(uint32_t type, int64_t weight_rows) {
      const int format = format_of(type);
      if (format < 0) return {x_, nullptr};
      if (format != format_ && rows_ == 1 && cuda::quantizes_one_row(type, cols_, weight_rows)) return {x_, nullptr};
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
    int format_ = -1;
  };

  void mul(const DeviceMatrix& w, Input& x, int64_t rows, float* y, bool accumulate) const {
    if (tiles(w.type, rows)) {
      cuda::mmq(w, x.for_type(w.type, w.rows).blocks, rows, y, accumulate, stream);
    } else if (float_tiles(w, rows)) {
      cuda::float_mmq(w, x.for_type(w.type, w.rows).floats, rows, y, accumulate, stream);
    } else {
      cuda::matvec(w, x.for_type(w.type, w.rows), rows, y, accumulate, stream);
    }
  }

  // Products of one input of n rows in as few launches as their types allow: each run of
  // products reading one activation format is queued before the input is quantized for the next
  // (for batches the tiles serve, one tiled product each).
  void mul_all(std::initializer_list<cuda::MatvecProduct> products, Input& x) const {
    std::vector<cuda::MatvecProduct> run;
    const auto queue = [&] {
      if (run.empty()) return;
      if (tiles(run.front().w->type, n)) {
        for (const cuda::MatvecProduct& product : run) {
          cuda::mmq(*product.w, x.for_type(product.w->type, product.w->rows).blocks, n, product.y, product.accumulate,
                    stream);
        }
      } else if (Input::format_of(run.front().w->type) < 0 && layout.tiled) {
        // Float weights: each product in the float tiles where they serve it.
        for (const cuda::MatvecProduct& product : run) mul(*product.w, x, n, product.y, product.accumulate);
      } else {
        int64_t weight_rows = 0;
        for (const cuda::MatvecProduct& product : run) weight_rows += product.w->rows;
        cuda::matvecs(run, x.for_type(run.front().w->type, weight_rows), n, stream);
      }
      run.clear();
    };
    for (const cuda::MatvecProduct& p : products) {
      if (!run.empty() && Input::format_of(run.front().w->type) != Input::format_of(p.w->type)) queue();
      run.push_back(p);
    }
    queue();
  }

  // normed = rms_norm(rows) (`count` rows from `x`), first adding the pending MoE sum, and
  // quantized for `first`, the first matrix that reads it.
  Input norm(float* x, int64_t count, const float* weight, const DeviceMatrix& first) const {
    const model::HyperParams& p = m.params;
    cuda::RmsNorm args;
    args.x = x;
    args.rows = count;
    args.width = p.embedding;
    args.weight = weight;
    args.eps = p.rms_epsilon;
    args.out = f(m.work.normed);
    args.pending = pending;
    if (pending.expert_out) {  // the sums of the last `count` rows
      const int64_t skipped = (n - count) * pending.used;
      args.pending.expert_out += skipped * p.embedding;
      args.pending.weights += skipped;
      args.pending.chosen += skipped;
    }
    pending = {};
    if (!cuda::is_float_type(first.type)) {
      args.blocks = blocks();
      args.blocks_for = first.type;
    }
    cuda::rms_norm(args, stream);
    return Input(*this, args.out, count, p.embedding, first.type);
  }

  // Hyper-connections (DeepSeek-V4): the residual holds each row's streams, a block reads their mix
  // (block_input) and its output goes to ws.block_out, which block_output spreads over the streams.
  bool hyper() const { return m.params.hyper.streams > 0; }
  cuda::HyperShape hyper_shape() const {
    const model::HyperParams& p = m.params;
    return {p.hyper.streams, p.embedding, p.hyper.sinkhorn_iterations, p.hyper.epsilon};
  }
  // Where a block's products add their output: the residual, or with hyper-connections the block's
  // output (zeroed by block_input).
  float* out() const { return f(hyper() ? m.work.block_out : m.work.residual); }
  // The rows the head reads: the residual, or with hyper-connections the streams' join.
  float* trunk() const { return f(hyper() ? m.work.hyper_input : m.work.residual); }

  // The streams' mix weights of the pass's rows (each row's streams RMS-normed as one row, times
  // `h`'s matrix) into ws.hyper_mixes, as the CPU's hyper_mixes.
  void hyper_mixes(const GpuHyper& h) const {
    const model::HyperParams& p = m.params;
    const Workspace& ws = m.work;
    const int64_t width = p.hyper.streams * p.embedding;
    norm_rows(f(ws.residual), n, width, nullptr, f(ws.hyper_normed));
    Input streams(*this, f(ws.hyper_normed), n, width);
    mul(h.mix, streams, n, f(ws.hyper_mixes), false);
  }

  // A block's input normed by `weight` (and quantized for `first`): the residual's rows, or with
  // hyper-connections their streams' mix, as the CPU's block_input; the block's output starts at zero.
  Input block_input(const GpuHyper& h, const float* weight, const DeviceMatrix& first) const {
    if (!hyper()) return norm(f(m.work.residual), n, weight, first);
    const Workspace& ws = m.work;
    hyper_mixes(h);
    cuda::hyper_weights(f(ws.hyper_mixes), n, h.scale, h.base, hyper_shape(), f(ws.hyper_pre), f(ws.hyper_post),
                        f(ws.hyper_comb), stream);
    cuda::hyper_pre(f(ws.residual), f(ws.hyper_pre), n, hyper_shape(), f(ws.hyper_input), stream);
    cuda::zero_async(ws.block_out.data(), static_cast<size_t>(n * m.params.embedding) * sizeof(float), stream);
    return norm(f(ws.hyper_input), n, weight, first);
  }
  // A block's output (added to the residual by its products) with hyper-connections: each stream
  // made of it and the streams' mix, as the CPU's block_output.
  void block_output() const {
    if (!hyper()) return;
    const Workspace& ws = m.work;
    cuda::hyper_post(f(ws.block_out), f(ws.hyper_post), f(ws.hyper_comb), n, hyper_shape(), f(ws.residual), stream);
  }
  // The head's mix of each row's streams into ws.hyper_input (trunk()), as the CPU's join_streams.
  void join_streams() const {
    const Workspace& ws = m.work;
    hyper_mixes(m.output_hyper);
    cuda::hyper_head_weights(f(ws.hyper_mixes), n, m.output_hyper.scale, m.output_hyper.base, hyper_shape(),
                             f(ws.hyper_pre), stream);
    cuda::hyper_pre(f(ws.residual), f(ws.hyper_pre), n, hyper_shape(), f(ws.hyper_input), stream);
  }

  // The rotation of the model's layers, or of its windowed ones (HyperParams::windowed_rope).
  cuda::RopeShape rope_shape(bool windowed = false) const {
    return gpu_rope_shape(windowed ? m.params.windowed_rope : m.params.rope, m.freq_factors);
  }

  // The sequences' rows in groups of at most kMaxKvSegments, each with its rows' caches of
  // `layer`, as the launches that write the cache take them: fn(first_row, rows, segments, parts),
  // `parts` the group's segments of the layout.
  template <typename Fn>
  void cache_groups(int64_t layer, Fn fn) const {
    segment_groups(cuda::kMaxKvSegments, [&](int64_t first_row, std::span<const PassLayout::Segment> parts) {
      cuda::KvSegments cache;
      cache.count = static_cast<int>(parts.size());
      for (size_t i = 0; i < parts.size(); ++i) {
        cache.first_row[i] = static_cast<int>(parts[i].first_row - first_row);
        cache.keys[i] = parts[i].sequence->keys_of(layer);
        cache.values[i] = parts[i].sequence->values_of(layer);
      }
      const int64_t rows = parts.back().first_row + parts.back().rows - first_row;
      cache.first_row[parts.size()] = static_cast<int>(rows);
      fn(first_row, rows, cache, parts);
    });
  }
  // The layout's segments in groups of at most `most`: fn(the group's first row, its segments).
  template <typename Fn>
  void segment_groups(size_t most, Fn fn) const {
    for (size_t first = 0; first < layout.segments.size(); first += most) {
      const size_t count = std::min(most, layout.segments.size() - first);
      fn(layout.segments[first].first_row, std::span(layout.segments).subspan(first, count));
    }
  }

  void attention_block(const GpuAttention& w, int64_t layer) const {
    if (w.kind == model::AttentionKind::kCompressed) {
      compressed_attention_block(w, layer);
    } else if (model::is_latent(w.kind)) {
      latent_attention_block(w, layer);
    } else if (w.kind == model::AttentionKind::kDeltaNet) {
      delta_net_block(w, layer);
    } else {
      gqa_attention_block(w, layer);
    }
  }

  void gqa_attention_block(const GpuAttention& w, int64_t layer) const {
    const model::HyperParams& p = m.params;
    const Workspace& ws = m.work;
    const int64_t q_width = p.heads * p.head_dim, kv_width = w.kv_heads * p.head_dim;
    const int64_t v_width = w.kv_heads * p.value_dim, out_width = p.heads * p.value_dim;
    const model::CacheRow row = model::cache_row(p);
    Input x = norm(f(ws.residual), n, w.norm, w.q);
    // With an output gate, each head's query comes with its gate: split apart after the products.
    mul_all({{&w.q, f(w.output_gate ? ws.q_gated : ws.q), false}, {&w.k, f(ws.k), false}, {&w.v, f(ws.v), false}}, x);
    if (w.output_gate) {
      cuda::split_gated_query(f(ws.q_gated), n, p.heads, p.head_dim, f(ws.q), f(ws.attention_gate), stream);
    }
    cuda::AttentionHeads heads;
    heads.q = f(ws.q);
    heads.k = f(ws.k);
    heads.v = f(ws.v);
    heads.q_bias = w.q_bias;
    heads.k_bias = w.k_bias;
    heads.v_bias = w.v_bias;
    if (w.qk_norm_whole) {
      // Norms over whole rows (the projections have no biases: check_blocks), then per-head rotation.
      whole_row_norm(f(ws.q), q_width, w.q_norm);
      whole_row_norm(f(ws.k), kv_width, w.k_norm);
    } else {
      heads.q_norm = w.q_norm;
      heads.k_norm = w.k_norm;
    }
    heads.eps = p.rms_epsilon;
    heads.heads = p.heads;
    heads.kv_heads = w.kv_heads;
    heads.head_dim = p.head_dim;
    heads.value_dim = p.value_dim;
    heads.key_row = row.keys;
    heads.value_row = row.values;
    const cuda::RopeShape rope = rope_shape(w.windowed);
    // The heads and their place in the KV cache.
    cache_groups(layer, [&](int64_t first_row, int64_t rows, const cuda::KvSegments& cache, auto) {
      cuda::AttentionHeads group = heads;
      group.q += first_row * q_width;
      group.k += first_row * kv_width;
      group.v += first_row * v_width;
      group.cache = cache;
      cuda::position_heads(group, rows, ws.positions.as<int32_t>() + first_row, rope, stream);
    });
    // Decode rows come back quantized for the output projection as well, when every sequence's do
    // (not where the output gate multiplies them first).
    // A group of sequences whose rows fit one launch (a decode step of several streams) takes one.
    const bool quantizes = !cuda::is_float_type(w.output.type) && !w.output_gate;
    bool quantized = quantizes;
    const int32_t* positions = ws.positions.as<int32_t>();
    const auto quantized_rows = [&](int64_t first_row) {
      return cuda::QuantizedRows{quantizes ? blocks() + first_row * (out_width / 32) : nullptr, w.output.type};
    };
    cache_groups(layer, [&](int64_t first_row, int64_t, const cuda::KvSegments& cache,
                            std::span<const PassLayout::Segment> parts) {
      int64_t capacity = 0;
      for (const PassLayout::Segment& part : parts) capacity = std::max(capacity, part.sequence->capacity);
      const cuda::AttentionShape shape = layer_shape(w, capacity);
      if (parts.size() > 1 && cuda::batched_attention_serves(shape, cache)) {
        quantized &= cuda::batched_causal_attention(
            f(ws.q) + first_row * q_width, positions + first_row, cache, shape, ws.attention_scratch.data(),
            f(ws.attention) + first_row * out_width, quantized_rows(first_row), stream);
        return;
      }
      for (const PassLayout::Segment& part : parts) {
        const GpuSequence& s = *part.sequence;
        quantized &= cuda::causal_attention(f(ws.q) + part.first_row * q_width, part.rows, positions + part.first_row,
                                            s.keys_of(layer), s.values_of(layer), layer_shape(w, s.capacity),
                                            ws.attention_scratch.data(), f(ws.attention) + part.first_row * out_width,
                                            stream, quantized_rows(part.first_row));
      }
    });
    if (w.output_gate) cuda::sigmoid_gate(f(ws.attention), f(ws.attention_gate), n * out_width, stream);
    Input attended = quantized ? Input(*this, f(ws.attention), n, out_width, w.output.type)
                               : Input(*this, f(ws.attention), n, out_width);
    output_projection(w, attended);
  }

  // out() += the attention output's product, with its bias and the value scale (gpt-oss's,
  // MiMo's) joining it before the residual does, as on the CPU.
  void output_projection(const GpuAttention& w, Input& attended) const {
    const model::HyperParams& p = m.params;
    const Workspace& ws = m.work;
    if (!w.output_bias && p.value_scale == 1.0f) {
      mul(w.output, attended, n, out(), true);
      return;
    }
    mul(w.output, attended, n, f(ws.hidden), false);
    cuda::add_projection(f(ws.hidden), n, p.embedding, w.output_bias, p.value_scale, out(), stream);
  }

  // The pass's rows of `width` floats at x RMS-normed in place by `weight`.
  void whole_row_norm(float* x, int64_t width, const float* weight) const { norm_rows(x, n, width, weight, x); }
  // `rows` rows of `width` floats at x RMS-normed by `weight` (null: none) into `out` (x: in place).
  void norm_rows(float* x, int64_t rows, int64_t width, const float* weight, float* out) const {
    cuda::RmsNorm args;
    args.x = x;
    args.rows = rows;
    args.width = width;
    args.weight = weight;
    args.eps = m.params.rms_epsilon;
    args.out = out;
    cuda::rms_norm(args, stream);
  }

  // Attention of layer `w` over caches of `capacity` positions: its window and sinks.
  cuda::AttentionShape layer_shape(const GpuAttention& w, int64_t capacity) const {
    cuda::AttentionShape shape = attention_shape(m.params, capacity);
    shape.kv_heads = w.kv_heads;
    shape.window = w.windowed ? m.params.sliding_window : 0;
    shape.sinks = w.sinks;
    return shape;
  }

  // The per-head products of multi-head latent attention (k_b, v_b: a matrix per head), run as
  // routed experts are, over the pass's slots (token, head) in the grouping begin() made; or with
  // `groups` another fixed grouping's (DeepSeek-V4's output groups: output_groups()).
  void per_head(const DeviceMatrix& w, const float* x, float* y) const { per_head(w, x, y, latent_groups()); }
  void per_head(const DeviceMatrix& w, const float* x, float* y, const cuda::ExpertGroups& groups) const {
    Input in(*this, x, n * w.count, w.cols);
    if (groups.tokens_per_chunk == cuda::kMmqTileTokens) {
      cuda::expert_mmq(w, in.for_type(w.type, w.rows * w.count).blocks, groups, y, stream);
    } else {
      cuda::expert_matvec(w, in.for_type(w.type, w.rows * w.count), groups, y, stream);
    }
  }
  cuda::ExpertGroups latent_groups() const {
    const Workspace& ws = m.work;
    return fixed_groups(m.params.heads, ws.latent_order, ws.latent_chunks, ws.latent_chunk_count, m.latent_tiles);
  }
  cuda::ExpertGroups output_groups() const {
    const Workspace& ws = m.work;
    return fixed_groups(m.params.compressed.output_groups, ws.group_order, ws.group_chunks, ws.group_chunk_count,
                        m.group_tiles);
  }
  // A fixed grouping's buffers: `count` slots a token, in tiles where the pass's parts take them and
  // every matrix it serves has tiled kernels (`tiles`).
  cuda::ExpertGroups fixed_groups(int64_t count, const DeviceBuffer& order, const DeviceBuffer& chunks,
                                  const DeviceBuffer& chunk_count, bool tiles) const {
    cuda::ExpertGroups g;
    g.order = order.as<int32_t>();
    g.chunks = chunks.as<int32_t>();
    g.chunk_count = chunk_count.as<int32_t>();
    g.tokens_per_chunk = tiles && layout.tiled ? cuda::kMmqTileTokens : cuda::tokens_per_expert_chunk(n);
    g.max_chunks = cuda::max_expert_chunks(n, count, count, g.tokens_per_chunk);
    return g;
  }

  // The low-rank query (the n rows of `rank` at ws.latent_b) normed by `weight` into ws.normed:
  // MLA's and DeepSeek-V4's, after every product of the block's input (which ws.normed held).
  Input low_rank_query(int64_t rank, const float* weight) const {
    norm_rows(f(m.work.latent_b), n, rank, weight, f(m.work.normed));
    return Input(*this, f(m.work.normed), n, rank);
  }

  // Multi-head latent attention, as the CPU's mla_attention: the queries (through the low-rank
  // q_a, its norm and q_b, or attn_q) split into the part k_b absorbs and the rotated part; the
  // latent and rotary key normed, rotated and cached; attention over the cache; each head's
  // attended latent through v_b; the output product. Sparse (kSparseMla): a layer with an
  // indexer of its own caches its keys and chooses each row's positions (indexer_choice); every
  // sparse layer attends the last choice.
  void latent_attention_block(const GpuAttention& w, int64_t layer) const {
    const model::HyperParams& p = m.params;
    const model::MlaParams& mla = p.mla;
    const Workspace& ws = m.work;
    const bool sparse = w.kind == model::AttentionKind::kSparseMla;
    const bool own_indexer = sparse && w.indexer_q.rows > 0;
    Input x = norm(f(ws.residual), n, w.norm, w.q_a.rows > 0 ? w.q_a : w.q);
    if (w.q_a.rows > 0) {
      mul_all({{&w.q_a, f(ws.latent_b), false}, {&w.kv_a, f(ws.k), false}}, x);
      // The indexer's key and head weights read the attention's input, which the norm below overwrites.
      if (own_indexer) {
        mul_all({{&w.indexer_k, f(ws.indexer_k), false}, {&w.indexer_weights, f(ws.indexer_weights), false}}, x);
      }
      Input low = low_rank_query(mla.q_lora_rank, w.q_a_norm);
      mul(w.q, low, n, f(ws.q), false);
      if (own_indexer) mul(w.indexer_q, low, n, f(ws.indexer_q), false);
    } else {
      mul_all({{&w.q, f(ws.q), false}, {&w.kv_a, f(ws.k), false}}, x);
    }
    const cuda::RopeShape rope = rope_shape();
    const int32_t* positions = ws.positions.as<int32_t>();
    const int64_t key_row = model::cache_row(p).keys;
    cache_groups(layer, [&](int64_t first_row, int64_t rows, const cuda::KvSegments& cache, auto) {
      cuda::store_latent(f(ws.k) + first_row * (mla.kv_lora_rank + mla.rope_dim), rows, mla.kv_lora_rank, w.kv_a_norm,
                         p.rms_epsilon, positions + first_row, rope, cache, key_row, stream);
      if (own_indexer) {
        cuda::store_indexer_keys(f(ws.indexer_k) + first_row * p.indexer.head_dim, rows, indexer_shape(),
                                 w.indexer_k_norm, w.indexer_k_bias, p.indexer.norm_epsilon, positions + first_row,
                                 cache, key_row, model::indexer_key_offset(p), stream);
      }
    });
    if (own_indexer) indexer_choice(layer);
    cuda::split_latent_query(f(ws.q), n, p.heads, mla.nope_dim, positions, rope, f(ws.latent_a), f(ws.v), stream);
    per_head(w.k_b, f(ws.latent_a), f(ws.latent_b));
    for (const PassLayout::Segment& part : layout.segments) {
      const int64_t first = part.first_row * p.heads;
      cuda::LatentAttention a;
      a.q_latent = f(ws.latent_b) + first * mla.kv_lora_rank;
      a.q_rope = f(ws.v) + first * mla.rope_dim;
      a.positions = positions + part.first_row;
      a.cache = part.sequence->keys_of(layer);
      a.key_row = key_row;
      if (sparse) {
        a.selected = ws.selected.as<int32_t>() + part.first_row * p.indexer.top_k;
        a.top_k = p.indexer.top_k;
      }
      a.n = part.rows;
      a.heads = p.heads;
      a.rank = mla.kv_lora_rank;
      a.rope = mla.rope_dim;
      a.scale = p.attention_scale;
      a.cache_positions = part.sequence->capacity;
      a.out = f(ws.attention) + first * mla.kv_lora_rank;
      cuda::latent_attention(a, ws.attention_scratch.data(), stream);
    }
    per_head(w.v_b, f(ws.attention), f(ws.latent_a));
    Input values(*this, f(ws.latent_a), n, p.heads * mla.value_dim);
    output_projection(w, values);
  }

  // DeepSeek-V4's compressed attention, as the CPU's compressed_attention
  // (engine/compressed_attention.cc): the query (low rank, normed; each head normed; its tail
  // rotated) and the key row (normed, its tail rotated, cached in the window's rows); the
  // compressors' rows into their rings, each completed block into its compressed row; on the
  // indexed layers (blocks of kOverlapRatio) the indexer's choice of compressed rows; attention
  // over the window and the compressed rows, with the sinks; each head's output rotated back; each
  // group of heads through its output_a matrix, then output_b.
  void compressed_attention_block(const GpuAttention& w, int64_t layer) const {
    const model::HyperParams& p = m.params;
    const model::CompressedParams& c = p.compressed;
    const model::IndexerParams& x = p.indexer;
    const Workspace& ws = m.work;
    const int64_t d = p.head_dim, heads = p.heads, ratio = m.kinds.ratio[static_cast<size_t>(layer)];
    const bool indexed = ratio == model::CompressedParams::kOverlapRatio;
    const int32_t* positions = ws.positions.as<int32_t>();
    const float* factors = c.rope.freq_factors ? m.freq_factors : nullptr;
    const cuda::RopeShape rope = ratio != 0 ? gpu_rope_shape(c.rope, factors) : rope_shape();
    const cuda::CompressorShape rows_shape = compressor_shape(p, ratio, false, factors);
    const cuda::CompressorShape keys_shape = compressor_shape(p, ratio, true, factors);
    const int64_t rows_width = (indexed ? 2 : 1) * d, keys_width = 2 * x.head_dim;
    const int64_t row_stride = model::compressed_width_at_ratio(p, ratio);

    // The products of the block's input.
    Input in = block_input(w.hyper, w.norm, w.q_a);
    mul_all({{&w.q_a, f(ws.latent_b), false}, {&w.kv_a, f(ws.k), false}}, in);
    if (ratio != 0) {
      mul_all(
          {{&w.compressor.kv, f(ws.compressor_values), false}, {&w.compressor.gate, f(ws.compressor_scores), false}},
          in);
    }
    if (indexed) {
      mul_all({{&w.indexer_compressor.kv, f(ws.indexer_values), false},
               {&w.indexer_compressor.gate, f(ws.indexer_scores), false},
               {&w.indexer_weights, f(ws.indexer_weights), false}},
              in);
    }
    // The query, and the indexer's from the same low-rank rows.
    Input low_rank = low_rank_query(c.q_lora_rank, w.q_a_norm);
    mul(w.q, low_rank, n, f(ws.q), false);
    if (indexed) mul(w.indexer_q, low_rank, n, f(ws.indexer_q), false);
    norm_rows(f(ws.q), n * heads, d, nullptr, f(ws.q));
    cuda::rotate_tails(f(ws.q), n, heads, d, positions, rope, false, stream);
    // The key row, into the window's rows.
    norm_rows(f(ws.k), n, d, w.kv_a_norm, f(ws.k));
    cuda::rotate_tails(f(ws.k), n, 1, d, positions, rope, false, stream);
    const int64_t key_row = model::cache_row(p).keys;
    cache_groups(layer, [&](int64_t first_row, int64_t rows, const cuda::KvSegments& cache, auto) {
      cuda::store_rows(f(ws.k) + first_row * d, rows, d, positions + first_row, cache, key_row, stream);
    });
    // The compressors: each sequence's rows into its rings, its completed blocks into compressed rows.
    if (ratio != 0) {
      cuda::add_position_bias(f(ws.compressor_scores), n, positions, w.compressor.position_bias, ratio, rows_width,
                              stream);
      if (indexed) {
        cuda::add_position_bias(f(ws.indexer_scores), n, positions, w.indexer_compressor.position_bias, ratio,
                                keys_width, stream);
      }
      // A snapshot inside a part takes the rings after its rows: the part's rows run up to it, the
      // layer's rings go to the host behind them, and the rest run on.
      const size_t ring_bytes =
          static_cast<size_t>(m.kinds.state_floats(p, static_cast<size_t>(layer))) * sizeof(float);
      for (const PassLayout::Segment& part : layout.segments) {
        float* ring = part.sequence->recurrent_of(layer);
        uint16_t* compressed = part.sequence->compressed_of(layer);
        runs_between_snapshots(part.snapshots, part.rows, [&](int64_t from, int64_t to, const StateSnapshot* snapshot) {
          const int64_t at = part.first_row + from;
          if (to > from) {
            cuda::compress_rows(f(ws.compressor_values) + at * rows_width, f(ws.compressor_scores) + at * rows_width,
                                to - from, positions + at, rows_shape, w.compressor.norm, ring, compressed, stream);
            if (indexed) {
              cuda::compress_rows(f(ws.indexer_values) + at * keys_width, f(ws.indexer_scores) + at * keys_width,
                                  to - from, positions + at, keys_shape, w.indexer_compressor.norm,
                                  ring + model::CompressedParams::state_floats(ratio, d, 0), compressed, stream);
            }
          }
          if (snapshot) {
            cuda::copy_to_host(snapshot->states + part.sequence->recurrent_before[layer], ring, ring_bytes, stream);
          }
        });
      }
    }
    // The indexer's choice of each row's compressed rows.
    if (indexed) {
      cuda::IndexerShape shape;
      shape.heads = x.heads;
      shape.head_dim = x.head_dim;
      shape.top_k = x.top_k;
      shape.rope = gpu_rope_shape(c.rope, factors);
      shape.ratio = ratio;
      shape.rope_tail = true;
      indexer_choice(shape, row_stride, [&](const GpuSequence& sequence) { return sequence.compressed_of(layer) + d; });
    }
    // Attention over each sequence's window and compressed rows.
    for (const PassLayout::Segment& part : layout.segments) {
      cuda::CompressedAttention a;
      a.q = f(ws.q) + part.first_row * heads * d;
      a.n = part.rows;
      a.heads = heads;
      a.head_dim = d;
      a.positions = positions + part.first_row;
      a.scale = p.attention_scale;
      a.raw = part.sequence->keys_of(layer);
      a.raw_row = key_row;
      a.window = p.sliding_window;
      if (ratio != 0) {
        a.compressed = part.sequence->compressed_of(layer);
        a.compressed_stride = row_stride;
        a.ratio = ratio;
      }
      if (indexed) {
        a.selected = ws.selected.as<int32_t>() + part.first_row * x.top_k;
        a.top_k = x.top_k;
      }
      a.sinks = w.sinks;
      a.out = f(ws.attention) + part.first_row * heads * d;
      cuda::compressed_attention(a, stream);
    }
    // Each head's output rotated back; each group of heads through its matrix, then output_b.
    cuda::rotate_tails(f(ws.attention), n, heads, d, positions, rope, true, stream);
    per_head(w.output_a, f(ws.attention), f(ws.grouped), output_groups());
    Input grouped(*this, f(ws.grouped), n, c.output_groups * c.output_rank);
    mul(w.output, grouped, n, out(), true);
    block_output();
  }

  cuda::IndexerShape indexer_shape() const {
    const model::IndexerParams& x = m.params.indexer;
    cpu::RopeParams rope = m.params.rope;
    rope.style = x.rope_style;
    return {x.heads, x.head_dim, x.top_k, gpu_rope_shape(rope, m.freq_factors)};
  }

  // The lightning indexer's choice for every row, as the CPU's indexer_rows and select_positions:
  // its queries rotated (its keys are cached by then), and per sequence each row's top_k
  // positions of `layer`'s keys into ws.selected.
  void indexer_choice(int64_t layer) const {
    const model::HyperParams& p = m.params;
    indexer_choice(indexer_shape(), model::cache_row(p).keys,
                   [&](const GpuSequence& s) { return s.keys_of(layer) + model::indexer_key_offset(p); });
  }
  // The same over the keys keys_of(sequence) gives, rows of key_row halves, one per shape.ratio
  // positions (DeepSeek-V4's compressed rows).
  template <typename KeysOf>
  void indexer_choice(const cuda::IndexerShape& shape, int64_t key_row, KeysOf keys_of) const {
    const model::IndexerParams& x = m.params.indexer;
    const Workspace& ws = m.work;
    const int32_t* positions = ws.positions.as<int32_t>();
    cuda::indexer_queries(f(ws.indexer_q), n, shape, positions, stream);
    for (const PassLayout::Segment& part : layout.segments) {
      cuda::IndexerSelect s;
      s.q = f(ws.indexer_q) + part.first_row * x.heads * x.head_dim;
      s.weights = f(ws.indexer_weights) + part.first_row * x.heads;
      s.weight_scale = 1.0f / std::sqrt(static_cast<float>(x.head_dim * x.heads));
      s.positions = positions + part.first_row;
      s.keys = keys_of(*part.sequence);
      s.key_row = key_row;
      s.n = part.rows;
      s.cache_positions = part.sequence->capacity / shape.ratio;
      s.selected = ws.selected.as<int32_t>() + part.first_row * x.top_k;
      cuda::indexer_select(s, shape, ws.indexer_scratch.data(), ws.indexer_scratch.bytes(), stream);
    }
  }

  // Gated DeltaNet, as the CPU's delta_net_attention: the input projections (the convolution's
  // [q, k, v] channels and the output gate z, or Qwen3-Next's fused qkvz split into them; beta
  // and alpha, or its fused beta_alpha), each head's beta and decay; per sequence the causal
  // convolution with SiLU and the L2-normed q and k heads, then the gated delta rule over its
  // states; each head's output RMS-normed, gated by silu(z), and the output product.
  void delta_net_block(const GpuAttention& w, int64_t layer) const {
    const model::HyperParams& p = m.params;
    const model::DeltaNetParams& d = p.delta_net;
    const Workspace& ws = m.work;
    const cuda::DeltaNetShape shape = delta_net_shape(p);
    const bool fused = w.qkvz.rows > 0;
    Input x = norm(f(ws.residual), n, w.norm, fused ? w.qkvz : w.qkv);
    if (fused) {
      mul(w.qkvz, x, n, f(ws.grouped), false);
      cuda::delta_net_split_qkvz(f(ws.grouped), n, shape, f(ws.mixed), f(ws.z), stream);
    } else {
      mul_all({{&w.qkv, f(ws.mixed), false}, {&w.z, f(ws.z), false}}, x);
    }
    if (w.beta_alpha.rows > 0) {
      mul(w.beta_alpha, x, n, f(ws.grouped), false);
      cuda::delta_net_split_beta_alpha(f(ws.grouped), n, shape, f(ws.beta), f(ws.decay), stream);
    } else {
      mul_all({{&w.beta, f(ws.beta), false}, {&w.alpha, f(ws.decay), false}}, x);
    }
    cuda::delta_net_gates(f(ws.beta), f(ws.decay), n, d.v_heads, w.dt_bias, w.decay_rate, stream);
    // The convolution and the rule over `states`' segments, their rows counted from `first_row`.
    const auto run = [&](const cuda::RecurrentSegments& states, int64_t first_row) {
      float* mixed = f(ws.mixed) + first_row * d.channels();
      cuda::delta_net_conv(mixed, states, shape, w.conv, p.rms_epsilon, stream);
      cuda::delta_net_rule(mixed, f(ws.decay) + first_row * d.v_heads, f(ws.beta) + first_row * d.v_heads, states,
                           shape, f(ws.attention) + first_row * d.value_width(), stream);
    };
    segment_groups(cuda::kMaxRecurrentSegments, [&](int64_t first_row, std::span<const PassLayout::Segment> parts) {
      const bool snapshots = std::any_of(parts.begin(), parts.end(),
                                         [](const PassLayout::Segment& part) { return !part.snapshots.empty(); });
      if (!snapshots) {
        cuda::RecurrentSegments states;
        states.count = static_cast<int>(parts.size());
        for (size_t i = 0; i < parts.size(); ++i) {
          states.first_row[i] = static_cast<int>(parts[i].first_row - first_row);
          states.first_row[i + 1] = static_cast<int>(parts[i].first_row + parts[i].rows - first_row);
          states.states[i] = parts[i].sequence->recurrent_of(layer);
        }
        run(states, first_row);
        return;
      }
      // Each part alone, its rows up to each snapshot, whose copy of the layer's state then goes
      // to the host behind them, and on: the convolution's and the rule's states carry from one
      // run into the next as from one pass into the next.
      for (const PassLayout::Segment& part : parts) {
        float* state = part.sequence->recurrent_of(layer);
        runs_between_snapshots(part.snapshots, part.rows, [&](int64_t from, int64_t to, const StateSnapshot* snapshot) {
          if (to > from) {
            cuda::RecurrentSegments alone;
            alone.count = 1;
            alone.first_row[1] = static_cast<int>(to - from);
            alone.states[0] = state;
            run(alone, part.first_row + from);
          }
          if (snapshot) {
            cuda::copy_to_host(snapshot->states + part.sequence->recurrent_before[layer], state,
                               static_cast<size_t>(d.state_floats()) * sizeof(float), stream);
          }
        });
      }
    });
    norm_rows(f(ws.attention), n * d.v_heads, d.head_dim, w.head_norm, f(ws.attention));
    cuda::swiglu(f(ws.z), f(ws.attention), n * d.value_width(), f(ws.attention), stream);
    Input attended(*this, f(ws.attention), n, d.value_width());
    output_projection(w, attended);
  }

  // out() += down(silu(gate x) * up x): the dense FFN, or an MoE layer's shared experts.
  // (`out` = instead, where given.)
  void swiglu_ffn(const GpuFfn& w, Input& x, float* out = nullptr) const {
    const Workspace& ws = m.work;
    const int64_t width = w.gate.rows;
    const cuda::GatedActivation activation = gated_activation(m.params.shared_activation);
    if (cuda::gated_matvec_supports(w.gate, w.up)) {
      const ActivationBlock* blocks = x.quantized_for(w.gate.type);
      if (tiles(w.gate.type, n)) {
        cuda::gated_mmq(w.gate, w.up, blocks, n, f(ws.hidden), stream, activation);
      } else {
        cuda::gated_matvec(w.gate, w.up, blocks, n, f(ws.hidden), stream, activation);
      }
    } else {
      mul(w.gate, x, n, f(ws.gate), false);
      mul(w.up, x, n, f(ws.up), false);
      cuda::swiglu(f(ws.gate), f(ws.up), n * width, f(ws.hidden), stream, activation);
    }
    Input hidden(*this, f(ws.hidden), n, width);
    mul(w.down, hidden, n, out ? out : this->out(), out == nullptr);
  }

  // Whether this pass copies layer `layer`'s host experts to the GPU rather than handing its rows
  // to the CPU: a streamed pass does, in the layers the stream serves (see ExpertStream::streams).
  bool streams(int64_t layer) const { return streamed && m.expert_stream->streams(layer); }
  // Whether the CPU runs layer `layer`'s host experts in this pass.
  bool hands_off(int64_t layer) const {
    return m.host_experts && m.host_experts->has_host_experts(layer) && !streams(layer);
  }
  // Whether the CPU runs any layer's host experts in this pass.
  bool hybrid() const {
    for (int64_t l = 0; l < m.params.layers; ++l) {
      if (hands_off(l)) return true;
    }
    return false;
  }

  void moe_ffn(const GpuFfn& w, int64_t layer, Input& x) const {
    const model::HyperParams& p = m.params;
    const Workspace& ws = m.work;
    HostExperts* host = m.host_experts.get();
    const bool host_layer = host && host->has_host_experts(layer);
    const bool streamed_layer = host_layer && streams(layer);
    const bool hybrid = host_layer && !streamed_layer;
    ExpertStacks experts{w.expert_gate, w.expert_up, w.expert_down, w.expert_slots};
    if (streamed_layer) experts = m.expert_stream->queue_layer(layer, stream);
    // One grouping serves both products, so the tiles take the experts only where they serve both types.
    const bool tiled = tiles(experts.gate.type, n) && tiles(experts.down.type, n);
    cuda::ExpertGroups groups;
    groups.order = ws.order.as<int32_t>();
    groups.chunks = ws.chunks.as<int32_t>();
    groups.chunk_count = ws.chunk_count.as<int32_t>();
    groups.tokens_per_chunk = tiled ? cuda::kMmqTileTokens : cuda::tokens_per_expert_chunk(n);
    groups.max_chunks = cuda::max_expert_chunks(n, p.experts, p.experts_used, groups.tokens_per_chunk);
    uint32_t* counts = m.routed.as<uint32_t>() + layer * p.experts;
    cuda::RouterSpec router{
        router_gating(p.router.gating),         p.router.normalize, p.router.scale, static_cast<int>(p.router.groups),
        static_cast<int>(p.router.groups_used), w.selection_bias,   w.router_bias};
    if (w.token_experts) {
      router.token_experts = w.token_experts;
      router.tokens = ws.tokens.as<int32_t>();
    }
    if (m.replaying_routing) {
      router.replay = ws.replayed_routing.as<int32_t>() + layer * n * p.experts_used;
    }
    if (n <= cuda::kMaxRouteDecodeRows && cuda::is_float_type(w.router.type)) {
      cuda::route_decode(w.router, x.for_type(w.router.type, w.router.rows).floats, n, p.experts, p.experts_used,
                         router, experts.slot_of_expert, groups.tokens_per_chunk, f(ws.router_logits),
                         ws.chosen.as<int32_t>(), f(ws.routing_weights), counts, ws.order.as<int32_t>(),
                         ws.chunks.as<int32_t>(), ws.chunk_count.as<int32_t>(), ws.route_ticket.as<uint32_t>(), stream);
    } else {
      mul(w.router, x, n, f(ws.router_logits), false);
      cuda::route_and_group(f(ws.router_logits), n, p.experts, p.experts_used, router, experts.slot_of_expert,
                            groups.tokens_per_chunk, ws.chosen.as<int32_t>(), f(ws.routing_weights), counts,
                            ws.order.as<int32_t>(), ws.chunks.as<int32_t>(), ws.chunk_count.as<int32_t>(), stream);
    }
    if (streamed_layer && m.expert_stream->layer_incomplete()) m.expert_stream->complete_layer(groups, stream);
    if (hybrid) host->queue_publish(layer, n, f(ws.normed), ws.chosen.as<int32_t>(), f(ws.routing_weights), stream);
    // A layer without GPU experts (all in host memory, as where the GPU's kernels cannot serve
    // its expert stacks: see GpuKernelGap) has no GPU half.
    const bool gpu_half = experts.gate.count > 0;
    if (gpu_half) gpu_experts(w, experts, tiled, groups, x);
    if (streamed_layer) m.expert_stream->layer_done(stream);
    const cuda::ExpertSum sum{f(ws.expert_out), f(ws.routing_weights), ws.chosen.as<int32_t>(), experts.slot_of_expert,
                              p.experts_used};
    if (!host_layer && !hyper()) {
      pending = sum;
      return;
    }
    // The host's sum is added after the GPU's, and a streamed layer's slot table is the stream's.
    if (gpu_half) {
      cuda::combine_experts(sum.expert_out, sum.weights, sum.chosen, sum.slot_of_expert, n, p.experts_used, p.embedding,
                            out(), stream);
    }
    if (hybrid) host->queue_collect(layer, n, out(), stream);
  }

  // The products of the routed rows' GPU experts (grouped by `groups`) into ws.expert_out: the
  // tiles where they serve both types, else the matvec (float stacks: float_experts.cu).
  void gpu_experts(const GpuFfn& w, const ExpertStacks& experts, bool tiled, const cuda::ExpertGroups& groups,
                   Input& x) const {
    const model::HyperParams& p = m.params;
    const Workspace& ws = m.work;
    const cuda::ExpertEpilogue epilogue{ws.chosen.as<int32_t>(), w.gate_bias, w.up_bias, w.down_bias,
                                        gated_activation(p.activation)};
    const cuda::MatvecInput input = x.for_type(experts.gate.type, experts.gate.rows * p.experts_used);
    if (tiled) {
      cuda::expert_gated_mmq(experts.gate, experts.up, input.blocks, p.experts_used, groups, f(ws.hidden), stream,
                             epilogue);
    } else {
      cuda::expert_gated_matvec(experts.gate, experts.up, input, p.experts_used, groups, f(ws.hidden), stream,
                                epilogue);
    }
    Input hidden(*this, f(ws.hidden), n * p.experts_used, p.expert_feed_forward);
    if (tiled) {
      cuda::expert_mmq(experts.down, hidden.for_type(experts.down.type, experts.down.rows * p.experts_used).blocks,
                       groups, f(ws.expert_out), stream, epilogue);
    } else {
      cuda::expert_matvec(experts.down, hidden.for_type(experts.down.type, experts.down.rows * p.experts_used), groups,
                          f(ws.expert_out), stream, epilogue);
    }
  }

  void ffn_block(const GpuFfn& w, int64_t layer) const {
    const bool routed = w.kind == model::FfnKind::kMoe;
    Input x = block_input(w.hyper, w.norm, routed ? w.expert_gate : w.gate);
    ffn(w, layer, x);
    block_output();
  }
  void ffn(const GpuFfn& w, int64_t layer, Input& x) const {
    const model::HyperParams& p = m.params;
    const Workspace& ws = m.work;
    if (w.kind != model::FfnKind::kMoe) {
      swiglu_ffn(w, x);
      return;
    }
    moe_ffn(w, layer, x);
    if (w.gate.rows == 0) return;
    // The routed experts quantized their hidden rows over x's: the shared experts read x afresh.
    Input shared(*this, f(ws.normed), n, p.embedding);
    if (w.shared_gate.rows == 0) {
      swiglu_ffn(w, shared);
      return;
    }
    // Gated (Qwen3-Next, Qwen3.5): their output times sigmoid(shared_gate x) joins the residual.
    // The gate's product first: the shared experts' hidden rows are quantized over x's.
    mul(w.shared_gate, shared, n, f(ws.shared_gate), false);
    swiglu_ffn(w, shared, f(ws.shared_out));
    cuda::add_sigmoid_gated(f(ws.shared_out), f(ws.shared_gate), n, p.embedding, out(), stream);
  }

  // Queues the pass over the rows uploaded to work.tokens / work.positions: begin(), each
  // layer(), then finish(), which writes the logits of layout.outputs, in row order, to
  // work.logits.
  void begin() const {
    if (hybrid()) m.host_experts->queue_begin_pass(stream);
    if (streamed) m.expert_stream->begin_pass(!hybrid());
    if (m.params.mla.kv_lora_rank > 0) {
      const Workspace& ws = m.work;
      const cuda::ExpertGroups g = latent_groups();
      cuda::group_by_expert(ws.latent_heads.as<int32_t>(), n, m.params.heads, m.params.heads,
                            ws.latent_slots.as<int32_t>(), g.tokens_per_chunk, ws.latent_order.as<int32_t>(),
                            ws.latent_chunks.as<int32_t>(), ws.latent_chunk_count.as<int32_t>(), stream);
    }
    const model::CompressedParams& c = m.params.compressed;
    if (c.q_lora_rank > 0) {
      const Workspace& ws = m.work;
      const cuda::ExpertGroups g = output_groups();
      cuda::group_by_expert(ws.group_heads.as<int32_t>(), n, c.output_groups, c.output_groups,
                            ws.group_slots.as<int32_t>(), g.tokens_per_chunk, ws.group_order.as<int32_t>(),
                            ws.group_chunks.as<int32_t>(), ws.group_chunk_count.as<int32_t>(), stream);
    }
    if (!hyper()) {
      cuda::embed(m.token_embedding, m.work.tokens.as<int32_t>(), n, f(m.work.residual), stream);
      return;
    }
    // Each row's embedding becomes its streams.
    cuda::embed(m.token_embedding, m.work.tokens.as<int32_t>(), n, f(m.work.hyper_input), stream);
    cuda::spread_streams(f(m.work.hyper_input), n, hyper_shape(), f(m.work.residual), stream);
  }
  void layer(int64_t l) const {
    // A sequence restored by restore_kv: its layer's rows may still be on their way.
    for (const PassLayout::Segment& part : layout.segments) {
      if (part.sequence->restoring) part.sequence->layer_restored[static_cast<size_t>(l)]->wait_in(stream);
    }
    attention_block(m.layers[l].attention, l);
    ffn_block(m.layers[l].ffn, l);
  }
  void run() const {
    begin();
    for (int64_t l = 0; l < m.params.layers; ++l) layer(l);
    finish();
  }
  void finish() const {
    const model::HyperParams& p = m.params;
    const Workspace& ws = m.work;
    cuda::check_launch("the GPU forward pass");
    if (hyper() && layout.hidden_rows + layout.output_rows > 0) join_streams();
    if (layout.hidden_rows > 0) normed_hidden_states();
    if (layout.output_rows == 0) return;
    const PassLayout::Run& only = layout.outputs.front();
    if (layout.outputs.size() == 1 && only.first_row + only.rows == n) {
      // The last rows (a decode step, a prompt's last row): the norm adds the pending MoE sum.
      Input normed = norm(trunk() + only.first_row * p.embedding, only.rows, m.output_norm, m.output);
      mul(m.output, normed, only.rows, f(ws.logits), false);
    } else {
      output_runs();
    }
    cuda::check_launch("the GPU forward pass");
  }
  // The logits of several runs of rows (gathered in row order): the pending MoE sum added to
  // every row first, then each run normed.
  void output_runs() const {
    const model::HyperParams& p = m.params;
    const Workspace& ws = m.work;
    add_pending_experts();
    normed_runs(layout.outputs, f(ws.normed));
    Input normed(*this, f(ws.normed), layout.output_rows, p.embedding);
    mul(m.output, normed, layout.output_rows, f(ws.logits), false);
  }
  // The kEmbeddings rows' hidden states after the output norm, gathered in row order into
  // ws.embeddings (what pooling takes, as forward() returns them).
  void normed_hidden_states() const {
    add_pending_experts();
    normed_runs(layout.hidden, f(m.work.embeddings));
  }
  void add_pending_experts() const {
    if (!pending.expert_out) return;
    cuda::combine_experts(pending.expert_out, pending.weights, pending.chosen, pending.slot_of_expert, n, pending.used,
                          m.params.embedding, trunk(), stream);
    pending = {};
  }
  // Each run of rows of the residual stream through the output norm, gathered into `out`.
  void normed_runs(const std::vector<PassLayout::Run>& runs, float* out) const {
    const model::HyperParams& p = m.params;
    int64_t gathered = 0;
    for (const PassLayout::Run& run : runs) {
      cuda::RmsNorm args;
      args.x = trunk() + run.first_row * p.embedding;
      args.rows = run.rows;
      args.width = p.embedding;
      args.weight = m.output_norm;
      args.eps = p.rms_epsilon;
      args.out = out + gathered * p.embedding;
      cuda::rms_norm(args, stream);
      gathered += run.rows;
    }
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
void run_hybrid(const Pass& pass, const cuda::Stream& stream) {
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
        pass.finish();
      }
      if (pass.hands_off(layer)) host.serve(layer, pass.n, stream);
    }
  } catch (...) {
    host.recover(stream);
    throw;
  }
}

struct PassRows {
  int64_t first, n;
  bool tiled;
};

// How a batch whose part i has rows [first_row[i], first_row[i + 1]) runs: in passes of at most
// `max_rows` rows, each of one kernel family: a part of kMmqMinRows rows or more takes the tiled
// products, a shorter one the mat-vecs, whatever else the batch holds, and a part is cut only
// where it is longer than a pass (from its own start). So a part's floats are what it gets
// alone (the kernels' sums for a row do not depend on the rows beside it: cuda_batch_rows_test),
// and a stream decodes its tokens whatever streams share its steps.
std::vector<PassRows> pass_rows(const std::vector<int64_t>& first_row, int64_t max_rows) {
  std::vector<PassRows> passes;
  for (size_t i = 0; i + 1 < first_row.size(); ++i) {
    const int64_t rows = first_row[i + 1] - first_row[i];
    const bool tiled = rows >= cuda::kMmqMinRows;
    for (int64_t done = 0; done < rows;) {
      const int64_t first = first_row[i] + done;
      PassRows* open = passes.empty() ? nullptr : &passes.back();
      if (open && (open->tiled != tiled || open->first + open->n != first || open->n == max_rows ||
                   (done == 0 && open->n + rows > max_rows))) {
        open = nullptr;
      }
      if (!open) open = &passes.emplace_back(PassRows{first, 0, tiled});
      const int64_t take = std::min(rows - done, max_rows - open->n);
      open->n += take;
      done += take;
    }
  }
  return passes;
}

// The pass over rows [first, first + n) of a batch whose part i has rows [first_row[i], first_row[i + 1]).
PassLayout pass_layout(std::span<const GpuSequenceRows> batch, const std::vector<int64_t>& first_row, int64_t first,
                       int64_t n, bool tiled) {
  PassLayout layout;
  layout.first = first;
  layout.rows = n;
  layout.tiled = tiled;
  for (size_t i = 0; i < batch.size(); ++i) {
    const int64_t begin = std::max(first_row[i], first), end = std::min(first_row[i + 1], first + n);
    if (begin >= end) continue;
    PassLayout::Segment& segment =
        layout.segments.emplace_back(PassLayout::Segment{batch[i].sequence, begin - first, end - begin, {}});
    const int64_t done = begin - first_row[i];
    for (const StateSnapshot& snapshot : batch[i].snapshots) {
      if (snapshot.rows > done && snapshot.rows <= done + segment.rows) {
        segment.snapshots.push_back({snapshot.rows - done, snapshot.states});
      }
    }
    if (batch[i].rows == LogitRows::kEmbeddings || batch[i].keep_hidden) layout.add_hidden(begin - first, end - begin);
    if (batch[i].rows == LogitRows::kAll) {
      layout.add_output(begin - first, end - begin);
    } else if (batch[i].rows == LogitRows::kLast && end == first_row[i + 1]) {
      layout.add_output(end - 1 - first, 1);
    }
  }
  return layout;
}

// Moves `kept` rows of `width` f16 elements down by `shift` rows within `rows`, on `stream`: in
// pieces of at most `shift` rows, so that no copy's source and destination overlap.
void move_rows_down(uint16_t* rows, int64_t shift, int64_t kept, int64_t width, cuda::StreamHandle stream) {
  for (int64_t done = 0; done < kept; done += shift) {
    const int64_t count = std::min(shift, kept - done);
    cuda::copy_async(rows + done * width, rows + (done + shift) * width,
                     static_cast<size_t>(count * width) * sizeof(uint16_t), stream);
  }
}

// Before a pass stores `rows` rows of a sequence from `position` on: where its windowed layers'
// storage cannot take them, each keeps only the positions the pass's rows can still see (from
// model::window_floor(position) on), moved to its front; a context begun again (position 0) starts
// it over. The copies run on `stream` ahead of the pass. Sessions continue only where the
// windows still hold what they need (gpu_window_first), so the rows kept were all stored.
void make_window_room(GpuModel& model, GpuSequence& s, int64_t position, int64_t rows, cuda::StreamHandle stream) {
  if (s.window_rows == 0) return;
  if (position == 0) {
    s.window_first = 0;
    return;
  }
  if (position + rows - s.window_first <= s.window_rows) return;
  const int64_t from = model::window_floor(model.params, position);
  if (from < s.window_first || position + rows - from > s.window_rows) {
    throw Error("INVALID_ARGUMENT", "a pass of " + std::to_string(rows) + " rows at position " +
                                        std::to_string(position) +
                                        " needs positions the sliding-window layers dropped");
  }
  s.settle_restore();  // the copies below read rows a restore may still be writing
  const int64_t shift = from - s.window_first, kept = position - from;
  if (shift > 0 && kept > 0) {
    for (size_t layer = 0; layer < s.windowed.size(); ++layer) {
      if (!s.windowed[layer]) continue;
      const auto l = static_cast<int64_t>(layer);
      move_rows_down(s.stored_keys(l), shift, kept, s.row.keys, stream);
      if (s.row.values > 0) move_rows_down(s.stored_values(l), shift, kept, s.row.values, stream);
    }
  }
  s.window_first = from;
}

// Launches the graph of a decode step of the pass's sequences. A set of sequences not among
// the graphs kept is captured: into a new graph while fewer than kDecodeGraphs are kept, else
// into the least recently used one of the same count (updated in place: the same launches with
// other caches), or of any count (instantiated anew).
void replay_decode_step(GpuModel& model, const Pass& pass) {
  std::vector<StepCaches> caches;
  for (const PassLayout::Segment& part : pass.layout.segments) {
    const GpuSequence& s = *part.sequence;
    caches.push_back({s.keys.data(), s.values.data(), s.recurrent.data(), s.compressed.data(), s.window_first});
  }
  std::list<DecodeGraph>& graphs = model.decode_graphs;
  auto step = std::find_if(graphs.begin(), graphs.end(), [&](const DecodeGraph& g) { return g.caches == caches; });
  if (step == graphs.end()) {
    if (graphs.size() < kDecodeGraphs) {
      step = graphs.emplace(graphs.end());
    } else {
      const auto same_count = std::find_if(graphs.rbegin(), graphs.rend(),
                                           [&](const DecodeGraph& g) { return g.caches.size() == caches.size(); });
      step = same_count != graphs.rend() ? std::prev(same_count.base()) : std::prev(graphs.end());
    }
    step->caches.clear();
    step->graph.capture(pass.stream, [&pass] { pass.run(); });
    step->caches = std::move(caches);
  }
  graphs.splice(graphs.begin(), graphs, step);
  step->graph.launch(pass.stream);
}

}  // namespace

int64_t gpu_pass_rows(const GpuModel& model) { return model.pass_rows; }

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
    f.expert_bytes.push_back(routed_expert_bytes(w));
    if (!w.ffn.routed.empty()) f.dense_bytes += 3 * 256;  // each of the layer's three pools may round up to 256 bytes
  }
  const LayerKinds kinds(model);
  f.kv_bytes = kv_bytes(p, kinds, context_size, kGpuPassRows);
  f.workspace_bytes = workspace_bytes(p, kinds, context_size, kGpuPassRows);
  f.kernel_gaps = kernel_gaps(model);
  const uint64_t staging = ExpertStream::staging_bytes(model, streamable_layers(model, f.kernel_gaps));
  f.stream_bytes =
      staging > 0 ? staging + pass_growth(p, kinds, context_size, streamed_pass_rows(p, kinds, context_size, staging))
                  : 0;
  f.reserve_bytes = kReserve;
  return f;
}

std::shared_ptr<GpuModel> upload_model(const model::Model& model, const GpuOptions& options, int64_t context_size,
                                       cpu::ThreadPool& pool, ExpertArena* arena, const LoadProgress& progress) {
  const cuda::CudaStatus status = cuda::query_cuda();
  if (!status.available) throw Error("GPU_UNAVAILABLE", status.reason);
  if (options.device < 0 || options.device >= static_cast<int>(status.devices.size())) {
    throw Error("GPU_UNAVAILABLE", "gpu.device " + std::to_string(options.device) + " does not exist (" +
                                       std::to_string(status.devices.size()) + " CUDA devices)");
  }
  const model::HyperParams& p = model.params;
  check_shape(p, LayerKinds(model));
  check_blocks(model);
  const std::vector<GpuKernelGap> gaps = kernel_gaps(model);

  cuda::use_device(options.device);
  if (p.mla.kv_lora_rank > 0) cuda::prepare_latent_attention(p.mla.kv_lora_rank, p.mla.rope_dim);
  cuda::prepare_tiled_attention(p.head_dim);
  if (p.compressed.q_lora_rank > 0) cuda::prepare_compressed_attention();
  std::shared_ptr<GpuModel> g(new GpuModel, [](GpuModel* m) {
    const std::lock_guard freeing(hybrid_passes());
    delete m;
  });
  // Taken after g, so that a failed upload lets go of it before g's deleter takes it again.
  const std::lock_guard exclusive(hybrid_passes());
  g->device = options.device;
  g->state_pool = std::make_unique<cuda::PinnedPool>(kKeptStateMemory, g->device);  // allocates nothing yet
  g->params = p;
  g->context_size = context_size;
  g->latent_tiles = p.mla.kv_lora_rank > 0;
  for (const model::LayerWeights& w : model.layers) {
    for (const cpu::ExpertMatrices* m : {&w.attention.mla.k_b, &w.attention.mla.v_b}) {
      if (m->count > 0)
        g->latent_tiles = g->latent_tiles && cuda::mmq_serves(m->first.kernels->type, cuda::kMmqMinRows);
    }
  }
  g->group_tiles = p.compressed.q_lora_rank > 0;
  for (const model::LayerWeights& w : model.layers) {
    const cpu::ExpertMatrices& output_a = w.attention.compressed.output_a;
    if (output_a.count > 0) {
      g->group_tiles = g->group_tiles && cuda::mmq_serves(output_a.first.kernels->type, cuda::kMmqMinRows);
    }
  }
  set_residency(p, resident_experts(model, options.gpu_experts), *g);
  check_kernels(gaps, *g);
  const std::vector<bool> streamed = streamable_layers(model, gaps);
  int64_t resident = 0, all = 0;
  for (size_t l = 0; l < g->resident.size(); ++l) {
    resident += static_cast<int64_t>(g->resident[l].size());
    if (!model.layers[l].ffn.routed.empty()) all += p.experts;
  }
  Uploader planner(p);
  bind_weights(model, planner, *g);
  const size_t weights = planner.bytes();
  const cuda::MemoryInfo memory = cuda::memory_info();
  const uint64_t usable = memory.free > kReserve ? memory.free - kReserve : 0;
  const uint64_t available = options.budget > 0 ? std::min<uint64_t>(options.budget, usable) : usable;
  const uint64_t staging = resident < all && !arena ? ExpertStream::staging_bytes(model, streamed) : 0;
  g->kinds = LayerKinds(model);
  g->pass_rows = staging > 0 ? streamed_pass_rows(p, g->kinds, context_size, staging) : kGpuPassRows;
  const size_t kv = kv_bytes(p, g->kinds, context_size, g->pass_rows);
  const size_t workspace = workspace_bytes(p, g->kinds, context_size, g->pass_rows);
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
  planner.allocate(progress);
  bind_weights(model, planner, *g);
  g->weights = planner.take();
  allocate_workspace(p, g->kinds, context_size, g->pass_rows, g->work);
  if (p.experts > 0) {
    const std::vector<uint32_t> zeros(static_cast<size_t>(p.layers * p.experts), 0);
    const size_t bytes = zeros.size() * sizeof(uint32_t);
    g->routed = DeviceBuffer(bytes, "routing counts");
    g->routed_host = cuda::PinnedBuffer(bytes, "routing counts (host copy)");
    std::memset(g->routed_host.host<uint32_t>(), 0, bytes);
    g->routed_taken = zeros;
  }
  if (resident < all) {
    if (!cuda::modules_load_eagerly()) {
      const char* mode = std::getenv("CUDA_MODULE_LOADING");
      throw Error("UNSUPPORTED_FEATURE", std::string("experts on the CPU beside the GPU need CUDA kernels loaded with "
                                                     "their module, and CUDA_MODULE_LOADING is ") +
                                             (mode ? mode : "unset") +
                                             ": unset it or set it to EAGER (or load with gpu: false)");
    }
    std::vector<std::vector<uint8_t>> on_host;
    for (size_t l = 0; l < g->slot_tables.size(); ++l) {
      const bool routed = !model.layers[l].ffn.routed.empty();
      std::vector<uint8_t> mask;
      for (const int32_t slot : g->slot_tables[l]) mask.push_back(routed && slot < 0 ? 1 : 0);
      on_host.push_back(std::move(mask));
    }
    g->host_experts = std::make_unique<HostExperts>(model, std::move(on_host), g->pass_rows, pool, arena);
    // Long prompts stream host experts from page-locked file pages, and residency copies from
    // those pages too: not with a disk tier (host experts live in its arena: prompts hand their
    // rows to the CPU, and residency keeps the plan's placement), nor where no layer streams (no
    // expert stacks the GPU's kernels can serve, so no layer has GPU slots to move experts into).
    if (staging > 0) {
      std::vector<ExpertStacks> stacks;
      for (const GpuLayer& l : g->layers) {
        stacks.push_back({l.ffn.expert_gate, l.ffn.expert_up, l.ffn.expert_down, l.ffn.expert_slots});
      }
      g->expert_stream = std::make_unique<ExpertStream>(model, g->slot_tables, std::move(stacks), streamed);
      std::vector<SlotPools> pools;
      for (const GpuLayer& layer : g->layers) {
        // The pools and tables sit in the weights' allocation, which the model owns: writable.
        const GpuFfn& f = layer.ffn;
        pools.push_back({const_cast<uint8_t*>(f.expert_gate.data), const_cast<uint8_t*>(f.expert_up.data),
                         const_cast<uint8_t*>(f.expert_down.data), const_cast<int32_t*>(f.expert_slots)});
      }
      g->residency = std::make_unique<GpuResidency>(model, std::move(pools), g->slot_tables, *g->host_experts);
    }
  }
  return g;
}

std::shared_ptr<GpuSequence> create_gpu_sequence(GpuModel& model, int64_t context_size) {
  cuda::use_device(model.device);
  const model::HyperParams& p = model.params;
  if (context_size > model.context_size) {
    throw Error("INVALID_ARGUMENT", "a GPU sequence of " + std::to_string(context_size) +
                                        " positions is longer than the model's contextSize of " +
                                        std::to_string(model.context_size));
  }
  const LayerKinds& kept = model.kinds;
  const size_t bytes = kv_bytes(p, kept, context_size, model.pass_rows);
  const cuda::MemoryInfo memory = cuda::memory_info();
  if (bytes + kReserve > memory.free) {
    throw Error("INSUFFICIENT_MEMORY", "a session's KV cache and recurrent states need " + gib(bytes) +
                                           " (contextSize " + std::to_string(context_size) + "); the GPU has " +
                                           gib(memory.free) + " free, less a reserve of " + gib(kReserve));
  }
  std::shared_ptr<GpuSequence> s(new GpuSequence, [m = &model](GpuSequence* q) { release_sequence(*m, q); });
  const std::lock_guard exclusive(hybrid_passes());  // after s: see upload_model
  s->capacity = context_size;
  s->row = model::cache_row(p);
  s->window_rows = p.sliding_window > 0 ? window_rows(p, context_size, model.pass_rows) : 0;
  int64_t rows = 0, recurrent = 0, compressed = 0;
  for (size_t l = 0; l < kept.windowed.size(); ++l) {
    s->rows_before.push_back(rows);
    rows += kept.rows(l, context_size, s->window_rows);
    const int64_t state = kept.state_floats(p, l);
    s->recurrent_before.push_back(state > 0 ? recurrent : -1);
    recurrent += state;
    const int64_t halves = kept.compressed_halves(p, l, context_size);
    s->compressed_before.push_back(halves > 0 ? compressed : -1);
    compressed += halves;
  }
  s->windowed = kept.windowed;
  s->linear = kept.linear;
  s->keys = DeviceBuffer(static_cast<size_t>(rows * s->row.keys) * sizeof(uint16_t), "KV cache (keys)");
  s->values = DeviceBuffer(static_cast<size_t>(rows * s->row.values) * sizeof(uint16_t), "KV cache (values)");
  s->recurrent = DeviceBuffer(static_cast<size_t>(recurrent) * sizeof(float), "recurrent states");
  s->compressed = DeviceBuffer(static_cast<size_t>(compressed) * sizeof(uint16_t), "compressed rows");
  return s;
}

void gpu_forward(GpuModel& model, std::span<const GpuSequenceRows> batch, std::vector<float>& logits,
                 std::vector<float>& hidden, std::span<const int32_t> replayed) {
  const auto started = std::chrono::steady_clock::now();
  cuda::use_device(model.device);
  const model::HyperParams& p = model.params;
  std::vector<int32_t> tokens, positions;
  std::vector<int64_t> first_row{0};
  for (const GpuSequenceRows& part : batch) {
    for (size_t i = 0; i < part.tokens.size(); ++i) {
      tokens.push_back(part.tokens[i]);
      positions.push_back(static_cast<int32_t>(part.first_position + static_cast<int64_t>(i)));
    }
    first_row.push_back(static_cast<int64_t>(tokens.size()));
  }
  for (const GpuSequenceRows& part : batch) {
    check_snapshots(part.snapshots, static_cast<int64_t>(part.tokens.size()));
  }
  cuda::profile_from_position(positions);
  const auto total = static_cast<int64_t>(tokens.size());
  std::vector<PassLayout> passes;
  int64_t widest = 0, output_rows = 0, widest_hidden = 0, hidden_rows = 0;
  for (const auto& [first, n, tiled] : pass_rows(first_row, model.pass_rows)) {
    passes.push_back(pass_layout(batch, first_row, first, n, tiled));
    widest = std::max(widest, passes.back().output_rows);
    output_rows += passes.back().output_rows;
    widest_hidden = std::max(widest_hidden, passes.back().hidden_rows);
    hidden_rows += passes.back().hidden_rows;
  }
  logits.resize(static_cast<size_t>(output_rows * p.vocab));
  hidden.resize(static_cast<size_t>(hidden_rows * p.embedding));
  const size_t logit_bytes = static_cast<size_t>(widest * p.vocab) * sizeof(float);
  const size_t hidden_bytes = static_cast<size_t>(widest_hidden * p.embedding) * sizeof(float);
  const bool replay = !replayed.empty();
  const size_t replay_bytes = static_cast<size_t>(p.layers * model.pass_rows * p.experts_used) * sizeof(int32_t);
  if (replay != model.replaying_routing) {
    // The decode graphs' router launches were captured with the other routing.
    const std::lock_guard exclusive(hybrid_passes());
    model.decode_graphs.clear();
    if (replay && model.work.replayed_routing.bytes() < replay_bytes) {
      model.work.replayed_routing = DeviceBuffer(replay_bytes, "routing replayed from a trace");
    }
    model.replaying_routing = replay;
  }
  if (model.work.logits.bytes() < logit_bytes || model.work.embeddings.bytes() < hidden_bytes) {
    // Freeing device memory waits for hybrid passes to end (see hybrid_passes). The decode
    // graphs wrote to the old buffers.
    const std::lock_guard exclusive(hybrid_passes());
    model.free_retired();
    model.decode_graphs.clear();
    if (model.work.logits.bytes() < logit_bytes) {
      model.work.logits = DeviceBuffer();
      model.work.logits = DeviceBuffer(logit_bytes, "logits of a pass");
    }
    if (model.work.embeddings.bytes() < hidden_bytes) {
      model.work.embeddings = DeviceBuffer();
      model.work.embeddings = DeviceBuffer(hidden_bytes, "hidden states of a pass's embedding rows");
    }
  } else {
    std::unique_lock exclusive(hybrid_passes(), std::try_to_lock);
    if (exclusive.owns_lock()) model.free_retired();
  }
  std::shared_lock<std::shared_mutex> hybrid_pass;
  if (model.host_experts) hybrid_pass = std::shared_lock(hybrid_passes());
  Workspace& ws = model.work;
  const cuda::StreamHandle stream = model.stream.handle();
  HostExperts* host = model.host_experts.get();
  int64_t returned = 0, returned_hidden = 0;
  bool any_streamed = false;
  std::vector<int32_t> pass_routing;
  for (size_t i = 0; i < passes.size(); ++i) {
    const int64_t first = passes[i].first;
    const int64_t n = passes[i].rows;
    for (const PassLayout::Segment& part : passes[i].segments) {
      const int32_t position = positions[static_cast<size_t>(first + part.first_row)];
      make_window_room(model, *part.sequence, position, part.rows, stream);
      // A sequence begun again starts its recurrent states from zero.
      const DeviceBuffer& recurrent = part.sequence->recurrent;
      if (position == 0 && recurrent.bytes() > 0) cuda::zero_async(recurrent.data(), recurrent.bytes(), stream);
    }
    cuda::copy_to_device(ws.tokens.data(), tokens.data() + first, n * sizeof(int32_t), stream);
    cuda::copy_to_device(ws.positions.data(), positions.data() + first, n * sizeof(int32_t), stream);
    if (replay) {
      // The pass's rows of `replayed` ([layer][row][used] over all rows), as [layer][row][used] over its own.
      const int64_t used = p.experts_used;
      pass_routing.resize(static_cast<size_t>(p.layers * n * used));
      for (int64_t l = 0; l < p.layers; ++l) {
        std::copy_n(replayed.data() + (l * total + first) * used, n * used, pass_routing.data() + l * n * used);
      }
      cuda::copy_to_device(ws.replayed_routing.data(), pass_routing.data(), pass_routing.size() * sizeof(int32_t),
                           stream);
    }
    const bool streamed =
        n > 1 && model.expert_stream &&
        StreamChoice::stream(n, model.expert_stream->copy_layer_seconds(), model.host_experts->cpu_layer_seconds(n));
    const Pass pass{model, passes[i], n, stream, streamed, {}};
    // Whether the CPU runs some of this pass's host experts (a streamed pass copies the others to the GPU).
    const bool hands_rows = pass.hybrid();
    if (streamed) host->count_streamed_pass();
    any_streamed = any_streamed || streamed;
    // A pass that returns hidden states is never a graph's: the graphs kept are told apart by
    // their caches alone, and their steps return logits.
    const bool decode = !passes[i].tiled && std::all_of(passes[i].segments.begin(), passes[i].segments.end(),
                                                        [](const PassLayout::Segment& part) { return part.rows == 1; });
    if (decode && !streamed && passes[i].hidden_rows == 0) {
      // A graph's launches cannot wait for a restore's events (recorded outside its capture).
      for (const GpuSequenceRows& part : batch) part.sequence->settle_restore();
      replay_decode_step(model, pass);
      if (hands_rows) {
        host->start_pass();  // after the launch, so a failed one leaves the steps aligned
        serve_host_experts(*host, p.layers, n, model.stream);
      }
    } else if (hands_rows) {
      run_hybrid(pass, model.stream);
    } else {
      pass.run();
    }
    const int64_t rows = passes[i].output_rows;
    if (rows > 0) {
      cuda::copy_to_host(logits.data() + returned * p.vocab, ws.logits.data(), rows * p.vocab * sizeof(float), stream);
    }
    returned += rows;
    if (passes[i].hidden_rows > 0) {
      cuda::copy_to_host(hidden.data() + returned_hidden * p.embedding, ws.embeddings.data(),
                         passes[i].hidden_rows * p.embedding * sizeof(float), stream);
      returned_hidden += passes[i].hidden_rows;
    }
  }
  if (p.experts > 0) {
    cuda::copy_to_host(model.routed_host.host<uint32_t>(), model.routed.data(),
                       static_cast<size_t>(p.layers * p.experts) * sizeof(uint32_t), stream);
  }
  model.stream.synchronize();
  // Every layer of the passes waited for its restored rows: the copies are done.
  for (const GpuSequenceRows& part : batch) part.sequence->restoring.reset();
  if (model.expert_stream) model.expert_stream->observe_call(model.routed_host.host<uint32_t>(), any_streamed);
  if (model.host_experts) {
    model.host_experts->add_pass_time(
        std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count());
  }
}

OffloadStats offload_stats(GpuModel& model) {
  if (!model.host_experts) return {};
  cuda::use_device(model.device);
  OffloadStats s = model.host_experts->stats();
  if (model.expert_stream) {
    const ExpertStream::CopyTotals copies = model.expert_stream->copy_totals();
    s.streamed_bytes = copies.bytes;
    s.streamed_bytes_per_second = copies.bytes_per_second;
  }
  return s;
}

bool gpu_can_move_experts(GpuModel& model) { return model.residency != nullptr; }

void take_routed_calls(GpuModel& model, std::vector<uint32_t>& calls) {
  const uint32_t* counted = model.routed_host.host<uint32_t>();
  for (size_t i = 0; i < model.routed_taken.size(); ++i) {
    calls[i] += counted[i] - model.routed_taken[i];
    model.routed_taken[i] = counted[i];
  }
}

const std::vector<std::vector<int32_t>>& gpu_slot_tables(GpuModel& model) { return model.slot_tables; }

const std::vector<std::vector<int32_t>>& gpu_slot_experts(GpuModel& model) {
  if (!model.residency) throw Error("INVALID_ARGUMENT", "the model has no experts in host memory to move");
  return model.residency->slot_experts();
}

void begin_swaps(GpuModel& model, std::span<const Swap> swaps) {
  if (!model.residency) throw Error("INVALID_ARGUMENT", "the model has no experts in host memory to move");
  cuda::use_device(model.device);
  model.residency->begin(swaps, model.stream.handle());
}

void seat_copied_experts(GpuModel& model) {
  if (!model.residency) throw Error("INVALID_ARGUMENT", "the model has no experts in host memory to move");
  cuda::use_device(model.device);
  model.residency->seat_copied(model.stream.handle());
}

namespace {

// fn(layer, its first row in a state's layout, the first position it holds there) for each layer
// with KV rows (not those of linear attention) of a state of `packed` tokens whose windowed layers
// hold positions from window_first on.
template <typename Fn>
void state_layers(const GpuSequence& s, int64_t packed, int64_t window_first, Fn fn) {
  int64_t at = 0;
  for (size_t layer = 0; layer < s.windowed.size(); ++layer) {
    if (s.linear[layer]) continue;
    const int64_t from = s.windowed[layer] ? window_first : 0;
    fn(static_cast<int64_t>(layer), at, from);
    at += packed - from;
  }
}

// A state's compressed rows (SessionState::compressed: per compressed layer, in layer order, the
// rows of the blocks before `packed`) and a sequence's: copy(layer, fn) calls fn(the layer's first
// half in the state, the halves of its blocks before n) for a compressed layer, and nothing for
// another; layers come in order.
class CompressedCopies {
 public:
  CompressedCopies(const GpuModel& model, const GpuSequence& sequence, int64_t n, int64_t packed)
      : model_(model), sequence_(sequence), n_(n), packed_(packed) {}
  template <typename Fn>
  void copy(int64_t layer, Fn fn) {
    if (sequence_.compressed_before[layer] < 0) return;
    const int64_t ratio = model_.kinds.ratio[layer];
    const int64_t width = model::compressed_width_at_ratio(model_.params, ratio);
    if (n_ / ratio > 0) fn(at_, n_ / ratio * width);
    at_ += packed_ / ratio * width;
  }

 private:
  const GpuModel& model_;
  const GpuSequence& sequence_;
  int64_t n_, packed_;
  int64_t at_ = 0;
};

// Takes a state's window_first as the sequence's, for loading its first n positions.
void adopt_window(GpuSequence& s, int64_t n, int64_t window_first) {
  if (s.window_rows > 0 && n - window_first > s.window_rows) {
    throw Error("INVALID_ARGUMENT", "the state's sliding-window layers hold " + std::to_string(n - window_first) +
                                        " positions; the GPU sequence's hold " + std::to_string(s.window_rows));
  }
  s.window_first = s.window_rows > 0 ? window_first : 0;
}

}  // namespace

int64_t gpu_window_first(const GpuSequence& sequence) { return sequence.window_first; }
int64_t gpu_window_rows(const GpuSequence& sequence) { return sequence.window_rows; }

void copy_kv_to_host(GpuModel& model, GpuSequence& sequence, int64_t n, int64_t window_first, uint16_t* keys,
                     uint16_t* values, uint16_t* compressed) {
  cuda::use_device(model.device);
  sequence.settle_restore();
  const model::CacheRow& row = sequence.row;
  if (window_first < sequence.window_first) {
    throw Error("INVALID_ARGUMENT", "the GPU sequence's sliding-window layers hold positions from " +
                                        std::to_string(sequence.window_first) + " on, not " +
                                        std::to_string(window_first));
  }
  CompressedCopies rows(model, sequence, n, n);
  state_layers(sequence, n, window_first, [&](int64_t layer, int64_t at, int64_t from) {
    cuda::copy_to_host(keys + at * row.keys, sequence.keys_of(layer) + from * row.keys,
                       static_cast<size_t>((n - from) * row.keys) * sizeof(uint16_t), model.stream.handle());
    cuda::copy_to_host(values + at * row.values, sequence.values_of(layer) + from * row.values,
                       static_cast<size_t>((n - from) * row.values) * sizeof(uint16_t), model.stream.handle());
    if (compressed) {
      rows.copy(layer, [&](int64_t host_at, int64_t halves) {
        cuda::copy_to_host(compressed + host_at, sequence.compressed_of(layer),
                           static_cast<size_t>(halves) * sizeof(uint16_t), model.stream.handle());
      });
    }
  });
  model.stream.synchronize();
}

void copy_kv_to_device(GpuModel& model, GpuSequence& sequence, int64_t n, int64_t packed, int64_t window_first,
                       const uint16_t* keys, const uint16_t* values, const uint16_t* compressed) {
  cuda::use_device(model.device);
  sequence.settle_restore();
  adopt_window(sequence, n, window_first);
  const model::CacheRow& row = sequence.row;
  CompressedCopies rows(model, sequence, n, packed);
  state_layers(sequence, packed, window_first, [&](int64_t layer, int64_t at, int64_t from) {
    cuda::copy_to_device(sequence.keys_of(layer) + from * row.keys, keys + at * row.keys,
                         static_cast<size_t>((n - from) * row.keys) * sizeof(uint16_t), model.stream.handle());
    cuda::copy_to_device(sequence.values_of(layer) + from * row.values, values + at * row.values,
                         static_cast<size_t>((n - from) * row.values) * sizeof(uint16_t), model.stream.handle());
    if (compressed) {
      rows.copy(layer, [&](int64_t host_at, int64_t halves) {
        cuda::copy_to_device(sequence.compressed_of(layer), compressed + host_at,
                             static_cast<size_t>(halves) * sizeof(uint16_t), model.stream.handle());
      });
    }
  });
  model.stream.synchronize();
}

void restore_kv(GpuModel& model, GpuSequence& sequence, int64_t n, int64_t packed, int64_t window_first,
                const uint16_t* keys, const uint16_t* values, const uint16_t* compressed,
                std::shared_ptr<const void> rows) {
  cuda::use_device(model.device);
  sequence.settle_restore();
  adopt_window(sequence, n, window_first);
  const model::CacheRow& row = sequence.row;
  const auto layers = static_cast<size_t>(model.params.layers);
  while (sequence.layer_restored.size() < layers) sequence.layer_restored.push_back(std::make_unique<cuda::Event>());
  const cuda::StreamHandle copies = model.restore_stream.handle();
  // The copies rewrite rows the sequence's last pass may still read.
  sequence.layer_restored.front()->record(model.stream.handle());
  sequence.layer_restored.front()->wait_in(copies);
  sequence.restoring = std::move(rows);
  CompressedCopies blocks(model, sequence, n, packed);
  state_layers(sequence, packed, window_first, [&](int64_t layer, int64_t at, int64_t from) {
    cuda::copy_async(sequence.keys_of(layer) + from * row.keys, keys + at * row.keys,
                     static_cast<size_t>((n - from) * row.keys) * sizeof(uint16_t), copies);
    cuda::copy_async(sequence.values_of(layer) + from * row.values, values + at * row.values,
                     static_cast<size_t>((n - from) * row.values) * sizeof(uint16_t), copies);
    if (compressed) {
      blocks.copy(layer, [&](int64_t host_at, int64_t halves) {
        cuda::copy_async(sequence.compressed_of(layer), compressed + host_at,
                         static_cast<size_t>(halves) * sizeof(uint16_t), copies);
      });
    }
    sequence.layer_restored[static_cast<size_t>(layer)]->record(copies);
  });
  // settle_restore waits for the last layer's event: after every copy, also where that layer is one
  // of linear attention (no rows, so state_layers passed it by).
  sequence.layer_restored.back()->record(copies);
}

int64_t gpu_recurrent_floats(const GpuSequence& sequence) {
  return static_cast<int64_t>(sequence.recurrent.bytes() / sizeof(float));
}

void copy_recurrent_to_host(GpuModel& model, GpuSequence& sequence, float* recurrent) {
  cuda::use_device(model.device);
  cuda::copy_to_host(recurrent, sequence.recurrent.data(), sequence.recurrent.bytes(), model.stream.handle());
  model.stream.synchronize();
}

void copy_recurrent_to_device(GpuModel& model, GpuSequence& sequence, const float* recurrent) {
  cuda::use_device(model.device);
  cuda::copy_to_device(sequence.recurrent.data(), recurrent, sequence.recurrent.bytes(), model.stream.handle());
  model.stream.synchronize();
}

void keep_recurrent_on_device(GpuModel& model, GpuSequence& sequence) {
  cuda::use_device(model.device);
  if (sequence.kept_recurrent.bytes() != sequence.recurrent.bytes()) {
    sequence.kept_recurrent = DeviceBuffer(sequence.recurrent.bytes(), "a draft checkpoint's recurrent states");
  }
  cuda::copy_async(sequence.kept_recurrent.data(), sequence.recurrent.data(), sequence.recurrent.bytes(),
                   model.stream.handle());
}

void restore_recurrent_on_device(GpuModel& model, GpuSequence& sequence) {
  cuda::use_device(model.device);
  cuda::copy_async(sequence.recurrent.data(), sequence.kept_recurrent.data(), sequence.recurrent.bytes(),
                   model.stream.handle());
}

std::pmr::memory_resource& state_memory(GpuModel& model) { return *model.state_pool; }

void ready_state_memory(GpuModel& model, size_t bytes, size_t count) { model.state_pool->replenish(bytes, count); }

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
int64_t gpu_pass_rows(const GpuModel&) { refuse(); }
std::shared_ptr<GpuModel> upload_model(const model::Model&, const GpuOptions&, int64_t, cpu::ThreadPool&, ExpertArena*,
                                       const LoadProgress&) {
  refuse();
}
std::shared_ptr<GpuSequence> create_gpu_sequence(GpuModel&, int64_t) { refuse(); }
void gpu_forward(GpuModel&, std::span<const GpuSequenceRows>, std::vector<float>&, std::vector<float>&,
                 std::span<const int32_t>) {
  refuse();
}
OffloadStats offload_stats(GpuModel&) { refuse(); }
bool gpu_can_move_experts(GpuModel&) { refuse(); }
void take_routed_calls(GpuModel&, std::vector<uint32_t>&) { refuse(); }
const std::vector<std::vector<int32_t>>& gpu_slot_tables(GpuModel&) { refuse(); }
const std::vector<std::vector<int32_t>>& gpu_slot_experts(GpuModel&) { refuse(); }
void begin_swaps(GpuModel&, std::span<const Swap>) { refuse(); }
void seat_copied_experts(GpuModel&) { refuse(); }
int64_t gpu_window_first(const GpuSequence&) { refuse(); }
int64_t gpu_recurrent_floats(const GpuSequence&) { refuse(); }
void copy_recurrent_to_host(GpuModel&, GpuSequence&, float*) { refuse(); }
void copy_recurrent_to_device(GpuModel&, GpuSequence&, const float*) { refuse(); }
void keep_recurrent_on_device(GpuModel&, GpuSequence&) { refuse(); }
void restore_recurrent_on_device(GpuModel&, GpuSequence&) { refuse(); }
int64_t gpu_window_rows(const GpuSequence&) { refuse(); }
void copy_kv_to_host(GpuModel&, GpuSequence&, int64_t, int64_t, uint16_t*, uint16_t*, uint16_t*) { refuse(); }
void copy_kv_to_device(GpuModel&, GpuSequence&, int64_t, int64_t, int64_t, const uint16_t*, const uint16_t*,
                       const uint16_t*) {
  refuse();
}
void restore_kv(GpuModel&, GpuSequence&, int64_t, int64_t, int64_t, const uint16_t*, const uint16_t*, const uint16_t*,
                std::shared_ptr<const void>) {
  refuse();
}
std::pmr::memory_resource& state_memory(GpuModel&) { refuse(); }
void ready_state_memory(GpuModel&, size_t, size_t) { refuse(); }

}  // namespace bloomery::engine

#endif
