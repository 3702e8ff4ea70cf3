#include "braid/parallel/estimate/memory_estimate.h"

#include <algorithm>
#include <optional>

#include "braid/core/error.h"
#include "braid/core/memory_tracker.h"
#include "braid/nn/param_layout.h"
#include "braid/nn/tensor_parallel.h"
#include "braid/nn/transformer.h"
#include "braid/parallel/estimate/activation_estimate.h"
#include "braid/parallel/estimate/keyed_cache.h"
#include "braid/parallel/estimate/pipeline_estimate.h"
#include "braid/parallel/estimate/scratch_estimate.h"
#include "braid/parallel/pipeline/partition.h"
#include "braid/parallel/pipeline/stage_balance.h"

namespace braid::parallel {

namespace {

// Elements of the layout a strategy materialises: P the whole padded buffer, E the embeddings
// unit, H the head unit, B the largest block, n the real parameters; every unit's padded size in
// order, and whether the LM head borrows the embedding.
struct Units {
  double P = 0, E = 0, H = 0, B = 0, n = 0;
  std::vector<double> sizes;
  bool tied = true;
};

// Rank 0 of a tp group as the model's declaration sees it: which slices it holds. Nothing runs
// through it.
class DeclaredTensorParallel : public nn::TensorParallel {
 public:
  explicit DeclaredTensorParallel(int tp) : tp_(tp) {}
  int rank() const override { return 0; }
  int size() const override { return tp_; }
  bool sequence_parallel() const override { return false; }
  std::string describe() const override { return "tp=" + std::to_string(tp_) + " (declared)"; }
  nn::Variable enter(const nn::Variable&) override { unused(); }
  nn::Variable exit(const nn::Variable&) override { unused(); }
  nn::Variable sum_grad(const nn::Variable&, int) override { unused(); }
  nn::Variable vocab_parallel_cross_entropy(const nn::Variable&, const nn::Variable&, const Tensor&,
                                            double, int32_t, int64_t, int64_t) override {
    unused();
  }
  Tensor vocab_parallel_logits(const Tensor&, const Tensor&, int64_t) override { unused(); }

