// The forward pass of a decoder-only transformer over a batch made of several sequences'
// rows: embeddings, then per layer attention and FFN (dense or MoE) with residuals, then the
// output norm and logits. It reads the model's hyper-parameters and weights, never its
// architecture's name.
//
// Every matrix product runs once over all rows of the batch, so each weight is read once per
// pass however many sequences take part; attention runs per sequence against its own cache;
// the MoE layer groups the rows of every sequence by expert. A row's result does not depend on
// the other rows of the batch, bit for bit: activations are quantized row by row, each output
// of a quantized product is one dot of one weight row with one activation row (the multi-row
// dots equal the single-row dot exactly, native/tests/quant_dot_rows_test.cc), norms, RoPE,
// routing and attention work per row, and a row's expert outputs are added in its top-k order.
// So a sequence run together with others gives the same logits as run alone
// (native/tests/forward_batch_test.cc).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "cpu/matmul.h"
#include "cpu/moe.h"
#include "cpu/thread_pool.h"
#include "engine/expert_arena.h"
#include "engine/kv_cache.h"
#include "model/model.h"

namespace bloomery::engine {

// Buffers reused from one pass to the next.
struct ForwardScratch {
  std::vector<float> residual, normed, q, k, v, attention, projected, gate, up, activated, router_logits;
  std::vector<float> q_low, head_in, head_out, shared;  // MLA's low-rank queries and per-head products; shared experts
  std::vector<float> q_gated, attn_gate,
      shared_gate;             // gated attention's [query, gate] heads, the gates; the shared experts' gate
  std::vector<float> concat;   // the next-token-prediction layer's [enorm(embedding), hnorm(hidden)] rows
  std::vector<float> enormed;  // its rows' normed embeddings
  std::vector<float> mixed, z, beta, decay,
      grouped;  // Gated DeltaNet's convolved channels, output gates, betas, decays
  // The lightning indexer's queries, head weights and keys of each row, its scores, its Hadamard
  // matrix, and per row the positions it attends (top_k each), kept for the layers that reuse them.
  std::vector<float> indexer_q, indexer_weights, indexer_k, indexer_scores, hadamard;
  std::vector<int32_t> selected;
  // DeepSeek-V4's attention (engine/compressed_attention.h): each row's position and angles of the
  // compressed layers' rotation; the compressors' values and scores of each row (the attention's
  // and the indexer's), a compressed row and the buffers that make it.
  std::vector<int64_t> row_positions;
  std::vector<int32_t> token_routing;  // hash routing's experts of each row
  std::vector<std::vector<float>> compressed_rope_angles;
  std::vector<float> compressor_kv, compressor_scores, indexer_kv, indexer_scores_in, compressed_row;
  std::vector<float> compressor_entries, compressor_values, compressor_angles, position_bias;
  // Hyper-connections (cpu/hyper_connections.h): each row's normed streams, their mixes, the input
  // and output weights and the streams' mix of the block.
  std::vector<float> hyper_normed, hyper_mixes, hyper_pre, hyper_post, hyper_comb;
  std::vector<std::vector<float>> rope_angles;           // per row
  std::vector<std::vector<float>> windowed_rope_angles;  // per row, where windowed layers rotate otherwise
  std::vector<int64_t> logit_rows;                       // the rows whose logits the pass returns
  std::vector<int64_t> hidden_rows;                      // the rows whose hidden states the pass returns
  // The hidden states of every row of the kEmbeddings and keep_hidden parts, part after part: a
  // kEmbeddings row's after the output norm (embedding floats), a keep_hidden row's as the model's
  // MTP layer takes them (mtp_hidden_width floats: model::NextnLayer::hidden).
  std::vector<float> hidden;
  std::vector<model::NextnHidden> hidden_kind;  // per row of hidden_rows
  std::vector<float> hidden_streams;            // the kStreams rows' streams, before the head mixes them
  cpu::MatmulInput input;
  cpu::Routing routing;
  cpu::MoeScratch moe;
  // Rows the last pass routed to each (layer, expert), layer after layer: the routing counts' input.
  std::vector<uint32_t> routed;
  // Benchmarks (engine/routing_replay.h): the pass's routing taken from a trace, [layer][row][used]
  // over the model's layers, set by the caller before forward(); empty: the routers choose.
  std::vector<int32_t> replayed_routing;
};

// What a sequence's part of a pass returns: the logits of its last row or of each row, or
// (kEmbeddings) no logits but each row's hidden state after the output norm, which embeddings
// pool (engine/pooling.h).
enum class LogitRows : uint8_t { kLast, kAll, kEmbeddings };

// The recurrent states a pass takes inside a sequence's rows (a checkpoint that does not end the
// pass): after its first `rows` rows (0 < rows < its rows), every recurrent layer's
// state into `states`, in the layout of KvCache::copy_recurrent_out (gpu_recurrent_floats on
// the GPU): a linear attention's convolution and recurrent state, a compressor's rings.
struct StateSnapshot {
  int64_t rows = 0;
  float* states = nullptr;
};
// INVALID_ARGUMENT unless `snapshots` of a part of `rows` rows are in order inside them.
void check_snapshots(std::span<const StateSnapshot> snapshots, int64_t rows);
// How a recurrent op takes them: run(from, to, snapshot) for each run of a part's `rows` rows
// between its snapshots, in order, `snapshot` the one that ends the run (the state after `to`
// rows goes to it) and null for the last run (to `rows`), which may be empty.
template <typename Run>
void runs_between_snapshots(std::span<const StateSnapshot> snapshots, int64_t rows, Run run) {
  int64_t from = 0;
  for (const StateSnapshot& snapshot : snapshots) {
    run(from, snapshot.rows, &snapshot);
    from = snapshot.rows;
  }
  run(from, rows, static_cast<const StateSnapshot*>(nullptr));
}

// One sequence's rows in a pass: `tokens` at positions [first_position, first_position +
// tokens.size()), whose keys and values go to `cache` (and whose linear layers' recurrent
// states there are those after first_position - 1; a pass from position 0 begins them anew).
struct SequenceRows {
  std::span<const int32_t> tokens;
  int64_t first_position = 0;
  KvCache* cache = nullptr;
  LogitRows rows = LogitRows::kLast;
  // Also each row's hidden state as the model's next-token-prediction layer takes it with the next
  // token (engine/mtp_draft.h), in scratch.hidden.
  bool keep_hidden = false;
  // States taken inside the rows, in order of their rows.
  std::span<const StateSnapshot> snapshots;
};

// The floats of a hidden state the model's next-token-prediction layer takes (NextnLayer::hidden):
// the embedding, or DeepSeek-V4's streams of it.
int64_t mtp_hidden_width(const model::Model& model);

// Runs every sequence's rows in one pass and writes vocab logits, sequence after sequence:
// one row for a kLast part, one per token for a kAll part; a kEmbeddings part's rows go to
// scratch.hidden instead (and a keep_hidden part's too). The caller checks token ids, that
// the positions fit each cache, and that no cache appears twice. `arena`: the disk tier's, which
// serves the experts it pages (null: every expert in RAM).
void forward(const model::Model& model, std::span<const SequenceRows> batch, std::vector<float>& logits,
             ForwardScratch& scratch, cpu::ThreadPool& pool, ExpertArena* arena = nullptr);

// The model's first next-token-prediction layer (model.nextn_layers, llama.cpp's nextn) over a
// batch, as llama.cpp's MTP graphs run it: each row's token embedding (the layer's own, or the
// model's) and `hidden` row (mtp_hidden_width floats per row of the batch: the hidden state of the
// position before, as NextnLayer::hidden says), each RMS-normed, concatenated and projected by
// eh_proj (with hyper-connections, each stream so, the embedding beside each); then the layer's
// attention and FFN blocks, their keys and values in layer 0 of each part's cache (a cache of the
// nextn layer: KvCache::nextn); then the head (the layer's shared head norm and output, else the
// model's). Returns logits as forward() does, and the rows of keep_hidden parts in scratch.hidden
// (as NextnLayer::hidden says: what the layer takes for the next drafted token).
void forward_nextn(const model::Model& model, std::span<const SequenceRows> batch, std::span<const float> hidden,
                   std::vector<float>& logits, ForwardScratch& scratch, cpu::ThreadPool& pool);

}  // namespace bloomery::engine
