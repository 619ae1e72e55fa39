#include "model/model.h"

#include <algorithm>
#include <string_view>

#include "base/error.h"
#include "cpu/attention.h"
#include "model/architectures.h"

namespace bloomery::model {

namespace {

struct Architecture {
  std::string_view name;
  void (*bind)(Binder&);
};

constexpr Architecture kArchitectures[] = {
    {"qwen3moe", bind_qwen3moe},     {"qwen3", bind_qwen3},           {"llama", bind_llama},
    {"qwen2", bind_qwen2},           {"glm4moe", bind_glm4moe},       {"deepseek2", bind_deepseek2},
    {"gpt-oss", bind_gpt_oss},       {"qwen3next", bind_qwen3next},   {"qwen35moe", bind_qwen35moe},
    {"qwen35", bind_qwen35},         {"minimax-m2", bind_minimax_m2}, {"mimo2", bind_mimo2},
    {"deepseek32", bind_deepseek32}, {"glm-dsa", bind_glm_dsa},       {"deepseek4", bind_deepseek4},
};

}  // namespace

CacheRow cache_row(const HyperParams& params) {
  if (params.compressed.q_lora_rank > 0) return {params.head_dim, 0};
  if (params.mla.kv_lora_rank > 0) return {indexer_key_offset(params) + params.indexer.head_dim, 0};
  return {params.kv_heads * params.head_dim, params.kv_heads * params.value_dim};
}

int64_t CompressedParams::state_floats(int64_t ratio, int64_t head_dim, int64_t indexer_head_dim) {
  if (ratio == 0) return 0;
  // Overlapping blocks keep the block before the current one: 2 x ratio positions of rows twice
  // as wide; each position's values and scores.
  if (ratio == kOverlapRatio) return 2 * ratio * 2 * 2 * (head_dim + indexer_head_dim);
  return ratio * 2 * head_dim;
}

int64_t compressed_row_width(const HyperParams& params, int64_t layer) {
  return compressed_width_at_ratio(params, params.compressed.ratios.empty() ? 0 : params.compressed.ratios[layer]);
}

int64_t compressed_width_at_ratio(const HyperParams& params, int64_t ratio) {
  if (ratio == 0) return 0;
  return params.head_dim + (ratio == CompressedParams::kOverlapRatio ? params.indexer.head_dim : 0);
}

int64_t indexer_key_offset(const HyperParams& params) { return params.mla.kv_lora_rank + params.mla.rope_dim; }

static_assert(kWindowAlign == cpu::kWindowRowAlign);

int64_t window_cells(const HyperParams& params, int64_t context) {
  return std::min(context, params.sliding_window + kWindowAlign + kWindowSlice);
}

int64_t window_floor(const HyperParams& params, int64_t n) {
  return params.sliding_window > 0 ? cpu::aligned_window_start(n, params.sliding_window) : 0;
}

std::vector<uint8_t> windowed_layers(const Model& model) {
  std::vector<uint8_t> windowed;
  for (const LayerWeights& layer : model.layers) windowed.push_back(layer.attention.windowed ? 1 : 0);
  return windowed;
}

int64_t cache_positions(const Model& model, int64_t layer, int64_t context) {
  const AttentionWeights& a = model.layers[layer].attention;
  if (a.kind == AttentionKind::kDeltaNet) return 0;
  return a.windowed ? window_cells(model.params, context) : context;
}

bool has_recurrent_layers(const Model& model) {
  return std::any_of(model.layers.begin(), model.layers.end(), [](const LayerWeights& l) {
    return l.attention.kind == AttentionKind::kDeltaNet || !l.attention.compressed.compressor.empty();
  });
}

bool has_sparse_attention(const Model& model) {
  return std::any_of(model.layers.begin(), model.layers.end(),
                     [](const LayerWeights& l) { return l.attention.kind == AttentionKind::kSparseMla; });
}

std::vector<std::string> supported_architectures() {
  std::vector<std::string> names;
  for (const Architecture& a : kArchitectures) names.emplace_back(a.name);
  return names;
}

std::unique_ptr<Model> load_model(const std::string& path, const gguf::MapOptions& map) {
  auto model = std::make_unique<Model>(gguf::GgufFile::open(path, map));
  const std::optional<std::string_view> name = model->file.get_string("general.architecture");
  if (!name) throw Error("MODEL_BAD_METADATA", "the model has no general.architecture");
  for (const Architecture& a : kArchitectures) {
    if (a.name != *name) continue;
    Binder binder(*model, std::string(*name));
    a.bind(binder);
    binder.check_all_bound();
    return model;
  }
  std::string known;
  for (const Architecture& a : kArchitectures) known += (known.empty() ? "" : ", ") + std::string(a.name);
  throw Error("UNSUPPORTED_ARCH",
              "architecture " + std::string(*name) + " is not supported (supported: " + known + ")");
}

}  // namespace bloomery::model
