#include "engine/mtp_draft.h"

#include <algorithm>
#include <string>

#include "base/error.h"
#include "engine/draft.h"
#include "engine/prompt_cache.h"

namespace bloomery::engine {

void check_mtp_drafts(const model::Model& model, bool on_gpu) {
  const std::string& arch = model.params.architecture;
  if (model.nextn_layers.empty()) {
    throw Error("DRAFT_UNSUPPORTED", "draft \"mtp\": this " + arch +
                                         " file has no next-token-prediction layers (nextn_predict_layers): use "
                                         "\"ngram\" or \"model\"");
  }
  // Beside a model on the GPU the layer runs on the CPU from the hidden states the GPU's passes return,
  // which are after the output norm.
  const model::NextnHidden hidden = model.nextn_layers.front().hidden;
  if (on_gpu && hidden != model::NextnHidden::kNormed) {
    const char* takes = hidden == model::NextnHidden::kStreams ? "the hidden states' hyper-connection streams"
                                                               : "the hidden states before the output norm";
    throw Error("DRAFT_UNSUPPORTED", "draft \"mtp\": " + arch + "'s next-token-prediction layer takes " + takes +
                                         ", which the GPU's passes do not return: load the model with gpu: false");
  }
}

void MtpSequence::keep_hidden(int64_t first, const float* rows, int64_t n) {
  const auto kept = static_cast<int64_t>(hidden.size()) / width;
  if (first < hidden_first || first > hidden_first + kept) {
    hidden_first = first;
    hidden.clear();
  } else {
    hidden.resize(static_cast<size_t>((first - hidden_first) * width));
  }
  hidden.insert(hidden.end(), rows, rows + n * width);
}

int64_t MtpSequence::reusable(std::span<const int32_t> prompt) const {
  return std::min(common_prefix(tokens, prompt), hidden_first + static_cast<int64_t>(hidden.size()) / width);
}

std::unique_ptr<MtpSequence> MtpDrafter::new_sequence(int64_t capacity) const {
  return std::make_unique<MtpSequence>(model_, capacity);
}

void MtpDrafter::propose(std::span<MtpJob> jobs, int64_t step_tokens, cpu::ThreadPool& pool) {
  const int64_t width = mtp_hidden_width(model_), vocab = model_.params.vocab;
  struct Progress {
    int64_t end = 0;           // the position of the token the draft follows
    int64_t next = 0;          // the next position to give a row from the target's hidden states
    std::vector<float> state;  // the layer's own hidden state after the last drafted token
    bool done = false;
  };
  std::vector<Progress> progress(jobs.size());
  for (size_t i = 0; i < jobs.size(); ++i) {
    MtpJob& job = jobs[i];
    MtpSequence& seq = *job.sequence;
    job.drafted->clear();
    Progress& at = progress[i];
    at.end = static_cast<int64_t>(job.context.size()) - 1;
    at.next = std::min(common_prefix(seq.tokens, job.context), at.end);
    at.done = job.width <= 0;
    seq.tokens.resize(static_cast<size_t>(at.next));
  }
  std::vector<SequenceRows> batch;
  std::vector<size_t> in_batch;
  std::vector<int64_t> rows(jobs.size());
  for (;;) {
    batch.clear();
    in_batch.clear();
    hidden_.clear();
    int64_t budget = step_tokens;
    for (size_t i = 0; i < jobs.size(); ++i) {
      Progress& at = progress[i];
      if (at.done) continue;
      const MtpJob& job = jobs[i];
      const MtpSequence& seq = *job.sequence;
      if (at.next <= at.end) {
        // Rows from the target's hidden states of the positions before them.
        if (budget <= 0) continue;
        rows[i] = std::min(at.end + 1 - at.next, budget);
        budget -= rows[i];
        const int64_t held = static_cast<int64_t>(seq.hidden.size()) / width;
        for (int64_t q = at.next - 1; q < at.next - 1 + rows[i]; ++q) {
          const int64_t h = q - seq.hidden_first;
          if (q >= 0 && h >= 0 && h < held) {
            hidden_.insert(hidden_.end(), seq.hidden.begin() + h * width, seq.hidden.begin() + (h + 1) * width);
          } else {
            hidden_.resize(hidden_.size() + static_cast<size_t>(width), 0.0f);
          }
        }
        batch.push_back({job.context.subspan(static_cast<size_t>(at.next), static_cast<size_t>(rows[i])), at.next,
                         &job.sequence->cache, LogitRows::kLast, true});
      } else {
        // The last drafted token, with the layer's own state after the token before it.
        rows[i] = 1;
        hidden_.insert(hidden_.end(), at.state.begin(), at.state.end());
        batch.push_back({std::span(&job.drafted->back(), 1), at.end + static_cast<int64_t>(job.drafted->size()),
                         &job.sequence->cache, LogitRows::kLast, true});
      }
      in_batch.push_back(i);
    }
    if (batch.empty()) break;
    forward_nextn(model_, batch, hidden_, logits_, scratch_, pool);
    int64_t hidden_row = 0;
    for (size_t b = 0; b < in_batch.size(); ++b) {
      const size_t i = in_batch[b];
      MtpJob& job = jobs[i];
      Progress& at = progress[i];
      hidden_row += rows[i];
      if (at.next <= at.end) {
        job.sequence->tokens.insert(job.sequence->tokens.end(), batch[b].tokens.begin(), batch[b].tokens.end());
        at.next += rows[i];
        if (at.next <= at.end) continue;  // more rows before the first draft
      }
      const float* last = scratch_.hidden.data() + (hidden_row - 1) * width;
      at.state.assign(last, last + width);
      if (job.first_logits && job.drafted->empty()) {
        job.first_logits->assign(logits_.begin() + static_cast<ptrdiff_t>(b * vocab),
                                 logits_.begin() + static_cast<ptrdiff_t>((b + 1) * vocab));
      }
      const int32_t token =
          confident_draft_token(std::span(logits_.data() + b * static_cast<size_t>(vocab), vocab), job.p_min);
      if (token < 0) {
        at.done = true;
        continue;
      }
      job.drafted->push_back(token);
      // Nothing follows the end of the generation.
      at.done = static_cast<int32_t>(job.drafted->size()) >= job.width || token == model_.params.eos_token;
    }
  }
  // Every position up to the drafted-from token has its row: of the hidden states, only the one
  // before it is kept (what a generation that continues the context without a pass between needs).
  for (size_t i = 0; i < jobs.size(); ++i) {
    if (progress[i].next <= progress[i].end) continue;
    MtpSequence& seq = *jobs[i].sequence;
    const int64_t from = std::max<int64_t>(progress[i].end - 1, seq.hidden_first);
    const int64_t drop = std::min<int64_t>(from - seq.hidden_first, static_cast<int64_t>(seq.hidden.size()) / width);
    seq.hidden.erase(seq.hidden.begin(), seq.hidden.begin() + drop * width);
    seq.hidden_first += drop;
  }
}

std::vector<float> mtp_reference_logits(const model::Model& model, std::span<const int32_t> tokens,
                                        cpu::ThreadPool& pool) {
  const int64_t width = mtp_hidden_width(model);
  const auto n = static_cast<int64_t>(tokens.size());
  ForwardScratch scratch;
  std::vector<float> logits;
  KvCache target(model, n);
  const SequenceRows all{tokens, 0, &target, LogitRows::kLast, true};
  forward(model, std::span(&all, 1), logits, scratch, pool);
  // Row p takes the hidden state of position p - 1.
  std::vector<float> hidden(static_cast<size_t>(n * width), 0.0f);
  std::copy_n(scratch.hidden.begin(), (n - 1) * width, hidden.begin() + width);
  KvCache layer = KvCache::nextn(model, n);
  const SequenceRows rows{tokens, 0, &layer, LogitRows::kLast};
  forward_nextn(model, std::span(&rows, 1), hidden, logits, scratch, pool);
  return logits;
}

}  // namespace bloomery::engine
