// The GPT memory tests' check: a trainer's first step against predict_step_memory, category by category, on the
// device, on optimizer offload's host ledger and on activation offload's.
#pragma once

#include <cstdint>

#include "models/gpt/data/token_data.h"
#include "models/gpt/training/gpt_memory.h"
#include "models/gpt/training/train_config.h"

namespace strata::gpt::test {

// A tp group as wide as the world is the runtime's world communicator (DeviceMesh reuses it), whose compute-stream
// staging outlives each trainer: one all-reduce of `bytes` grows it now (collective), so that a test's trainers find
// that lane in place and expect its bytes outside their peak (expect_step_as_predicted's comm_in_place).
void grow_world_lane(std::uint64_t bytes);

// Every category of a prediction within 2% of the ledger's.
void expect_close(const CategoryBytes& predicted, const CategoryBytes& measured, const char* where);

// A trainer's first step on `data` (collective); expects its device and host peaks, over what was in use before it,
// to be the predicted ones, less `comm_in_place` bytes of comm_buffer a longer-lived communicator already holds; and
// activation offload's host ledger to hold predict_offloaded_activations. Returns the device peak over the baseline.
CategoryBytes expect_step_as_predicted(const TrainConfig& cfg, const TokenFile& data,
                                            std::uint64_t comm_in_place = 0);

}  // namespace strata::gpt::test
