#include "engine/host_experts.h"

#ifdef BLOOMERY_CUDA

#include <atomic>
#include <chrono>
#include <cstring>

#include "base/arch.h"
#include "base/error.h"
#include "cuda/ops.h"
#include "engine/cpu_experts.h"

namespace bloomery::engine {

namespace {

using Clock = std::chrono::steady_clock;

double since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

// Spins between stream checks: a check costs a driver call, a spin ~40 ns.
constexpr int kSpinsPerCheck = 2048;

uint32_t* step_of(const cuda::DeviceBuffer& counters) { return counters.as<uint32_t>(); }
uint32_t* blocks_done_of(const cuda::DeviceBuffer& counters) { return counters.as<uint32_t>() + 1; }
uint64_t* waited_of(const cuda::DeviceBuffer& counters) { return counters.as<uint64_t>() + 1; }

}  // namespace

HostExperts::HostExperts(const model::Model& model, std::vector<std::vector<uint8_t>> on_host, int64_t max_rows,
                         cpu::ThreadPool& pool, ExpertArena* arena)
    : model_(model),
      on_host_(std::move(on_host)),
      pool_(pool),
      arena_(arena),
      used_(model.params.experts_used),
      width_(model.params.embedding) {
  const int64_t layers = model.params.layers;
  for (const auto& mask : on_host_) {
    bool any = false;
    for (const uint8_t h : mask) any = any || h != 0;
    layer_active_.push_back(any);
  }
  const auto rows_bytes = static_cast<size_t>(max_rows * width_) * sizeof(float);
  const auto routed = static_cast<size_t>(max_rows * used_);
  rows_ = cuda::PinnedBuffer(rows_bytes, "hybrid handoff (rows)");
  chosen_ = cuda::PinnedBuffer(routed * sizeof(int32_t), "hybrid handoff (chosen experts)");
  weights_ = cuda::PinnedBuffer(routed * sizeof(float), "hybrid handoff (expert weights)");
  sums_ = cuda::PinnedBuffer(rows_bytes, "hybrid handoff (CPU sums)");
  ready_ = cuda::PinnedBuffer(static_cast<size_t>(layers) * sizeof(uint32_t), "hybrid handoff (flags)");
  done_ = cuda::PinnedBuffer(static_cast<size_t>(layers) * sizeof(uint32_t), "hybrid handoff (flags)");
  std::memset(ready_.host<uint32_t>(), 0, static_cast<size_t>(layers) * sizeof(uint32_t));
  std::memset(done_.host<uint32_t>(), 0, static_cast<size_t>(layers) * sizeof(uint32_t));
  counters_ = cuda::DeviceBuffer(2 * sizeof(uint64_t), "hybrid step counters");
  // The GPU waits for each layer's loop to end: the thread serving it does not sleep on its workers.
  pool_.set_caller_spins(true);
}

HostExperts::~HostExperts() { pool_.set_caller_spins(false); }

void HostExperts::queue_begin_pass(cuda::StreamHandle stream) { cuda::begin_handoff_step(step_of(counters_), stream); }

void HostExperts::queue_publish(int64_t layer, int64_t n, const float* rows, const int32_t* chosen,
                                const float* weights, cuda::StreamHandle stream) {
  cuda::HandoffRows handoff;
  handoff.rows = rows;
  handoff.chosen = chosen;
  handoff.weights = weights;
  handoff.count = n * width_;
  handoff.routed = n * used_;
  handoff.host_rows = rows_.device<float>();
  handoff.host_chosen = chosen_.device<int32_t>();
  handoff.host_weights = weights_.device<float>();
  cuda::publish_to_host(handoff, step_of(counters_), ready_.device<uint32_t>() + layer, blocks_done_of(counters_),
                        stream);
}

void HostExperts::queue_collect(int64_t layer, int64_t n, float* residual, cuda::StreamHandle stream) {
  cuda::add_from_host(step_of(counters_), done_.device<uint32_t>() + layer, waited_of(counters_), sums_.device<float>(),
                      n * width_, residual, stream);
}

void HostExperts::start_pass() {
  ++step_;
  std::lock_guard lock(stats_mutex_);
  ++stats_.passes;
}

void HostExperts::serve(int64_t layer, int64_t n, const cuda::Stream& stream) {
  const auto waiting = Clock::now();
  std::atomic_ref<uint32_t> ready(ready_.host<uint32_t>()[layer]);
  for (int spins = 1; ready.load(std::memory_order_acquire) != step_; ++spins) {
    cpu_relax();
    if (spins % kSpinsPerCheck == 0 && stream.idle() && ready.load(std::memory_order_acquire) != step_) {
      throw Error("CUDA_ERROR",
                  "the GPU finished its pass without handing layer " + std::to_string(layer) + "'s rows to the CPU");
    }
  }
  const auto computing = Clock::now();
  const double waited = std::chrono::duration<double>(computing - waiting).count();

  const auto total = static_cast<size_t>(n * used_);
  routing_.used = used_;
  routing_.experts.assign(chosen_.host<int32_t>(), chosen_.host<int32_t>() + total);
  routing_.weights.assign(weights_.host<float>(), weights_.host<float>() + total);
  run_cpu_experts(model_, model_.layers[layer], layer, rows_.host<float>(), n, routing_, on_host_[layer], arena_,
                  sums_.host<float>(), scratch_, pool_);
  {
    const double computed = since(computing);
    std::lock_guard lock(stats_mutex_);
    stats_.cpu_wait_seconds += waited;
    stats_.cpu_expert_seconds += computed;
    cpu_costs_.observe(n, computed);
  }
  std::atomic_ref<uint32_t>(done_.host<uint32_t>()[layer]).store(step_, std::memory_order_release);
}

void HostExperts::recover(const cuda::Stream& stream) {
  for (size_t l = 0; l < on_host_.size(); ++l) {
    std::atomic_ref<uint32_t>(done_.host<uint32_t>()[l]).store(step_, std::memory_order_release);
  }
  try {
    stream.synchronize();
  } catch (const Error&) {
    // The failure being reported already says what went wrong with the stream.
  }
  cuda::upload(step_of(counters_), &step_, sizeof step_);
}

double HostExperts::cpu_layer_seconds(int64_t rows) const {
  std::lock_guard lock(stats_mutex_);
  return cpu_costs_.estimate(rows);
}

void HostExperts::add_pass_time(double seconds) {
  std::lock_guard lock(stats_mutex_);
  stats_.wall_seconds += seconds;
}

void HostExperts::count_streamed_pass() {
  std::lock_guard lock(stats_mutex_);
  ++stats_.streamed_passes;
}

OffloadStats HostExperts::stats() const {
  uint64_t counters[2];
  cuda::download(counters, counters_.data(), sizeof counters);
  std::lock_guard lock(stats_mutex_);
  OffloadStats s = stats_;
  s.gpu_wait_seconds = static_cast<double>(counters[1]) * 1e-9;
  return s;
}

}  // namespace bloomery::engine

#endif
