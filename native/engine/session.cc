#include "engine/session.h"

#include <algorithm>
#include <string>

#include "base/error.h"

namespace bloomery::engine {

int64_t resolve_context_size(const model::HyperParams& p, int64_t requested) {
  if (requested < 0) throw Error("INVALID_ARGUMENT", "contextSize must be positive");
  if (requested == 0) return std::min(p.context_length, kDefaultContextSize);
  if (requested > p.context_length) {
    throw Error("CONTEXT_TOO_LONG", "contextSize " + std::to_string(requested) + " exceeds " + p.architecture +
                                        ".context_length = " + std::to_string(p.context_length));
  }
  return requested;
}

Runtime::Runtime(std::unique_ptr<model::Model> model, const RuntimeOptions& options)
    : model_(std::move(model)),
      context_size_(resolve_context_size(model_->params, options.context_size)),
      pool_(options.threads) {
  if (options.gpu) gpu_ = upload_model(*model_, *options.gpu, context_size_, pool_);
}

Session::Session(std::shared_ptr<Runtime> runtime)
    : runtime_(std::move(runtime)),
      cache_(runtime_->model().params, runtime_->on_gpu() ? 0 : runtime_->context_size()) {
  if (runtime_->on_gpu()) gpu_ = create_gpu_sequence(*runtime_->gpu_, runtime_->context_size());
}

std::vector<float> Session::evaluate(std::span<const int32_t> tokens, LogitRows rows) {
  std::lock_guard lock(runtime_->compute_);
  const model::HyperParams& p = runtime_->model().params;
  if (tokens.empty()) throw Error("INVALID_ARGUMENT", "evaluate needs at least one token");
  for (const int32_t token : tokens) {
    if (token < 0 || token >= p.vocab) {
      throw Error("INVALID_ARGUMENT",
                  "token " + std::to_string(token) + " is outside the vocabulary of " + std::to_string(p.vocab));
    }
  }
  const int64_t end = position_ + static_cast<int64_t>(tokens.size());
  if (end > runtime_->context_size()) {
    throw Error("CONTEXT_TOO_LONG", std::to_string(end) + " tokens do not fit the context of " +
                                        std::to_string(runtime_->context_size()) + " tokens");
  }
  std::vector<float> logits;
  if (gpu_) {
    gpu_forward(*runtime_->gpu_, *gpu_, tokens, position_, rows, logits);
  } else {
    forward(runtime_->model(), tokens, position_, cache_, rows, logits, scratch_, runtime_->pool_);
  }
  position_ = end;
  return logits;
}

void Session::reset() {
  std::lock_guard lock(runtime_->compute_);
  position_ = 0;
}

}  // namespace bloomery::engine
