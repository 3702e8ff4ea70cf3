// Pipeline schedules as per-stage action lists (pure functions), and a simulator that checks
// them and measures their bubble.
//
// p stages (ranks), m micro-batches, v chunks per rank. Virtual stage vs = chunk * p + stage:
// rank `stage` holds virtual stages stage, stage + p, stage + 2p, ... (Megatron's interleaving),
// but under zb_v, whose two chunks make a V: chunk 0 is virtual stage `stage`, chunk 1 is
// 2p - 1 - stage (virtual_stage(), stage_of()), so the last stage runs virtual stages p - 1 and p
// back to back and the first stage holds both ends.
// Forward (i, vs) of micro-batch i needs forward (i, vs - 1); backward (i, vs) needs forward
// (i, vs) and backward (i, vs + 1); the last virtual stage's backward follows its own forward.
//   gpipe             all forwards, then all backwards, both in micro order (torch's ScheduleGPipe)
//   1f1b              PipeDream-flush (Megatron's pipelining without interleaving):
//                     min(p - stage - 1, m) warm-up forwards, then one forward and one backward
//                     in turn, then the remaining backwards
//   interleaved_1f1b  Megatron's pipelining with interleaving: micro-batches in groups of p go
//                     through chunk 0, then chunk 1, ...; backwards take the chunks in reverse;
//                     min(2 (p - stage - 1) + (v - 1) p, m v) warm-up forwards, then 1F1B
//   zb_h1             Qi et al.'s ZB-H1 (Zero Bubble Pipeline Parallelism, 2023): each backward
//                     is split into B, the input gradient (what the previous stage waits for),
//                     and W, the weight gradients (Note [Split backward], autograd/engine.cpp);
//                     1F1B's order of F and B, with stage s's W passes lagging its B passes by
//                     s: a W after each B once s B's are done, the last s W's after the last B.
//                     W needs only its own B. Note [ZB-H1 bubble].
//   zb_v              Qi et al.'s ZB-V: two chunks per rank in a V, each backward split into B
//                     and W as zb_h1's; the order is the paper's hand-made one (as torch's
//                     ScheduleZBVZeroBubble builds it). Note [ZB-V].
// In every schedule a rank runs each chunk's forwards in micro order, its backwards too, and
// its W passes: the messages between two ranks for one (kind, virtual stage) go in micro order
// (Note [Pipeline messages], stage_runner.cpp, relies on it).
//
// Note [ZB-H1 bubble]: with F, B, W the passes' costs per stage (1F1B's backward is B + W), ZB-H1
// has each stage's idle time (p - 1)(F + B - W) for m >= p, where 1F1B has (p - 1)(F + B + W):
// the B chain from the last stage back costs B per stage instead of B + W, and the W's fill the
// cool-down's gaps. So its bubble is
//   (p - 1)(F + B - W) / (m (F + B + W) + (p - 1)(F + B - W))      m >= p, W <= F, W <= B
// and for m < p the makespan is (m + p - 1)(F + B) + W (the B chain is the critical path). With
// F = B = W (ideal_bubble): (p - 1) / (3m + p - 1), a third of 1F1B's idle time, and
// 1 - 3m / (2m + 2p - 1) for m < p. Memory: stage s holds a micro-batch from its F to its W,
// at most min(p, m) of them on every stage: what 1F1B holds on stage 0 (its largest), though
// between B and W only what the weight gradients read (a linear's input and output gradient).
//
// Note [ZB-V]: rank r (of p) holds chunk 0 = virtual stage r and chunk 1 = virtual stage
// 2p - 1 - r. Its order, counting micro-batches per chunk (n = max(m, 2p - 1); the passes of
// micro-batches >= m are then dropped, which keeps every dependency):
//   2(p - r) - 1 F0;  r x (F1, F0);  (p - r) x (F1, B1, W1);
//   then, until every F is placed: (F0 while any is left, B0, W0, F1, B1, W1);
//   r x (B0, B1);  (p - r) x (B0, W0);  the W1's left;  the W0's left.
// Every rank does 2m (F + B + W) of chunk passes; the last rank can start its first only after
// the p - 1 forwards of chunk 0 before it, and from there nothing waits: with F = B = W per chunk
// the makespan is 6m + p - 1 passes for m large enough, so the bubble is
//   (p - 1) / (6m + p - 1)      with F = B = W, for 6m + p - 1 >= 4m + 4p - 2
// half of zb_h1's (whose stage passes are two chunk passes: (p - 1) / (3m + p - 1)), the least
// any order can have (the last rank's start is a floor). For fewer micro-batches the chain of one
// micro-batch through the 2p virtual stages and back is the path, 4m + 4p - 2 passes:
//   ideal_bubble = 1 - 6m / max(6m + p - 1, 4m + 4p - 2)
// (schedule_test checks both against the simulator). Memory: a rank holds at most 2p chunk
// micro-batches from F to W, each half a stage's layers: p stage micro-batches, what 1F1B holds on
// its first stage, on every rank.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace braid::parallel::pipeline {

