// A model on one GPU: its dense weights and its GPU-resident routed experts uploaded at
// load (each layer's experts in a pool of slots, found through a per-layer expert->slot
// table in device memory, -1 for an expert left in host memory), each sequence's KV cache
// in device memory, and the forward pass as the same sequence of named ops as forward.cc,
// run by the kernels of native/cuda. With experts in host memory the pass is hybrid: per
// MoE layer the CPU's thread pool runs the host experts of the routed rows while the GPU
// runs its own (engine/host_experts.h).
//
// A pass runs the rows of several sequences at once (the scheduler's step): every matrix
// product, the router and the experts over all rows together, attention and the KV stores
// sequence by sequence, each on its own rows and cache. A row's result does not depend on its
// batch-mates (the kernels work row by row, and the mat-vec kernels' sums for a row are the
// same whatever rows share its launch: native/tests/cuda_batch_rows_test.cc), so sequences
// batched together decode the tokens each would alone. One exception, in hybrid models: a
// pass that streams (StreamChoice: by its row count and the measured costs) runs the host
// experts on the GPU, whose dots round unlike the CPU's, so a sequence's rows in such a pass may
// differ in the last bits from the same rows run in a pass that hands them to the CPU.
//
// A decode step (every sequence one token) replays a CUDA graph, one per set of sequences (in
// order), as their KV caches' addresses are parameters of the attention launches; positions,
// tokens and a hybrid step's step number are read from device memory, so a graph replays
// unchanged while its sequences decode. The model keeps the graphs of the last eight sets; past
// them, a new set is captured into the least recently used graph of the same count, updated in
// place (cudaGraphExecUpdate, see cuda::Graph::capture) rather than instantiated anew. A hybrid
// step's graph waits for the host through flags in mapped memory, so it stays one graph. A
// CPU-only build compiles this interface; it refuses GPU_UNAVAILABLE.
#pragma once

#include <cstdint>
#include <memory>
#include <memory_resource>
#include <span>
#include <string>
#include <vector>

#include "cpu/thread_pool.h"
#include "engine/forward.h"
#include "engine/host_experts.h"
#include "engine/load_progress.h"
#include "engine/residency.h"
#include "model/model.h"

