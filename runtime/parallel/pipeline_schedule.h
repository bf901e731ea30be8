// PipelineSchedule: a pipeline-parallel schedule (GPipe, 1F1B, interleaved 1F1B) as data: for every pp rank the ordered
// forwards, backwards and point-to-point transfers of one step, checked by simulation before the step runs.
#pragma once

#include <string>
#include <vector>

namespace strata {

// --pp-schedule gpipe | 1f1b | interleaved.
enum class PipelineScheduleKind { kGPipe, kOneFOneB, kInterleaved };

// "gpipe", "1f1b", "interleaved".
const char* pipeline_schedule_name(PipelineScheduleKind kind);
// The inverse of pipeline_schedule_name; kInvalidArgument naming the allowed names otherwise.
PipelineScheduleKind parse_pipeline_schedule(const std::string& name);

enum class PipelineActionKind { kForward, kBackward, kSendActivation, kRecvActivation, kSendGrad, kRecvGrad };

// One step of a rank's list. Stages are global: s in [0, P * V) lives on pp rank s % P as its model chunk s / P
// (Megatron-LM's interleaved layout; with V = 1, stage s is rank s).
struct PipelineAction {
  PipelineActionKind kind = PipelineActionKind::kForward;
  int micro_batch = 0;
  // Forward / backward: the stage computed. A transfer names the stage that produced the tensor, so the send and its
  // receive carry the same (micro_batch, virtual_stage): an activation of stage s goes to stage s + 1, the gradient
  // of stage s (d loss / d its input) to stage s - 1.
  int virtual_stage = 0;
  int peer = -1;  // the other pp rank of a transfer; -1 for a forward or a backward

  // "F3@s1", "B3@s1", "send act 3@s1 -> pp 0", "recv act 3@s0 <- pp 0", "send grad 3@s1 -> pp 0", "recv grad ...".
  std::string describe() const;
  // The token to_string() uses: F3@s1, B3@s1, sa3@s1>0, ra3@s0<0, sg3@s1>0, rg3@s2<1.
  std::string token() const;
  bool operator==(const PipelineAction& o) const {
    return kind == o.kind && micro_batch == o.micro_batch && virtual_stage == o.virtual_stage && peer == o.peer;
  }
};

// What the runtime issues at once: one forward or backward (a compute step), or a maximal run of consecutive transfers
// (a transfer step), issued as one Communicator::batch_send_recv and waited for together.
struct PipelineStep {
  bool transfer = false;
  int first = 0;                        // the index of actions[0] in the rank's list
  std::vector<PipelineAction> actions;  // in list order; exactly one forward or backward when !transfer
};

// Layers [first, last) of one stage.
struct LayerRange {
  int first = 0;
  int last = 0;
  int count() const { return last - first; }
};

// kInvalidArgument when `layers` cannot give every one of the pp x virtual stages at least one layer.
void check_layers(int layers, int pp, int virtual_stages);
// The layers of each of the P x V stages (indexed by global stage), contiguous and in order; an uneven count gives the
// extra layers to the earlier stages (torchtitan's generate_llm_fqn_per_model_part; Megatron-LM asks for an even
// split). 7 layers over 4 stages: [0,2) [2,4) [4,6) [6,7).
std::vector<LayerRange> split_layers(int layers, int pp, int virtual_stages);
// The micro-batch size of a batch of `batch` samples in `micro_batches`; kInvalidArgument when it does not divide.
int micro_batch_size(int batch, int micro_batches);

// What the schedule costs, from its lists alone (see PipelineSchedule::simulate).
struct PipelineTimeline {
  std::vector<int> max_in_flight;  // per rank: most (micro-batch, stage) pairs forwarded and not yet backwarded
  std::vector<long> finish;        // per rank: when its last action ends
  long makespan = 0;               // the latest finish
  long busy = 0;                   // compute time summed over ranks
  // The idle share of P x makespan: (P * makespan - busy) / (P * makespan).
  double bubble_fraction() const;
};

// A schedule: P pp ranks, M micro-batches, V virtual stages (model chunks) per rank, and each rank's ordered actions.
//
// Execution model (what validate() simulates and the runtime must honour): each rank runs its list in order, as steps
// (see steps()). A compute step runs when its input is there. A transfer step posts all its sends and receives at once
// and completes when the counterpart of every one of them has been posted, i.e. when each peer has reached the step
// holding it (rendezvous: MPI Isend/Irecv then one wait, or one NCCL group; nothing is buffered); only then does the
// rank go on. Transfers are matched per (source, destination, activation | gradient) in FIFO order, as MPI and NCCL
// match point-to-point messages. Unlike buffered sends, a step that only sends still waits: two neighbours deadlock
// when each waits in a step for a counterpart the other posts only after the step it is waiting in. Posting a send and
// the next receive in one step (Megatron-LM's send_forward_recv_backward) is what keeps 1F1B's steady state free of it.
// Consecutive stages on the same rank (P = 1 with V > 1) hand the tensor over locally, with no transfer actions.
class PipelineSchedule {
 public:
  // kInvalidArgument, naming the values, unless: P, M, V >= 1; V > 1 only with kInterleaved, which needs V >= 2;
  // M >= P for 1F1B and interleaved; M a multiple of P for interleaved (Megatron-LM's requirement).
  static void check(PipelineScheduleKind kind, int pp, int micro_batches, int virtual_stages);
  // The schedule of `kind` (after check()):
  //  gpipe:       all forwards in micro-batch order, then all backwards in micro-batch order (torch.distributed.
  //               pipelining's ScheduleGPipe).
  //  1f1b:        rank r warms up with min(P - r - 1, M) forwards, then alternates one forward and one backward,
  //               then drains the backwards (PipeDream-Flush; Megatron-LM's non-interleaved schedule).
  //  interleaved: Megatron-LM's forward_backward_pipelining_with_interleaving: micro-batches in groups of P, each
  //               group run through chunk 0, 1, .., V-1 forward and V-1, .., 0 backward; (P - r - 1) * 2 + (V - 1) * P
  //               warm-up forwards (all of them when M == P), then 1F1B, then the remaining backwards.
  // Every forward not on stage 0 is preceded by its activation's receive, every forward not on the last stage followed
  // by its send; every backward not on the last stage preceded by its gradient's receive, every backward not on stage
  // 0 followed by its send. The sends after one compute and the receives before the next are adjacent, so they form one
  // step (1F1B's steady state: send_forward_recv_backward, send_backward_recv_forward). In the interleaved steady state
  // the forward and backward of a pair run back to back, as Megatron-LM runs them: both receives before the forward,
  // both sends after the backward, so one step sends the pair's outputs and receives the next pair's inputs
  // (send_forward_backward_recv_forward_backward); with a step between them instead, two neighbours can each wait in
  // a send-only step for a receive the other posts only later, and the schedule deadlocks.
  static PipelineSchedule build(PipelineScheduleKind kind, int pp, int micro_batches, int virtual_stages = 1);