 private:
  [[noreturn]] static void unused() {
    BRAID_THROW("estimate-memory: a declared tensor-parallel model does not run");
  }
  int tp_;
};

// The units of tp rank 0's slices of the model (all ranks' are the same size but for the
// padded vocabulary's last rows), or of a pipeline stage's part of them.
Units declared_units(const nn::ModelConfig& model, int64_t pad_multiple, int tp,
                     const std::optional<nn::PipelineStage>& stage) {
  DeclaredTensorParallel declared_tp(tp);
  nn::TransformerOptions declared;
  declared.materialize = false;
  if (tp > 1) declared.tensor_parallel = &declared_tp;
  declared.pipeline = stage;
  const nn::Transformer m(model, declared);
  const nn::ParamLayout l = m.layout().with_padding(pad_multiple);
  const auto& u = l.units();
  Units s{static_cast<double>(l.total()),
          static_cast<double>(u.front().padded),
          static_cast<double>(u.back().padded),
          0,
          static_cast<double>(m.layout().num_parameters()),
          {},
          model.tie_word_embeddings};
  for (size_t i = 1; i + 1 < u.size(); ++i) s.B = std::max(s.B, static_cast<double>(u[i].padded));
  for (const auto& unit : u) s.sizes.push_back(static_cast<double>(unit.padded));
  return s;
}

// Note [Unit cache]: declaring a model is the estimator's cost (a 96-layer model, once per
// pipeline stage), and the planner asks for the same units thousands of times, so they are
// kept by what determines them: the model's shape, the padding, tp and the stage's layers.
Units units_of(const nn::ModelConfig& model, int64_t pad_multiple, int tp,
               const std::optional<nn::PipelineStage>& stage) {
  std::string key = model.shape_key();
  key += "|" + std::to_string(pad_multiple) + "|" + std::to_string(tp);
  if (stage) {
    key += stage->first ? "|f" : "|-";
    key += stage->last ? "l" : "-";
    for (const auto& [b, e] : stage->chunks)
      key += ":" + std::to_string(b) + "-" + std::to_string(e);
  }
  static KeyedCache<Units> cache;
  return cache.get(key, [&] { return declared_units(model, pad_multiple, tp, stage); });
}

// What the formulas need to know of a strategy: its ZeRO stage (0 = replicated, DDP), whether
// stage 3 keeps its gathered units from forward to backward (SHARD_GRAD_OP), the shard group
// size S and the data-parallel size N.
struct Sharding {
  std::string label;
  int stage = 0;
  bool keeps_gathered = false;
  int S = 1, N = 1, tp = 1, pp = 1;
  bool sp = false;
  ContextSplit cp;
};

Sharding shape_of(const ParallelPlan& spec, int world) {
  BRAID_CHECK(world >= 1, "estimate-memory: world size must be >= 1, got ", world);
  const int tp = std::max(1, spec.tensor_parallel_size),
            pp = std::max(1, spec.pipeline_parallel_size),
            cp = std::max(1, spec.context_parallel_size);
  BRAID_CHECK(world % (tp * pp * cp) == 0, "estimate-memory: tensor_parallel_size ", tp,
              " x pipeline_parallel_size ", pp,
              cp > 1 ? " x context_parallel_size " + std::to_string(cp) : std::string(),
              " does not divide the world size ", world);
  BRAID_CHECK(!spec.sequence_parallel || tp > 1,
              "estimate-memory: sequence_parallel needs tensor_parallel_size > 1");
  BRAID_CHECK(spec.context_parallel_mode == "ring" || spec.context_parallel_mode == "ulysses",
              "estimate-memory: context_parallel_mode '", spec.context_parallel_mode,
              "' is not modelled (ring, ulysses)");
  if (pp > 1) {
    pipeline::schedule_from_name(spec.pipeline_schedule);  // throws naming the key
    BRAID_CHECK(spec.pipeline_balance == "uniform" || spec.pipeline_balance == "parameters",
                "estimate-memory: pipeline_balance '", spec.pipeline_balance,
                "' is not modelled (uniform, parameters; 'time' splits by a measurement made "
                "when the run starts)");
  }
  Sharding s;
  const std::string layout =
      (tp > 1 ? " tp" + std::to_string(tp) : "") + (spec.sequence_parallel ? "+sp" : "") +
      (cp > 1 ? " cp" + std::to_string(cp) : "") + (pp > 1 ? " pp" + std::to_string(pp) : "");
  s.label = spec.name + layout;
  s.tp = tp;
  s.sp = spec.sequence_parallel;
  s.pp = pp;
  s.cp = {cp, spec.context_parallel_mode == "ulysses"};
  // The data-parallel strategy runs over world / (tp x pp) = dp x cp ranks: the cp ranks of a
  // batch reduce and shard with it (Note [Context-parallel layout]).
  s.N = world / (tp * pp);
  s.S = s.N;
  const std::string& how = spec.sharding_strategy;
  if (spec.name == "none") {
    BRAID_CHECK(s.N == cp, "estimate-memory: strategy none is one data-parallel rank, not ",
                s.N / cp, " (pick ddp, zero1, zero2, zero3 or fsdp)");
  } else if (spec.name == "zero1" || spec.name == "zero2" || spec.name == "zero3") {
    s.stage = spec.name.back() - '0';
  } else if (spec.name == "fsdp") {
    s.label = "fsdp " + how + layout;
    if (how == "NO_SHARD") {
      s.stage = 0;
    } else if (how == "FULL_SHARD" || how == "SHARD_GRAD_OP" || how == "HYBRID_SHARD" ||
               how == "HYBRID_SHARD_ZERO2") {
      s.stage = 3;
      s.keeps_gathered = how == "SHARD_GRAD_OP" || how == "HYBRID_SHARD_ZERO2";
    } else {
      BRAID_THROW("estimate-memory: unknown fsdp sharding strategy '", how,
                  "' (FULL_SHARD, SHARD_GRAD_OP, NO_SHARD, HYBRID_SHARD, HYBRID_SHARD_ZERO2)");
    }
  } else if (spec.name != "ddp") {
    BRAID_THROW("estimate-memory: unknown strategy '", spec.name,
                "' (none, ddp, zero1, zero2, zero3, fsdp)");
  }
  // Note [Sequence-parallel gathers]: under sequence parallelism a norm's (and GPT-2's
  // row-parallel bias's) parameter passes sum_grad, whose node holds it until backward, so stage
  // 3 keeps every unit's gathered parameters from its forward to its backward, as SHARD_GRAD_OP
  // does (measured: memory_estimate_test).
  if (s.stage == 3 && spec.sequence_parallel) s.keeps_gathered = true;
  if (s.stage == 3 && spec.sharding_factor > 0) {
    BRAID_CHECK(s.N / cp % spec.sharding_factor == 0, "estimate-memory: sharding_factor ",
                spec.sharding_factor, " does not divide the data-parallel size ", s.N / cp);
    s.S = spec.sharding_factor * cp;  // a shard group spans its ranks' cp peers
  }
  return s;
}

bool syncs_each_batch(const ParallelPlan& spec, const Sharding& s) {
  if (s.pp > 1) return false;  // Note [Pipeline reduction]: reduced once, after the schedule
  if (spec.sync_each_batch == "true") return true;
  if (spec.sync_each_batch == "false") return false;
  BRAID_CHECK(spec.sync_each_batch == "auto", "estimate-memory: sync_each_batch must be auto, ",
              "true or false, got '", spec.sync_each_batch, "'");
  return s.stage >= 2;
}

// Note [Units in flight]: the units a sharded strategy holds whole at its peak. Parameters
// (stage 3): limit_all_gathers blocks gathered or being gathered, and with tied embeddings the
// embedding (the LM head borrows it until its backward) and the head; untied, the embedding and
// the head are each gathered beside one block at most (under a pipeline the stage's last unit
// beside the others). Gradients (stages 2 and 3, reducing each
// micro-step): two blocks (the one in backward and the one being reduced), and with tied
// embeddings the embedding's (it collects from the head's backward to the end). Offloaded (Note
// [Offload pages]): one block gathered while the next one's f32 shard is read ahead instead, the
// reduced piece being written, and three blocks' optimizer pages (being updated, read ahead,
// written back).
// Under a pipeline a stage's last unit (its last block, or the head) stays gathered from one
// micro-batch's forward to its backward while other micro-batches' forwards gather beside it.
double gathered_params(const Units& u, double limit, bool pipelined) {
  if (u.tied) return u.E + u.H + limit * u.B;
  if (pipelined) return u.H + std::max(limit * u.B, u.E + u.B);
  return std::max({limit * u.B, u.E + u.B, u.H + u.B});
}

double grads_in_flight(const Units& u) {
  return u.tied ? u.E + 2 * u.B : std::max({2 * u.B, u.E + u.B, u.H + u.B});
}

// The same when each reduction ends before the next block's backward begins: no block waits
// beside the one in backward (MemoryEstimate::gradients_overlap).
double grads_one_at_a_time(const Units& u) {
  return u.tied ? u.E + u.B : std::max({u.B, u.E, u.H});
}

// Materialising a sharded strategy without ranged fills (Note [Ranged loads], parallel/step.h:
// the seeded initialisation under tensor parallelism) fills each unit's f32 values in full
// before keeping this rank's piece (sharded_materialize.cpp): after `before` bytes, the pieces
// kept so far (1/S of each unit, f32) and the unit being filled. A ranged fill writes the pieces
// where they are kept.
double fill_peak(const Units& u, double before, double S) {
  double kept = 0, peak = 0;
  for (double size : u.sizes) {
    kept += 4 * size / S;
    peak = std::max(peak, before + kept + 4 * size);
  }
  return peak;
}

MemoryEstimate state_of(const Sharding& s, const Units& u, const ParallelPlan& spec, int64_t a,
                        int64_t opt_bytes) {
  const double N = s.N, S = s.S, r = static_cast<double>(dtype_size(spec.reduce_dtype));
  const bool sync = syncs_each_batch(spec, s);
  const bool offload_opt = spec.offload_optimizer == "nvme" && s.stage >= 1;
  // Note [Optimizer state on the host]: resident state (on the host), plus a host copy of this
  // rank's master pieces and of one slice's gradient at a time.
  const bool host_step = spec.offload_optimizer == "cpu" && s.stage >= 1;
  const bool offload_params = spec.offload_params != "none" && s.stage == 3;
  // Whether materialising fills units whole first (fill_peak): a fresh model under tensor
  // parallelism; a checkpoint's load fills ranges even then, and needs no more.
  const bool whole_fills = spec.tensor_parallel_size > 1;
  double params = 0, grads = 0, optimizer = opt_bytes * u.n / N, comm = 0;
  // Mixed precision: f32 masters (whole, or this rank's piece) plus the compute copy.
  const double whole_params = a == 4 ? 4 * u.P : (s.stage == 0 ? 4 * u.P : 4 * u.P / N) + a * u.P;
  const double in_flight_grads = 4 * grads_in_flight(u);
  // MemoryEstimate::gradients_overlap, wherever the in-flight gradients are counted
  const double in_flight_overlap = in_flight_grads - 4 * grads_one_at_a_time(u);
  double overlap = 0;
  switch (s.stage) {
    case 0:
      params = whole_params;
      grads = 4 * u.P;
      optimizer = opt_bytes * u.n;
      if (r != 4) comm = r * u.P;  // every bucket's staging in the reduce dtype
      break;
    case 1:
      params = a == 4 || !whole_fills ? whole_params : fill_peak(u, a * u.P, N);
      grads = 4 * u.P + (sync ? 4 * u.P / N : 0);
      break;
    case 2:
      params = a == 4 || !whole_fills ? whole_params : fill_peak(u, a * u.P, N);
      grads = 4 * u.P / N + (sync ? in_flight_grads : 4 * u.P);
      if (sync) overlap = in_flight_overlap;
      break;
    case 3: {
      const double gathered =
          s.keeps_gathered
              ? u.P
              : gathered_params(u, static_cast<double>(spec.limit_all_gathers), s.pp > 1);
      params = std::max(4 * u.P / S + a * gathered, whole_fills ? fill_peak(u, 0, S) : 0.0);
      grads = 4 * u.P / N + (sync ? in_flight_grads : 4 * u.P);
      if (sync) overlap = in_flight_overlap;
      if (a != 4) comm = a * u.B / S;  // the shard cast for its all-gather
      break;
    }
  }
  if (s.stage > 0 && r != 4) comm += 2 * r * u.B;  // units being reduce-scattered
  if (offload_params) {
    // fp32: forward updates each unit's page before gathering it (Note [Deferred step],
    // parallel/zero/offload_store.h), so it holds two pages' masters besides the units (the page
    // being updated and the next, read ahead); else one shard read back.
    params = a * (u.E + u.H + u.B) + (a == 4 ? 2 : 1) * 4 * u.B / N;
    grads = in_flight_grads + 4 * u.E / N;  // the reduced piece being written
    overlap = in_flight_overlap;
    if (a != 4) {  // Note [Offloaded compute copy]: the shard in the compute dtype, no cast
      params += a * u.P / N;
      comm -= a * u.B / S;
    }
  }
  // Note [Offload pages]: three pages at a step; two in fp32 with the parameters offloaded, whose
  // step is deferred into forward (Note [Deferred step]).
  if (offload_opt) optimizer = (offload_params && a == 4 ? 2 : 3) * opt_bytes * u.B / N;
  if (host_step) {
    params += 4 * u.P / N;
    grads += 4 * u.B / N;
  }
  MemoryEstimate e;
  e.strategy = s.label;
  e.parameters = static_cast<int64_t>(params);
  e.gradients = static_cast<int64_t>(grads);
  e.gradients_overlap = static_cast<int64_t>(overlap);
  e.optimizer_state = static_cast<int64_t>(optimizer);
  e.communication = static_cast<int64_t>(comm);  // the strategy's staging
  return e;
}

// Note [Context-parallel staging]: what context-parallel attention holds in the communication
// category on a rank's `tokens` tokens (measured with the tracker). Ring attention
// (parallel/context/ring_attention.cpp) sends k and v packed, blocks of 2 a tokens KVl bytes:
// forward holds its own and the one arriving, backward 5 at once (the block at hand and the one
// arriving, the dK/dV accumulator being filled, the one arriving and the one being passed on).
// Ranks as threads copy each send until the peer takes it (local_group.cpp), and a rank may run
// up to the whole ring ahead of the next one: every send of backward waiting, (n - 1) blocks
// and (n - 1) accumulators more, is what the estimate counts, and memory_estimate_test holds the
// measurement between none waiting and that (measured with cp 2: all 7 blocks in most runs, 6
// in some; with cp 4: 8 to 10 of the 11). Processes under MPI send from the tensor itself. Ulysses
// (ulysses.cpp): its all-to-all's send and receive buffers, of the widest tensor it swaps (q or
// the output, a tokens Cl). Either comes beside stage 3's shard cast for the all-gather of the
// unit gathered ahead (measured), as the tp all-reduce's copy does. A pipeline stage's send on
// ranks as threads may wait beside them too (measured with pp 2 x cp 2: none in some runs, one
// in others); the estimate counts none there.
int64_t context_staging(const nn::ModelConfig& m, int64_t tokens, int64_t a, const Sharding& s,
                        const CommBackend& backend) {
  if (s.cp.size == 1) return 0;
  const int64_t kv_parts = std::min<int64_t>(m.n_kv_head, s.tp);
  const int64_t Cl = m.n_head / s.tp * m.head_size(), KVl = m.n_kv_head / kv_parts * m.head_size();
  if (s.cp.ulysses) return 2 * a * tokens * Cl;
  const int64_t waiting = backend.kind == "local" ? 2 * (s.cp.size - 1) : 0;
  return (5 + waiting) * 2 * a * tokens * KVl;
}

// Note [Buffer estimate]: the staging buffers in use at once, of which the communication
// category's peak holds the largest on top of the groups (Note [Communication estimate]): the
// strategy's casts to the reduce dtype and the compute-dtype shard of an all-gather (state_of),
// the collective guard's 1 KiB message per rank of the world (comm/collective_guard.cpp), the copy
// of an activation's gradient all-reduced over the tp group (tp_group.cpp SumGradNode, a x
// tokens x d_model; under stage 3 beside the shard cast of the unit gathered ahead, which lives
// until its gather completes), and on a pipeline's ranks as threads the buffered send of a
// micro-batch's activations or their gradient (local_group.cpp, a x tokens x d_model). A stage
// may have sent more than one micro-batch before its peer takes the first (activations
// forward; under gpipe also the last stage's gradients back; a middle stage's gradient back
// beside its activations): how many depends on the threads' timing (up to its micro-batches in
// flight), so the estimate counts one and memory_estimate_test holds the measurement between that
// and the most. Context-parallel attention's buffers: Note [Context-parallel staging].
int64_t staging_peak(const MemoryEstimateInputs& in, const Sharding& s, int64_t strategy) {
  const int64_t a = static_cast<int64_t>(dtype_size(in.compute));
  const int64_t tokens = in.spec.micro_batch_size * in.spec.seq_len / s.cp.size;
  const int64_t stream = a * tokens * in.model.d_model;
  int64_t peak = std::max<int64_t>(strategy, 1024 * in.world_size);
  const int64_t context = context_staging(in.model, tokens, a, s, in.backend);
  if (context > 0) peak = std::max(peak, context + (s.stage == 3 ? strategy : 0));
  // Under sequence parallelism the gradient of a reduce-scattered output is all-gathered into
  // the same a x tokens x d_model (tp_group.cpp ReduceScatterRowsNode), and a stage sends its
  // rows, 1 / tp of the tokens.
  if (s.tp > 1) peak = std::max(peak, stream + (s.stage == 3 ? strategy : 0));
  if (s.pp > 1 && in.backend.kind == "local") peak = std::max(peak, s.sp ? stream / s.tp : stream);
  return peak;
}

}  // namespace

namespace {

// The pipeline's virtual stages' blocks, as the runtime splits them (stage_balance.h).
std::vector<pipeline::BlockRange> partition_of(const MemoryEstimateInputs& in, const Sharding& s) {
  const int n = static_cast<int>(in.model.n_layer),
            v = std::max(1, in.spec.pipeline_virtual_stages);
  if (in.spec.pipeline_balance == "parameters") {
    std::string key = in.model.shape_key() + "|" + std::to_string(s.pp) + "|" + std::to_string(v);
    static KeyedCache<std::vector<pipeline::BlockRange>> cache;
    return cache.get(key, [&] { return pipeline::parameter_partition(in.model, s.pp, v); });
  }
  return pipeline::uniform_partition(n, s.pp, v);
}

// Rank `stage` of the pipeline (0 without one): its units' training state, and the activations
// of its chunks' micro-batches in flight (Note [Pipeline activations]).
MemoryEstimate estimate_stage(const MemoryEstimateInputs& in, const Sharding& s, int stage) {
  const int64_t micro = std::max<int64_t>(1, in.micro_batches);
  const TensorSplit tp{s.tp, s.sp};
  std::optional<nn::PipelineStage> declared;
  ActivationSpan whole;  // what the kernels run (every block the same): scratch
  std::vector<SpanActivations> chunks;
  StageActivations acts;
  bool embedding = false;  // in the embedding group (the first or last stage, when they differ)
  if (s.pp > 1) {
    const auto parts = partition_of(in, s);
    const int v = static_cast<int>(parts.size()) / s.pp;
    pipeline::ScheduleShape shape{pipeline::schedule_from_name(in.spec.pipeline_schedule), s.pp,
                                  static_cast<int>(micro), v};
    pipeline::check_schedule(shape);
    const int V = s.pp * v;
    declared = nn::PipelineStage{
        {}, pipeline::stage_of(shape, 0) == stage, pipeline::stage_of(shape, V - 1) == stage};
    embedding = declared->first != declared->last;  // one stage holding both ends: no group
    for (int c = 0; c < v; ++c) {
      const int vs = pipeline::virtual_stage(shape, stage, c);
      const pipeline::BlockRange r = parts[static_cast<size_t>(vs)];
      declared->chunks.emplace_back(r.begin, r.end);
      const ActivationSpan span{r.begin, r.end, vs == 0, vs == V - 1,
                                pipeline::has_weight_passes(shape.kind)};
      chunks.push_back(span_activations(in.model, in.spec.micro_batch_size, in.spec.seq_len,
                                        in.compute, tp, span, s.cp, in.on_device));
    }
    whole = {0, -1, declared->first, declared->last};
    acts = stage_activations(shape, stage, chunks, declared->first || declared->last);
  } else {
    acts.activations = estimate_activations(in.model, in.spec.micro_batch_size, in.spec.seq_len,
                                            in.compute, tp, s.cp, in.on_device);
  }
  // DDP pads the whole buffer to kAlign; ZeRO every unit to equal shards of the N ranks.
  const int64_t pad = s.stage == 0 ? nn::ParamLayout::kAlign : s.N * nn::ParamLayout::kAlign;
  const auto a = static_cast<int64_t>(dtype_size(in.compute));
  MemoryEstimate e = state_of(s, units_of(in.model, pad, s.tp, declared), in.spec, a,
                              in.optimizer_bytes_per_param);
  e.stage = stage;
  e.gradients += acts.input_gradients;
  e.activations = acts.activations;
  const GroupShape g{.world = in.world_size,
                     .dp = s.N,
                     .S = s.S,
                     .tp = s.tp,
                     .pp = s.pp,
                     .sharded = s.stage >= 1,
                     .gather = s.stage == 3,
                     .embedding = embedding,
                     .data_parallel = in.spec.name != "none",
                     .cp = s.cp.size};
  e.communication = group_memory(in.backend, g) + staging_peak(in, s, e.communication);
  e.scratch = estimate_scratch(in.model, in.spec.micro_batch_size, in.spec.seq_len, in.compute,
                               s.tp, whole, in.threads, s.cp);
  return e;
}

}  // namespace

MemoryEstimate estimate_memory(const MemoryEstimateInputs& in) {
  const Sharding s = shape_of(in.spec, in.world_size);
  BRAID_CHECK(in.spec.micro_batch_size >= 1, "estimate-memory: micro-batch size must be >= 1, got ",
              in.spec.micro_batch_size);
  BRAID_CHECK(in.optimizer_bytes_per_param >= 0,
              "estimate-memory: optimizer bytes per parameter must be >= 0");
  in.model.validate();
  if (s.tp > 1) in.model.validate_tensor_parallel(s.tp);
  if (s.cp.size > 1) {
    const int64_t cp = s.cp.size, split = s.cp.ulysses ? cp : 2 * cp;
    BRAID_CHECK(in.spec.seq_len % split == 0, "estimate-memory: seq_len ", in.spec.seq_len,
                " does not split over context_parallel_size ", cp,
                s.cp.ulysses ? " (ulysses: a multiple of it)" : " (ring: a multiple of 2 x it)");
    const int64_t heads = in.model.n_head / s.tp,
                  kv_heads = in.model.n_kv_head / std::min<int64_t>(in.model.n_kv_head, s.tp);
    BRAID_CHECK(!s.cp.ulysses || (heads % cp == 0 && kv_heads % cp == 0),
                "estimate-memory: context_parallel_mode ulysses splits the heads over "
                "context_parallel_size ",
                cp, ": ", heads, " query and ", kv_heads, " key/value heads per rank");
  }
  BRAID_CHECK(in.pipeline_stage < s.pp, "estimate-memory: pipeline stage ", in.pipeline_stage,
              " of ", s.pp);
  if (in.pipeline_stage >= 0) return estimate_stage(in, s, in.pipeline_stage);
  MemoryEstimate most;
  for (int stage = 0; stage < s.pp; ++stage) {
    MemoryEstimate e = estimate_stage(in, s, stage);
    if (stage == 0 || e.total() > most.total()) most = e;
  }
  return most;
}

std::vector<std::string> estimated_strategy_names() {
  return {"ddp", "zero1", "zero2", "zero3"};
}

std::vector<MemoryEstimate> estimate_training_state(int64_t params, int64_t largest_unit,
                                                    int ranks) {
  const Units u{static_cast<double>(params), 0,  0,   static_cast<double>(largest_unit),
                static_cast<double>(params), {}, true};
  std::vector<MemoryEstimate> out;
  for (const std::string& name : estimated_strategy_names()) {
    ParallelPlan spec;
    spec.name = name;
    out.push_back(state_of(shape_of(spec, std::max(ranks, 1)), u, spec, 4, 8));
    out.back().communication = 0;
  }
  return out;
}

std::string describe_estimates(const std::vector<MemoryEstimate>& estimates) {
  std::string s;
  for (const MemoryEstimate& e : estimates)
    s += (s.empty() ? "" : ", ") + e.strategy + " " + format_bytes(e.training_state());
  return s;
}

}  // namespace braid::parallel
