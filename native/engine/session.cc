#include "engine/session.h"

#include <algorithm>
#include <string>

#include "base/error.h"
#include "engine/scheduler.h"

namespace bloomery::engine {

namespace {

int64_t resolve_context_size(const model::HyperParams& p, int64_t requested) {
  if (requested < 0) throw Error("INVALID_ARGUMENT", "contextSize must be positive");
  if (requested == 0) return std::min(p.context_length, kDefaultContextSize);
  if (requested > p.context_length) {
    throw Error("CONTEXT_TOO_LONG", "contextSize " + std::to_string(requested) + " exceeds " + p.architecture +
                                        ".context_length = " + std::to_string(p.context_length));
  }
  return requested;
}

}  // namespace

Runtime::Runtime(std::unique_ptr<model::Model> model, const RuntimeOptions& options)
    : model_(std::move(model)),
      context_size_(resolve_context_size(model_->params, options.context_size)),
      parallel_(options.parallel),
      step_tokens_(options.step_tokens),
      pool_(options.threads) {
  if (parallel_ < 1) throw Error("INVALID_ARGUMENT", "parallel must be a positive integer");
  if (step_tokens_ < parallel_) {
    throw Error("INVALID_ARGUMENT", "a step of " + std::to_string(step_tokens_) + " tokens cannot hold " +
                                        std::to_string(parallel_) + " parallel sequences");
  }
  if (options.gpu) gpu_ = upload_model(*model_, *options.gpu, context_size_);
  scheduler_ = Scheduler::start(*this);
}

Runtime::~Runtime() { scheduler_->stop(); }

Session::Session(std::shared_ptr<Runtime> runtime)
    : runtime_(std::move(runtime)),
      cache_(runtime_->model().params, runtime_->on_gpu() ? 0 : runtime_->context_size()) {
  if (runtime_->on_gpu()) gpu_ = create_gpu_sequence(*runtime_->gpu_, runtime_->context_size());
}

}  // namespace bloomery::engine
