// What every architecture file uses to describe a GGUF model: hyper-parameters under the
// architecture's key prefix, and each layer's blocks bound from tensors checked by name, shape
// and type. The one owner of the file's tensor names: the forward passes only see the blocks.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_set>
#include <vector>

#include "model/model.h"

namespace bloomery::model {

// How a layer's GQA attention differs from plain Q/K/V/O.
struct GqaOptions {
  bool biases = false;             // Q, K and V have biases
  bool qk_norms = false;           // per-head RMS norms of queries and keys
  bool optional_qk_norms = false;  // ... where the file has them
  bool whole_qk_norms = false;     // RMS norms of each row's whole query and key projections (MiniMax-M2)
  bool output_bias = false;        // attn_output has a bias
  bool sinks = false;              // learned attention sinks (attn_sinks), one per query head
  bool optional_sinks = false;     // ... where the file has them for the layer (mimo2's windowed layers)
  bool output_gate = false;        // attn_q's heads are [query, gate]: the output is gated by sigmoid(gate)
};

// How an MoE layer's FFN differs from routed experts alone.
struct MoeOptions {
  bool shared_experts = false;  // a shared SwiGLU of shared_feed_forward beside the routed experts
  bool selection_bias = false;  // exp_probs_b: the router's bias for choosing experts
  bool router_bias = false;     // ffn_gate_inp.bias: added to the router's logits
  bool expert_biases = false;   // ffn_{gate,up,down}_exps.bias: per-expert biases of each product
  bool shared_gate = false;     // ffn_gate_inp_shexp: the shared experts' output scaled by a sigmoid gate
};

// How a family's reranker head reads its sequence (RankHead).
struct RankHeadOptions {
  bool last_row = false;
  bool softmax = false;
};

class Binder {
 public:
  Binder(Model& model, std::string architecture);

  Model& model() { return model_; }
  HyperParams& params() { return model_.params; }

  // `<arch>.<key>` as a positive integer (at most 2^31 - 1); MODEL_BAD_METADATA naming the key when
  // absent or out of range.
  int64_t required_count(std::string_view key) const;
  // The same, or `fallback` when absent; where the fallback is 0 (absent means none), 0 too.
  int64_t count_or(std::string_view key, int64_t fallback) const;
  // `<arch>.<key>` as a finite float (positive), or `fallback` when absent.
  float float_or(std::string_view key, float fallback) const;
  float positive_float_or(std::string_view key, float fallback) const;
  bool bool_or(std::string_view key, bool fallback) const;
  // MODEL_BAD_METADATA naming both keys unless `value` <= `limit`.
  void check_at_most(std::string_view key, int64_t value, std::string_view limit_key, int64_t limit) const;

  // The hyper-parameters every architecture we serve shares (layers, attention, norm, rope,
  // special tokens). `head_dim` left at 0 reads attention.key_length. attention.head_count_kv may
  // be one count for every layer or an array of one per layer (the next-token-prediction layers
  // included), as llama.cpp reads it.
  void read_common_params(cpu::RopeStyle style);
  // `<arch>.<key>`: one count for every layer or an array of one per layer (`layers` entries);
  // empty when absent. MODEL_BAD_METADATA naming the key for a wrong length or a count out of range.
  std::vector<int64_t> per_layer_counts(std::string_view key, int64_t layers) const;
  // expert_gating_func (softmax or sigmoid); MODEL_BAD_METADATA when absent, UNSUPPORTED_FEATURE
  // naming another function.
  Gating required_gating_func() const;
  // expert_count, expert_used_count, expert_feed_forward_length, the expert groups and
  // expert_shared_count; the router gates by `gating` and normalizes the chosen weights or not.
  void read_moe_params(Gating gating, bool normalize);
  // expert_gating_func, expert_weights_norm and expert_weights_scale, where the file has them
  // (the families whose llama.cpp loader reads them).
  void read_router_options();
  // The MLA sizes (attention.q_lora_rank, kv_lora_rank, key_length_mla, value_length_mla).
  void read_mla_params();
  // The lightning indexer's sizes (attention.indexer.head_count, key_length, top_k): its queries
  // and keys rotate in `rope_style`, its keys' layer norm has `norm_epsilon`. MLA's first.
  void read_indexer_params(cpu::RopeStyle rope_style, float norm_epsilon);
  // Gated DeltaNet's sizes (ssm.conv_kernel, inner_size, state_size, group_count,
  // time_step_rank); `grouped_heads`: how value heads share key heads (DeltaNetParams).
  void read_delta_net_params(bool grouped_heads);
  // rope.dimension_sections: the interleaved multi-axis rope's four sections (cpu::RopeParams).
  void read_rope_sections();
  // Per layer, whether it is one of linear attention: attention.recurrent_layers where the file
  // has it, else every layer but each full_attention_interval-th (default 4), as llama.cpp.
  std::vector<bool> linear_attention_layers() const;