namespace bloomery::engine {

// Rows of one GPU pass, and of one scheduler step of a model on the GPU, unless its prompts
// stream host experts (kStreamedPassRows): longer prompts run as several passes, so the
// workspace stays bounded. Large, because a hybrid pass that streams its
// host experts copies every one of them once per pass (17.5 GB for Qwen3-30B-A3B: at 256 rows
// a step, the copies held prompts to ~750 tok/s on the H200), and the tiled products and
// attention fill the GPU better; the cost is workspace memory (~0.4 GB for that model).
inline constexpr int64_t kGpuPassRows = 2048;
// Rows of a pass of a model whose long prompts copy host experts to the GPU, where the larger
// workspace costs no more than the staging does: every pass copies every host expert, so a
// prompt of 4,096 tokens (ik_llama.cpp's -ub 4096) copies them once, not twice (gpt-oss-120b's
// 60 GB took 2.2 s over PCIe at 2,048 rows, the whole prompt's time). The larger workspace
// counts in the footprint's stream_bytes, the price of streaming prompts.
inline constexpr int64_t kStreamedPassRows = 4096;

struct GpuOptions {
  int device = 0;
  uint64_t budget = 0;  // bytes of device memory bloomery may use; 0: what the card has free
  // Per layer, the routed experts resident on the GPU (any order, each once); the others run
  // on the CPU from host memory. Empty: every expert of every layer on the GPU.
  std::vector<std::vector<int32_t>> gpu_experts;
};

// A weight the GPU's kernels cannot serve. A routed-expert stack's experts must stay in host
// memory (the CPU runs them); any other such tensor keeps the model off the GPU.
struct GpuKernelGap {
  std::string tensor;         // its name in the file, as "blk.3.ffn_down_exps.weight"
  std::string reason;         // a sentence naming the tensor, its type and what the GPU lacks
  int64_t expert_layer = -1;  // the layer of a routed-expert stack; -1 for any other tensor
};

// The device memory a model needs, term by term: what the offload planner (src/plan.ts)
// divides the budget with, and what upload_model checks. The one owner of these sizes, and of
// which tensors the GPU cannot serve.
struct GpuFootprint {
  int64_t context_size = 0;  // tokens of the one sequence the KV term holds
  int64_t experts = 0;       // routed experts per layer
  // Every weight but the routed experts, plus the slot tables and the slot pools' alignment.
  uint64_t dense_bytes = 0;
  std::vector<uint64_t> expert_bytes;  // per layer: one routed expert's gate, up and down (0: a dense layer)
  uint64_t kv_bytes = 0;
  uint64_t workspace_bytes = 0;
  // Prompts that copy host experts to the GPU (only with some on the host): their staging, and
  // the workspace's growth to kStreamedPassRows rows.
  uint64_t stream_bytes = 0;
  uint64_t reserve_bytes = 0;  // left free for the CUDA context, graphs and kernels
  std::vector<GpuKernelGap> kernel_gaps;
};
// `context_size` as the runtime resolved it. Throws GPU_UNAVAILABLE in a CPU-only build.
GpuFootprint gpu_footprint(const model::Model& model, int64_t context_size);

class GpuModel;
class GpuSequence;

// Rows of one of `model`'s passes, and of one scheduler step: kStreamedPassRows where long
// prompts copy host experts to the GPU (and the workspace it takes costs no more than the
// staging), else kGpuPassRows.
int64_t gpu_pass_rows(const GpuModel& model);

// Uploads `model`'s dense weights and options.gpu_experts, and allocates the pass's workspace,
// after checking that they and one sequence of `context_size` tokens fit. A hybrid model's
// host experts run on `pool`, which must outlive the GpuModel, and those `arena` pages (the
// disk tier, or null) are read through it. With a disk tier no prompt pass copies host experts
// to the GPU (that would read every paged expert from disk per layer): every pass hands its
// rows to the CPU, as decode steps do, and no prompt staging is allocated. Throws GPU_UNAVAILABLE (no
// usable device, naming why), INSUFFICIENT_MEMORY (naming each term), INVALID_ARGUMENT (a
// gpu_experts list that does not fit the model), UNSUPPORTED_QUANT (a dense tensor the GPU
// cannot serve, or GPU experts in a layer whose expert stacks it cannot: see GpuKernelGap)
// or UNSUPPORTED_MODEL. Tells `progress` of the bytes uploaded (LoadStep::kUpload).
std::shared_ptr<GpuModel> upload_model(const model::Model& model, const GpuOptions& options, int64_t context_size,
                                       cpu::ThreadPool& pool, ExpertArena* arena, const LoadProgress& progress = {});

// A sequence's KV cache on the card. Throws INSUFFICIENT_MEMORY when it does not fit.
std::shared_ptr<GpuSequence> create_gpu_sequence(GpuModel& model, int64_t context_size);

// One sequence's rows in a GPU pass: forward.h's SequenceRows, with the cache on the card.
struct GpuSequenceRows {
  GpuSequence* sequence = nullptr;
  std::span<const int32_t> tokens;
  int64_t first_position = 0;
  LogitRows rows = LogitRows::kLast;
  // Also each row's hidden state after the output norm, as the model's next-token-prediction layer
  // takes it (forward.h's SequenceRows::keep_hidden), among the returned hidden states.
  bool keep_hidden = false;
  // Recurrent states taken inside the rows (forward.h's StateSnapshot, in gpu_recurrent_floats'
  // layout), copied out on the model's stream: they are there when gpu_forward returns.
  std::span<const StateSnapshot> snapshots;
};

// forward() on the GPU: the same contract (the caller checks tokens, positions and that no
// sequence appears twice), the logits sequence after sequence, and in `hidden` the hidden states
// after the output norm of every row of the kEmbeddings and keep_hidden parts, part after part
// (forward()'s scratch.hidden). `replayed`: forward()'s scratch.replayed_routing (benchmarks;
// empty: the routers choose).
void gpu_forward(GpuModel& model, std::span<const GpuSequenceRows> batch, std::vector<float>& logits,
                 std::vector<float>& hidden, std::span<const int32_t> replayed = {});

// Where a hybrid model's time went since load (all zero when every expert is on the GPU).
OffloadStats offload_stats(GpuModel& model);
// --- routing counts and adaptive residency (engine/residency.h): between passes, on the scheduler thread ---
// Whether adaptive residency can move experts: some live in host memory, in the file's page-locked
// pages (not in a disk tier's arena, which the copies do not read).
bool gpu_can_move_experts(GpuModel& model);
// Adds to `calls` (layers * experts, layer after layer) the rows routed to each expert by the
// passes since the last call.
void take_routed_calls(GpuModel& model, std::vector<uint32_t>& calls);
// Per layer, expert -> GPU slot as the passes see it (-1: the CPU serves it).
const std::vector<std::vector<int32_t>>& gpu_slot_tables(GpuModel& model);
// The rest need host experts (INVALID_ARGUMENT otherwise); see engine/gpu_residency.h.
// Per layer, the expert each GPU slot holds or is being copied into.
const std::vector<std::vector<int32_t>>& gpu_slot_experts(GpuModel& model);
// Retires each swap's evicted expert and queues the copy of its seated one.
void begin_swaps(GpuModel& model, std::span<const Swap> swaps);
// Points the tables at the experts whose copies have landed (never waits for one).
void seat_copied_experts(GpuModel& model);

// Copies the keys and values of positions [0, n) to / from host memory, packed layer after layer
// as a SessionState holds them (KvCache::copy_out): how sessions are saved and restored. A
// windowed layer holds positions from window_first on there (of a sliding-window model), n - from
// rows of the host's `packed` - from per layer. Copying out takes window_first at or after the
// sequence's (gpu_window_first); copying in makes it the sequence's, and refuses
// (INVALID_ARGUMENT) a state whose windowed layers hold more than the sequence's can. With
// `compressed` (DeepSeek-V4's: SessionState::compressed), each compressed layer's rows of the
// blocks before n too, packed / ratio rows of the host's per layer.
void copy_kv_to_host(GpuModel& model, GpuSequence& sequence, int64_t n, int64_t window_first, uint16_t* keys,
                     uint16_t* values, uint16_t* compressed = nullptr);
void copy_kv_to_device(GpuModel& model, GpuSequence& sequence, int64_t n, int64_t packed, int64_t window_first,
                       const uint16_t* keys, const uint16_t* values, const uint16_t* compressed = nullptr);
// copy_kv_to_device without the host waiting: the copies are queued layer by layer on a stream of
// their own, and the sequence's next pass waits for each layer's rows only where that layer reads
// them, so the copy runs behind the pass's first layers. The sequence holds `rows` (what owns
// `keys` and `values`) until the copies are done. From page-locked memory (state_memory) the
// copies run at the link's speed; from pageable memory each returns once its bytes are staged.
void restore_kv(GpuModel& model, GpuSequence& sequence, int64_t n, int64_t packed, int64_t window_first,
                const uint16_t* keys, const uint16_t* values, const uint16_t* compressed,
                std::shared_ptr<const void> rows);
// The first position the sequence's sliding-window layers hold (0 without them): a GPU sequence
// keeps the window, its alignment and one pass's rows of each (llama.cpp's iSWA cache keeps the
// window and a batch), so it can go on from position n only where model::window_floor(n) is at
// least this, as a KvCache.
int64_t gpu_window_first(const GpuSequence& sequence);
// The rows each of the sequence's sliding-window layers holds (0 without them).
int64_t gpu_window_rows(const GpuSequence& sequence);

// The recurrent states of the sequence's layers of linear attention (model::DeltaNetParams::
// state_floats each, layer after layer, as a SessionState and KvCache::copy_recurrent_out hold
// them): their floats, and copies to and from host memory, the host waiting for them.
int64_t gpu_recurrent_floats(const GpuSequence& sequence);
void copy_recurrent_to_host(GpuModel& model, GpuSequence& sequence, float* recurrent);
void copy_recurrent_to_device(GpuModel& model, GpuSequence& sequence, const float* recurrent);
// The same kept on the card, in a second copy of the sequence's (one at a time: a pass's draft
// checkpoint), and put back from it; on the model's stream, behind and before its passes.
void keep_recurrent_on_device(GpuModel& model, GpuSequence& sequence);
void restore_recurrent_on_device(GpuModel& model, GpuSequence& sequence);

// Page-locked host memory for the states the prompt-state cache keeps of the model's sessions and
// for the sessions' checkpoints (cuda::PinnedPool, made at upload, allocating nothing until used): copy_kv_to_host and
// copy_recurrent_to_host fill them and restore_kv reads them at the link's speed. At most
// kKeptStateMemory bytes of freed states are kept page-locked for reuse.
inline constexpr size_t kKeptStateMemory = size_t{1} << 30;
std::pmr::memory_resource& state_memory(GpuModel& model);
// Has state_memory make `count` blocks of `bytes` ahead, on a thread of its own (KeptBlocks::replenish):
// a GPU sequence's checkpoints take them in the middle of its prompts.
void ready_state_memory(GpuModel& model, size_t bytes, size_t count);

}  // namespace bloomery::engine
