// check_finite_weights: one pass over a model's weights before decoding, refusing a NaN or infinity by tensor and
// element on every rank.
#pragma once

#include <string>

#include "collectives/communicator.h"
#include "models/gpt/inference/gpt_decoder.h"  // WeightReader
#include "models/gpt/model/gpt_model.h"        // GptConfig

namespace strata::gpt {

// Collective over `comm`: reads every parameter of `cfg` (gpt_units(cfg, 1)'s names and whole shapes) through `read`
// once, the elements shared out over the ranks in equal runs of gpt_units' order (each rank reads about 1/N of the
// model), and throws kNonFinite on every rank naming the first non-finite value in that order:
//   "<source>: tensor 'h.0.mlp.c_fc.weight' holds NaN at element 5 (...)"
// The readers check checksums and shapes, not values: without this a NaN decodes to tokens. Its cost is one more read
// of the weights, shared over the ranks, before the decoder reads what it holds (docs/inference.md). A read that fails
// throws on its rank (run_main aborts the job).
void check_finite_weights(const GptConfig& cfg, const WeightReader& read, const std::string& source,
                          Communicator& comm);

}  // namespace strata::gpt
