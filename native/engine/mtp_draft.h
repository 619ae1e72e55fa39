// Drafts from the model's own next-token-prediction layer (DraftSource::kMtp; llama.cpp's
// draft-mtp). The layer at position p takes the token at p and the target's hidden state after
// the output norm at p - 1, and predicts the token at p + 1; chained, its own head-normed state
// stands in for the target's, for as many tokens as the draft is wide.
//
// Its keys and values are a cache of their own (MtpSequence::cache, one per session), at the
// target's positions: every position of the context gets its row from the target's hidden
// state, the position of the token a draft follows included, in the same MTP pass as the first
// drafted token; the drafted tokens' rows are written past it and overwritten by the next
// draft, so a rollback of the target's context needs nothing here but the position.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "cpu/thread_pool.h"
#include "engine/forward.h"
#include "engine/kv_cache.h"
#include "model/model.h"

namespace bloomery::engine {

// A sequence's state of the next-token-prediction layer.
struct MtpSequence {
  MtpSequence(const model::Model& model, int64_t capacity)
      : width(mtp_hidden_width(model)), cache(KvCache::nextn(model, capacity)) {}

  // The target's hidden states of `n` rows (`width` floats each) at positions [first, first + n),
  // replacing what was kept from `first` on.
  void keep_hidden(int64_t first, const float* rows, int64_t n);
  // How much of `prompt` a generation may take as evaluated: the prefix of it whose rows the cache
  // holds, and whose last position's hidden state is kept (for the row after it).
  int64_t reusable(std::span<const int32_t> prompt) const;

  int64_t width;  // of a hidden state (mtp_hidden_width)
  KvCache cache;
  // The tokens whose rows the cache holds from the target's hidden states: the row of position p
  // holds tokens[p] with the target's hidden state at p - 1 (none before position 0: zeros).
  std::vector<int32_t> tokens;
  // The target's hidden states not yet taken by a row, of positions hidden_first on.
  int64_t hidden_first = 0;
  std::vector<float> hidden;
};

// One sequence's draft request: continue `context` (the target's context, the token the draft
// follows last) by up to `width` tokens into `drafted`.
struct MtpJob {
  MtpSequence* sequence = nullptr;
  std::span<const int32_t> context;
  int32_t width = 0;
  float p_min = 0.0f;
  std::vector<int32_t>* drafted = nullptr;
  std::vector<float>* first_logits = nullptr;  // set: receives the logits the first drafted token came from
};

// The runtime's drafter (Runtime::mtp_drafter); its passes run on the scheduler thread, every
// drafting sequence's rows together, as the target's do.
class MtpDrafter {
 public:
  explicit MtpDrafter(const model::Model& model) : model_(model) {}

  std::unique_ptr<MtpSequence> new_sequence(int64_t capacity) const;

  // Gives each job's cache the rows it lacks of its context (at most `step_tokens` rows of all
  // jobs a pass), the last of them drafting the first token, then drafts the rest greedily, one
  // pass for every job per token; a job's draft ends before a token of probability below its
  // p_min. A row whose target hidden state was not kept (positions evaluated without MTP drafts)
  // takes zeros: the drafts suffer, the generation does not.
  void propose(std::span<MtpJob> jobs, int64_t step_tokens, cpu::ThreadPool& pool);

 private:
  const model::Model& model_;
  ForwardScratch scratch_;
  std::vector<float> logits_, hidden_;
};

// The MTP layer's logits after the last of `tokens` (of the token after it), evaluated afresh and
// straightforwardly: the target over all of them in one pass, then the layer over every position
// in one pass, each with the target's hidden state of the position before (zeros before the
// first). What a session's rows, built pass by pass as drafts come and go, must give.
std::vector<float> mtp_reference_logits(const model::Model& model, std::span<const int32_t> tokens,
                                        cpu::ThreadPool& pool);

// Throws DRAFT_UNSUPPORTED naming why `model` cannot draft with its next-token-prediction layers:
// it has none, they take hyper-connection streams (DeepSeek-V4's), which they do not run with yet, or it
// runs on the GPU (`on_gpu`) and its layer takes hidden states before the output norm (MiMo-V2's), which
// the GPU's passes do not return (beside a GPU model the layer runs on the CPU from the normed hidden
// states the passes return: GpuSequenceRows::keep_hidden). Recurrent layers beside them (Qwen3.5/3.6) roll
// back from the pass's draft checkpoint as with any other drafts (Session::keep_draft_checkpoint).
void check_mtp_drafts(const model::Model& model, bool on_gpu);

}  // namespace bloomery::engine
