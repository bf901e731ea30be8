// UnitState: the transition tables.
#include "runtime/sharding/unit_state.h"

#include "core/error.h"

namespace strata {

const char* state_name(ParamState s) {
  switch (s) {
    case ParamState::kSharded: return "sharded";
    case ParamState::kGathering: return "gathering";
    case ParamState::kUnsharded: return "unsharded";
  }
  return "?";
}

const char* state_name(GradState s) {
  switch (s) {
    case GradState::kNone: return "none";
    case GradState::kHeld: return "held";
    case GradState::kReducing: return "reducing";
  }
  return "?";
}

const char* state_name(ShardWrite s) {
  switch (s) {
    case ShardWrite::kNone: return "none";
    case ShardWrite::kOnCompute: return "on the compute stream";
    case ShardWrite::kUploading: return "uploading";
  }
  return "?";
}

namespace {

template <typename State>
void move(const std::string& unit, const char* machine, State& current, State next, bool allowed) {
  STRATA_CHECK_CODE(ErrorCode::kInternal, allowed, "unit '{}': its {} cannot go from {} to {}", unit, machine,
                    state_name(current), state_name(next));
  current = next;
}

}  // namespace

void UnitState::to(ParamState next) {
  using P = ParamState;
  const bool allowed = (params_ == P::kSharded && next == P::kGathering) ||
                       (params_ == P::kUnsharded && next == P::kGathering) ||
                       (params_ == P::kGathering && next == P::kUnsharded) ||
                       (params_ == P::kUnsharded && next == P::kSharded);
  move(unit_, "parameters", params_, next, allowed);
}

void UnitState::to(GradState next) {
  using G = GradState;
  const bool allowed = (grads_ == G::kNone && next == G::kHeld) || (grads_ == G::kHeld && next == G::kReducing) ||
                       (grads_ == G::kReducing && (next == G::kNone || next == G::kHeld));
  move(unit_, "gradient buffer", grads_, next, allowed);
}

void UnitState::to(ShardWrite next) {
  using W = ShardWrite;
  const bool allowed = (shard_write_ == W::kNone && next != W::kNone) || (shard_write_ != W::kNone && next == W::kNone);
  move(unit_, "parameter shard", shard_write_, next, allowed);
}

}  // namespace strata
