// UnitState: the states of one ShardedUnit's storage and the transitions between them, in one place. Each in-flight
// operation (a gather, a reduction, an upload, an update on the compute stream) is a state, entered when it is
// enqueued and left when it is waited for; an illegal transition is an internal error naming the unit.
#pragma once

#include <string>

namespace strata {

// The parameters (FSDP2's ShardedState, with DeepSpeed's INFLIGHT):
//   ZeRO-3:      kSharded --unshard--> kGathering --wait--> kUnsharded --reshard--> kSharded
//   stages 0-2:  kUnsharded --publish (refresh gather of the updated slices)--> kGathering --wait--> kUnsharded
enum class ParamState { kSharded, kGathering, kUnsharded };

// The unsharded gradient buffer:
//   kNone --prepare--> kHeld --reduce--> kReducing --finish--> kNone (a pooled buffer returns to its pool)
//                                                           \-> kHeld (stages 0-1: the buffer persists)
//   (a backward without gradient sync, no-sync accumulation, leaves it kHeld: no transition)
enum class GradState { kNone, kHeld, kReducing };

// A write of the parameter shard that the next gather must wait for:
//   kNone --update on the compute stream--> kOnCompute --the next gather waits for it--> kNone
//   kNone --upload from host memory (offload)--> kUploading --finish_upload--> kNone
enum class ShardWrite { kNone, kOnCompute, kUploading };

const char* state_name(ParamState s);
const char* state_name(GradState s);
const char* state_name(ShardWrite s);

class UnitState {
 public:
  UnitState(std::string unit, ParamState initial) : unit_(std::move(unit)), params_(initial) {}

  ParamState params() const { return params_; }
  GradState grads() const { return grads_; }
  ShardWrite shard_write() const { return shard_write_; }

  // Moves to `next`; a transition the diagrams above do not have throws kInternal naming the unit and both states.
  void to(ParamState next);
  void to(GradState next);
  void to(ShardWrite next);

 private:
  std::string unit_;
  ParamState params_;
  GradState grads_ = GradState::kNone;
  ShardWrite shard_write_ = ShardWrite::kNone;
};

}  // namespace strata