  // A schedule from explicit lists (one per rank), e.g. a hand-edited one; not validated.
  PipelineSchedule(PipelineScheduleKind kind, int pp, int micro_batches, int virtual_stages,
                   std::vector<std::vector<PipelineAction>> actions);

  PipelineScheduleKind kind() const { return kind_; }
  int pp() const { return pp_; }
  int micro_batches() const { return micro_batches_; }
  int virtual_stages() const { return virtual_stages_; }
  int num_stages() const { return pp_ * virtual_stages_; }
  int rank_of_stage(int stage) const { return stage % pp_; }
  const std::vector<PipelineAction>& actions(int rank) const;
  const std::vector<std::vector<PipelineAction>>& all_actions() const { return actions_; }

  // The first problem found by simulating the ranks (see the class comment), or "" when the schedule is sound: every
  // (micro-batch, stage) is forwarded and backwarded exactly once on its own rank, a forward has its input (stage 0, or
  // the activation of the stage before, received or local), a backward follows its forward and has the gradient of the
  // stage after (unless last), every output crossing ranks is sent once to the right peer and received there, and
  // every rank reaches the end of its list (no deadlock). A message names the rank, the action index and what it
  // waited for ("pp rank 1, action 4 (recv act 2@s0 <- pp 0): ...").
  std::string find_problem() const;
  // find_problem(), thrown as kInvalidArgument when there is one.
  void validate() const;
  // Runs a sound schedule on a timeline where a forward of one stage takes `forward_cost`, a backward `backward_cost`
  // and transfers are free; a compute step starts as soon as the step before it has ended and its input is there, a
  // transfer step ends when the last of its counterparts is posted (or when it is posted, if that is later).
  PipelineTimeline simulate(long forward_cost = 1, long backward_cost = 2) const;

  // The rank's list cut into steps (see PipelineStep and the class comment), in order; concatenated, their actions are
  // actions(rank).
  std::vector<PipelineStep> steps(int rank) const;
  // The most (micro-batch, stage) pairs forwarded and not yet backwarded at once on `rank`, counted along its list (no
  // simulation): how many stashed activations the runtime must hold. Equals simulate().max_in_flight[rank].
  int max_in_flight(int rank) const;

  // For --verbose: a header, a legend, then one line per rank: "pp 0: F0@s0 sa0@s0>1 F1@s0 ...".
  std::string to_string() const;

 private:
  PipelineScheduleKind kind_;
  int pp_, micro_batches_, virtual_stages_;
  std::vector<std::vector<PipelineAction>> actions_;
};

}  // namespace strata