  // Token embedding, output norm and output matrix (tied to the embedding when absent); the
  // vocabulary's size (the tokenizer's tokens must match it) and its BOS/EOS ids.
  void bind_embeddings();
  // A layer's attention norm (attn_norm) and its GQA or MLA block, with attn_output.
  void bind_gqa_attention(int64_t layer, const GqaOptions& options);
  void bind_mla_attention(int64_t layer);
  // A layer's MLA block over the positions a lightning indexer selects (indexer.*): its own
  // indexer where `own_indexer`, else the selection of the last layer with one (its indexer
  // tensors, where the file has them, checked and unused).
  void bind_sparse_mla_attention(int64_t layer, bool own_indexer);
  // A layer's attention norm and its Gated DeltaNet block (ssm_*, attn_qkv and attn_gate, or
  // Qwen3-Next's first files' ssm_in and ssm_ba), with ssm_out as the output.
  void bind_delta_net(int64_t layer);
  // A layer's FFN norm (`norm`: ffn_norm, or the family's name for it) and a dense SwiGLU FFN
  // of feed_forward, or routed experts (and shared experts) of the MoE hyper-parameters.
  void bind_dense_ffn(int64_t layer, std::string_view norm = "ffn_norm");
  void bind_moe_ffn(int64_t layer, const MoeOptions& options, std::string_view norm = "ffn_norm");

  // A reranker's head where the file has one (cls.output, of <arch>.classifier.output_labels
  // rows, one without labels), read as `options` says.
  void bind_rank_head(const RankHeadOptions& options);

  // A next-token-prediction layer's own tensors (nextn.*), beside its blocks.
  void bind_nextn(int64_t layer);
  // The DeepSeek and GLM families' leading dense layers (leading_dense_block_count, at most
  // block_count; 0 when absent).
  int64_t read_leading_dense();
  // Their FFN of `layer`: dense for the first `leading_dense` layers, after them routed experts
  // with shared experts and the selection bias; a next-token-prediction layer (past the trunk)
  // binds its head too.
  void bind_shared_moe_ffn(int64_t layer, int64_t leading_dense, std::string_view norm = "ffn_norm");

  // MODEL_UNEXPECTED_TENSOR naming a tensor of the file that nothing bound (a block_count
  // smaller than the file's layers, or a tensor the architecture does not use), as llama.cpp.
  void check_all_bound() const;

  // A matrix of `rows` rows of `cols` elements (GGUF shape [cols, rows]).
  cpu::WeightMatrix matrix(const std::string& name, int64_t cols, int64_t rows) const;
  // The same, or an empty matrix when the file has no such tensor.
  cpu::WeightMatrix optional_matrix(const std::string& name, int64_t cols, int64_t rows) const;
  // `count` matrices of [cols, rows] stored as one tensor [cols, rows, count].
  cpu::ExpertMatrices stacked(const std::string& name, int64_t cols, int64_t rows, int64_t count) const;
  // An F32 vector of `length` (norm weights, biases).
  const float* vector(const std::string& name, int64_t length) const;
  const float* optional_vector(const std::string& name, int64_t length) const;
  // `rows` F32 rows of `cols` (per-expert biases).
  const float* matrix_of_floats(const std::string& name, int64_t cols, int64_t rows) const;
  // `rows` I32 rows of `cols`, every entry in [0, below) (MODEL_BAD_METADATA naming the tensor
  // otherwise): a table of ids the engine indexes with.
  const int32_t* id_table(const std::string& name, int64_t cols, int64_t rows, int64_t below) const;

 private:
  // `<arch>.<key>` as an integer in [least, 2^31 - 1]; MODEL_BAD_METADATA naming the key otherwise.
  int64_t count_at_least(std::string_view key, int64_t least) const;
  const gguf::Tensor& tensor(const std::string& name, std::initializer_list<int64_t> shape) const;
  cpu::WeightMatrix bind_matrix(const gguf::Tensor& t) const;
  SwigluWeights swiglu(int64_t layer, std::string_view suffix, int64_t width) const;
  std::string key(std::string_view suffix) const;
  int32_t token_id(std::string_view key) const;
  // Layer `layer` of the file: one a pass runs, or a next-token-prediction layer after them.
  LayerWeights& weights(int64_t layer);

  Model& model_;
  std::string architecture_;
  std::vector<int64_t> kv_heads_;                       // per layer of the file, next-token-prediction layers included
  mutable std::unordered_set<std::string_view> bound_;  // names of the tensors bound so far (by tensor())
};

// `blk.<layer>.<name>.<kind>`: the name llama.cpp gives a layer's tensor.
std::string layer_tensor(int64_t layer, std::string_view name, std::string_view kind = "weight");

}  // namespace bloomery::model
