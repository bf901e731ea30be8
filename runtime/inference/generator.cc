// generate: prefill every prompt, then decode the live sequences together until each ends.
#include "runtime/inference/generator.h"

#include <algorithm>
#include <chrono>

#include "collectives/rank_values.h"
#include "core/error.h"

namespace strata {
namespace {

// The largest of the lockstep group's values of `mine`, every rank waiting for it.
int group_max(Communicator& group, int mine) {
  const std::vector<double> all = all_gather_values(group, mine);
  return static_cast<int>(*std::max_element(all.begin(), all.end()));
}

}  // namespace

void check_prompts(int vocab, int context, const std::vector<std::vector<std::int32_t>>& prompts) {
  const int n = static_cast<int>(prompts.size());
  for (int i = 0; i < n; ++i) {
    const std::vector<std::int32_t>& p = prompts[static_cast<std::size_t>(i)];
    STRATA_CHECK(!p.empty(), "prompt {} is empty", i);
    STRATA_CHECK(static_cast<int>(p.size()) < context,
                 "prompt {} holds {} tokens: the model's context of {} leaves no room to generate", i, p.size(),
                 context);
    for (std::size_t t = 0; t < p.size(); ++t)
      STRATA_CHECK(p[t] >= 0 && p[t] < vocab,
                   "prompt {}: token {} at position {} is outside the vocabulary [0, {})", i, p[t], t, vocab);
  }
}

Generation generate(Decoder& decoder, const std::vector<std::vector<std::int32_t>>& prompts,
                    const GenerateOptions& options) {
  using Clock = std::chrono::steady_clock;
  const int vocab = decoder.vocab(), context = decoder.context();
  const int n = static_cast<int>(prompts.size());
  Communicator* group = decoder.lockstep_group();
  STRATA_CHECK(n >= (group ? 0 : 1) && n <= decoder.sequences(), "{} prompts for a decoder of {} sequences", n,
               decoder.sequences());
  STRATA_CHECK(options.max_new_tokens >= 1, "--max-new-tokens {} must be at least 1", options.max_new_tokens);
  options.sampling.validate();
  check_prompts(vocab, context, prompts);
  STRATA_CHECK(options.sequence_ids.empty() || options.sequence_ids.size() == prompts.size(),
               "{} sequence ids for {} prompts", options.sequence_ids.size(), prompts.size());
  Generation g;
  g.tokens.resize(static_cast<std::size_t>(n));
  g.stopped.assign(static_cast<std::size_t>(n), false);
  auto is_stop = [&](std::int32_t t) {
    return std::find(options.stop_tokens.begin(), options.stop_tokens.end(), t) != options.stop_tokens.end();
  };
  // A sequence goes on while it has not stopped, wants more tokens and has a position left for the last one.
  auto live = [&](int s) {
    const std::size_t i = static_cast<std::size_t>(s);
    return !g.stopped[i] && static_cast<int>(g.tokens[i].size()) < options.max_new_tokens &&
           decoder.length(s) < context;
  };
  auto emit = [&](int s, const float* logits) {
    const std::size_t i = static_cast<std::size_t>(s);
    const std::uint64_t id = options.sequence_ids.empty() ? i : options.sequence_ids[i];
    const int t = sample_token(logits, vocab, options.sampling, id, g.tokens[i].size());
    g.tokens[i].push_back(t);
    g.stopped[i] = is_stop(t);
    ++g.new_tokens;
  };
  const auto t0 = Clock::now();
  int prefill_passes = 0;
  for (const std::vector<std::int32_t>& p : prompts)
    prefill_passes += decoder.prefill_passes(static_cast<int>(p.size()));
  // In step: as many prefill passes as the busiest rank's, the others idle.
  const int idle_prefill = group ? group_max(*group, prefill_passes) - prefill_passes : 0;
  for (int s = 0; s < n; ++s) {
    const std::vector<std::int32_t>& p = prompts[static_cast<std::size_t>(s)];
    decoder.reset(s);
    emit(s, decoder.prefill(s, p.data(), static_cast<int>(p.size())));
    g.prompt_tokens += p.size();
  }
  for (int i = 0; i < idle_prefill; ++i) decoder.idle_pass();
  g.idle_passes = static_cast<std::uint64_t>(idle_prefill);
  const auto t1 = Clock::now();
  const std::uint64_t w0 = decoder.weight_bytes_read(), c0 = decoder.cache_bytes_read(),
                      s0 = decoder.streamed_bytes_read(), a0 = decoder.gathered_bytes_read(),
                      k0 = decoder.cache_link_bytes();
  for (;;) {
    std::vector<int> seqs;
    std::vector<std::int32_t> last;
    for (int s = 0; s < n; ++s)
      if (live(s)) {
        seqs.push_back(s);
        last.push_back(g.tokens[static_cast<std::size_t>(s)].back());
      }
    // In step: a pass while any rank of the group decodes.
    if (group && group_max(*group, seqs.empty() ? 0 : 1) > 0 && seqs.empty()) {
      decoder.idle_pass();
      ++g.idle_passes;
      continue;
    }
    if (seqs.empty()) break;
    const float* logits = decoder.decode(seqs, last);
    for (std::size_t j = 0; j < seqs.size(); ++j) emit(seqs[j], logits + j * static_cast<std::size_t>(vocab));
    ++g.decode_steps;
  }
  const auto t2 = Clock::now();
  g.prefill_s = std::chrono::duration<double>(t1 - t0).count();
  g.decode_s = std::chrono::duration<double>(t2 - t1).count();
  g.decode_weight_bytes = decoder.weight_bytes_read() - w0;
  g.decode_cache_bytes = decoder.cache_bytes_read() - c0;
  g.decode_streamed_bytes = decoder.streamed_bytes_read() - s0;
  g.decode_gathered_bytes = decoder.gathered_bytes_read() - a0;
  g.decode_cache_link_bytes = decoder.cache_link_bytes() - k0;
  return g;
}

}  // namespace strata
