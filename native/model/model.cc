#include "model/model.h"

#include <string_view>

#include "base/error.h"
#include "model/architectures.h"

namespace bloomery::model {

namespace {

struct Architecture {
  std::string_view name;
  void (*bind)(Binder&);
};

constexpr Architecture kArchitectures[] = {
    {"qwen3moe", bind_qwen3moe}, {"qwen3", bind_qwen3},     {"llama", bind_llama},
    {"qwen2", bind_qwen2},       {"glm4moe", bind_glm4moe}, {"deepseek2", bind_deepseek2},
};

}  // namespace

CacheRow cache_row(const HyperParams& params) {
  if (params.mla.kv_lora_rank > 0) return {params.mla.kv_lora_rank + params.mla.rope_dim, 0};
  return {params.kv_heads * params.head_dim, params.kv_heads * params.head_dim};
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