enum class ScheduleKind { gpipe, one_f_one_b, interleaved_1f1b, zb_h1, zb_v };

// "gpipe" | "1f1b" | "interleaved_1f1b" | "zb_h1" | "zb_v"; anything else throws naming
// parallel.pipeline_schedule.
ScheduleKind schedule_from_name(const std::string& name);
const char* schedule_name(ScheduleKind kind);

struct ScheduleShape {
  ScheduleKind kind = ScheduleKind::one_f_one_b;
  int stages = 1;         // p: parallel.pipeline_parallel_size
  int micro_batches = 1;  // m: training.gradient_accumulation_steps
  int chunks = 1;         // v: parallel.pipeline_virtual_stages (> 1 interleaved; 2 zb_v)
  int virtual_stages() const { return stages * chunks; }
};

// The chunks per rank a schedule runs with parallel.pipeline_virtual_stages `configured`: zb_v
// always runs two (its V), so the default 1 means 2 there; any other count is kept as it is
// (check_schedule names what it does not take).
int chunks_per_rank(const std::string& schedule, int configured);

// The virtual stage of rank `stage`'s chunk, and the rank holding virtual stage vs.
int virtual_stage(const ScheduleShape& shape, int stage, int chunk);
int stage_of(const ScheduleShape& shape, int vs);

// Throws one line naming the config key: stages < 1, micro_batches < 1, chunks != 1 without
// interleaving (2 under zb_v), interleaving with chunks < 2 or micro_batches not a multiple of
// stages (as Megatron requires). 1f1b with fewer micro-batches than stages is fine (a shorter
// warm-up).
void check_schedule(const ScheduleShape& shape);

struct Action {
  // backward: the whole backward, or only its input gradients where the schedule has weight passes
  enum class Kind : uint8_t { forward, backward, weight };
  Kind kind = Kind::forward;
  int micro = 0;  // micro-batch
  int chunk = 0;  // this rank's chunk (virtual_stage())
  bool operator==(const Action&) const = default;
};

// What rank `stage` runs, in order: every (micro, chunk) once forward and once backward, and once
// weight for a schedule with weight passes.
std::vector<Action> stage_actions(const ScheduleShape& shape, int stage);

// Whether the schedule splits backwards into B and W (zb_h1, zb_v).
bool has_weight_passes(ScheduleKind kind);

// "F m3 c0" / "B m3 c1" / "W m3 c1", as errors and the timeline name actions.
std::string action_name(const Action& action);

struct SimResult {
  double makespan = 0;                // end of the last action anywhere
  std::vector<double> idle_fraction;  // per stage: 1 - busy / makespan
  std::vector<int> max_in_flight;     // per stage: most (micro, chunk) forwarded, not yet done
                                      // (backward, or weight where there are weight passes)
};

// Every rank runs its actions in order; an action starts once its dependencies are done and
// its rank is free; forwards take forward_cost, backwards backward_cost (per chunk), weight
// passes weight_cost, messages nothing; a schedule without weight passes computes the weight
// gradients in its backwards, which take backward_cost + weight_cost. Throws naming each rank's
// stuck action if the schedule deadlocks. With equal stages every rank's idle fraction is
// exactly ideal_bubble() for gpipe, 1f1b and interleaved_1f1b at any costs, and for zb_h1 and
// zb_v at equal costs (Notes [ZB-H1 bubble], [ZB-V]; schedule_test checks it).
SimResult simulate(const ScheduleShape& shape, double forward_cost, double backward_cost,
                   double weight_cost = 0);
// The same for given action lists, one per stage (a schedule under test).
SimResult simulate(const ScheduleShape& shape, const std::vector<std::vector<Action>>& actions,
                   double forward_cost, double backward_cost, double weight_cost = 0);

// One stage's cost of a chunk's pass of each kind (backward: the input gradients alone where
// the schedule has weight passes, else the whole backward).
struct PassCosts {
  double forward = 0, backward = 0, weight = 0;
};

// The schedule's own actions with each stage's costs, its ranks sharing cores (Note [Shared
// cores]): a pass runs max_speedup times faster than its cost when only one stage works, and at
// rate min(max_speedup, p / working stages) in general. max_speedup 1: a core (or device) per
// rank, the simulation above.
SimResult simulate(const ScheduleShape& shape, const std::vector<PassCosts>& costs,
                   double max_speedup = 1);

// (p - 1) / (m + p - 1) for gpipe and 1f1b; (p - 1) / (v m + p - 1) interleaved; zb_h1 with
// equal pass costs (p - 1) / (3m + p - 1) for m >= p, 1 - 3m / (2m + 2p - 1) for m < p (Note
// [ZB-H1 bubble]); zb_v with equal chunk pass costs 1 - 6m / max(6m + p - 1, 4m + 4p - 2) (Note
// [ZB-V]).
double ideal_bubble(const ScheduleShape& shape);

}  // namespace braid::parallel::pipeline
