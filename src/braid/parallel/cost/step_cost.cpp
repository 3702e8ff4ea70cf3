#include "braid/parallel/cost/step_cost.h"

#include <algorithm>
#include <cmath>
#include <sstream>

#include "braid/core/error.h"
#include "braid/parallel/cost/stage_work.h"
#include "braid/parallel/pipeline/schedule.h"

namespace braid::parallel::cost {

namespace {

int data_parallel_size(const CostInputs& in) {
  return in.world / (in.layout.tp * in.layout.pp * in.layout.cp);
}

// Which transport a group of `size` ranks runs over: across hosts when its first and last rank
// are `span` or more ranks apart in the world, a node's worth.
double comm_seconds(const MachineProfile& prof, int ranks_per_node, const std::string& op, int size,
                    int64_t span, double bytes) {
  if (size <= 1 || bytes <= 0) return 0;
  const bool crosses = span >= ranks_per_node;
  if (crosses) {
    BRAID_CHECK(!prof.network.empty(), "machine profile '", prof.name,
                "' has no network fits: a layout over several hosts needs them (network_link "
                "in a spec-sheet profile)");
    return prof.network.seconds(op, size, bytes);
  }
  return prof.node.seconds(op, size, bytes);
}

}  // namespace

std::string layout_problem(const CostInputs& in) {
  const Layout& L = in.layout;
  const auto& m = in.model;
  std::ostringstream os;
  if (L.tp * L.pp * L.cp > in.world || in.world % (L.tp * L.pp * L.cp) != 0) {
    os << "tp " << L.tp << " x pp " << L.pp << " x cp " << L.cp << " does not divide the world of "
       << in.world;
  } else if (L.cp > 1 && L.cp_mode == "ring" && in.seq_len % (2 * L.cp) != 0) {
    os << "ring attention's zig-zag split needs the sequence (" << in.seq_len
       << ") to divide by 2 x cp = " << 2 * L.cp;
  } else if (L.cp > 1 && L.cp_mode == "ulysses" &&
             (in.seq_len % L.cp != 0 || (m.n_head / L.tp) % L.cp != 0 ||
              std::max<int64_t>(1, m.n_kv_head / L.tp) % L.cp != 0)) {
    os << "ulysses needs the sequence (" << in.seq_len << ") and a tp rank's query and key/value "
       << "heads to divide by cp " << L.cp;
  } else if (m.n_head % L.tp != 0) {
    os << "tp " << L.tp << " does not divide the " << m.n_head << " heads";
  } else if (m.n_kv_head % L.tp != 0 && L.tp % m.n_kv_head != 0) {
    os << "tp " << L.tp << " and the " << m.n_kv_head << " key/value heads do not divide";
  } else if (m.d_ff % L.tp != 0) {
    os << "tp " << L.tp << " does not divide the MLP width " << m.d_ff;
  } else if (L.sp && L.tp == 1) {
    os << "sequence parallelism needs tp > 1";
  } else if (L.sp && (in.seq_len / L.cp) % L.tp != 0) {
    os << "sequence parallelism needs a rank's sequence (" << in.seq_len / L.cp
       << ") to divide by tp";
  } else if (m.n_layer < L.pp * L.virtual_stages) {
    os << "pp " << L.pp << " x " << L.virtual_stages << " chunks exceeds the " << m.n_layer
       << " layers";
  } else if (!L.balanced && m.n_layer % (L.pp * L.virtual_stages) != 0) {
    os << "pp " << L.pp << " x " << L.virtual_stages << " chunks does not divide the " << m.n_layer
       << " layers (a 'balanced' split takes them unevenly)";
  } else if (L.pp > 1 && L.schedule != "gpipe" && L.schedule != "1f1b" &&
             L.schedule != "interleaved_1f1b" && L.schedule != "zb_h1" && L.schedule != "zb_v") {
    os << "unknown schedule '" << L.schedule << "'";
  } else if (L.pp > 1 && L.schedule == "zb_v" && L.virtual_stages != 2) {
    os << "zb_v takes 2 chunks per rank (its V)";
  } else if (L.pp > 1 && L.schedule != "zb_v" &&
             (L.schedule == "interleaved_1f1b") != (L.virtual_stages > 1)) {
    os << "interleaved_1f1b takes 2 or more chunks per rank, the others one";
  } else if (L.pp > 1 && pipeline::has_weight_passes(pipeline::schedule_from_name(L.schedule)) &&
             (L.strategy == "zero3" || L.strategy == "hsdp")) {
    os << L.schedule
       << " runs weight gradients after the parameters' backward, which ZeRO-3 and FSDP free";
  } else if (L.schedule == "interleaved_1f1b" && L.accumulation % L.pp != 0) {
    os << "interleaved_1f1b needs the micro-batches (" << L.accumulation
       << ") to be a multiple of pp";
  } else if (L.strategy == "none" && data_parallel_size(in) > 1) {
    os << "strategy none with " << data_parallel_size(in) << " data-parallel ranks";
  } else if (L.strategy == "hsdp" &&
             (L.shard_group < 2 || data_parallel_size(in) % L.shard_group != 0 ||
              L.shard_group >= data_parallel_size(in))) {
    os << "hsdp's shard group of " << L.shard_group << " ranks must divide the "
       << data_parallel_size(in) << " data-parallel ranks, with 2 or more groups of 2 or more";
  } else if (L.offload && (L.strategy == "none" || L.strategy == "ddp")) {
    os << "offload needs ZeRO (zero1, zero2, zero3)";
  } else if (in.seq_len > m.max_seq_len) {
    os << "sequence " << in.seq_len << " exceeds the model's " << m.max_seq_len;
  }
  return os.str();
}

std::vector<std::pair<std::string, double>> StepCost::components() const {
  return {{"gemm", gemm},
          {"attention", attention},
          {"memory-bound", memory},
          {"loss", loss},
          {"overhead", overhead},
          {"optimizer", optimizer},
          {"comm exposed", comm_exposed},
          {"pipeline bubble", bubble},
          {"offload I/O", offload}};
}

StepCost predict_step(const CostInputs& in, const MachineProfile& prof) {
  if (std::string problem = layout_problem(in); !problem.empty()) {
    BRAID_THROW("layout '", in.layout.name(), "': ", problem);
  }
  const Layout& L = in.layout;
  const auto& m = in.model;
  const int hosts = std::max(1, in.hosts);
  BRAID_CHECK(in.world % hosts == 0, "the world of ", in.world, " ranks does not split over ",
              hosts, " hosts");
  const int node_ranks = in.world / hosts;
  const ComputeRates rates = prof.compute_at(node_ranks);
  const KernelCosts mdl(rates, L.compute);
  const Shapes s = local_shapes(m, L.tp);
  const int dp = data_parallel_size(in);
  const double n = double(L.micro_batch) * in.seq_len / L.cp;  // this rank's tokens
  const double a = dtype_size(L.compute);

  // Per stage: forward and backward of one micro-batch, and the parameters held.
  const StageWork block = block_work(mdl, s, L, in.seq_len);
  const std::vector<double> blocks = stage_blocks(m.n_layer, L.pp, L.virtual_stages);
  std::vector<StageWork> stages(L.pp);
  std::vector<StageParams> params(L.pp);
  for (int st = 0; st < L.pp; ++st) {
    StageWork& w = stages[st];
    const double blocks_per_stage = blocks[st];
    w.gemm_f = block.gemm_f * blocks_per_stage;
    w.gemm_b = block.gemm_b * blocks_per_stage;
    w.attn_f = block.attn_f * blocks_per_stage;
    w.attn_b = block.attn_b * blocks_per_stage;
    w.mem_f = block.mem_f * blocks_per_stage;
    w.mem_b = block.mem_b * blocks_per_stage;
    w.recompute = block.recompute * blocks_per_stage;  // (inside the parts above)
    w.weight = block.weight * blocks_per_stage;
    w.overhead = block.overhead * blocks_per_stage;
    if (st == 0) {
      w.mem_f += mdl.elementwise("embedding_fwd", n * s.d);
      w.mem_b += mdl.elementwise("embedding_bwd", n * s.d);
    }
    if (st == L.pp - 1) {
      // Note [LM head cost]: on a CPU the forward runs one product and the backward three (the
      // logits again, dx, dweight); a device runs both in one pass of three (Note [Fused LM
      // head on a device]). Each beside its softmax per logit.
      const std::string norm = s.swiglu ? "rmsnorm" : "layernorm";
      const double product = mdl.gemm(n, double(s.vocab), double(s.d));
      const double logits = n * double(s.vocab);
      w.loss_f = product + mdl.elementwise("ce_fwd", logits);
      w.loss_b = (prof.device == "cpu" ? 3 : 2) * product + mdl.elementwise("ce_bwd", logits);
      w.weight += product;
      w.mem_f += mdl.elementwise(norm + "_fwd", n * s.d);
      w.mem_b += mdl.elementwise(norm + "_bwd", n * s.d);
    }
    params[st] = stage_params(m, s, st, L.pp, blocks_per_stage);
  }

  // The slowest stage sets the pace; its parts make the components.
  StepCost c;
  int slow = 0;
  for (int st = 1; st < L.pp; ++st) {
    if (stages[st].forward() + stages[st].backward() >
        stages[slow].forward() + stages[slow].backward()) {
      slow = st;
    }
  }
  const StageWork& w = stages[slow];
  const double mb = double(L.accumulation);
  c.gemm = mb * (w.gemm_f + w.gemm_b);
  c.attention = mb * (w.attn_f + w.attn_b);
  c.memory = mb * (w.mem_f + w.mem_b);
  c.loss = mb * (w.loss_f + w.loss_b);
  c.recompute = mb * w.recompute;
  c.overhead = mb * w.overhead;

  // Tensor parallelism: per block, two all-reduces of n d forward and two backward.
  if (L.tp > 1) {
    const double bytes = n * s.d * a;
    double per_block;
    if (L.sp) {
      per_block = 2 * (comm_seconds(prof, node_ranks, "reduce_scatter", L.tp, L.tp - 1, bytes) +
                       comm_seconds(prof, node_ranks, "all_gather", L.tp, L.tp - 1, bytes));
    } else {
      per_block = 4 * comm_seconds(prof, node_ranks, "all_reduce", L.tp, L.tp - 1, bytes);
    }
    const double loss = 3 * comm_seconds(prof, node_ranks, "all_reduce", L.tp, L.tp - 1, n * 4);
    const double tp_comm = mb * (per_block * blocks[slow] + (slow == L.pp - 1 ? loss : 0));
    c.comm_exposed += tp_comm;
    c.comm_total += tp_comm;
  }

  // Note [Context-parallel cost]: ring attention moves this rank's keys and values one hop per
  // step (cp - 1 forward, as many backward and cp gradient blocks), each behind a step's share
  // of attention; Ulysses runs four all-to-alls each way (q, k, v in, the output back), exposed,
  // priced as all-gathers of the same tensor (the same traffic). Neighbours in cp are tp apart.
  if (L.cp > 1) {
    const double kv = n * double(s.kv_heads) * s.hs * a, q = n * double(s.heads) * s.hs * a;
    double per_block = 0, total = 0;
    if (L.cp_mode == "ring") {
      const double hop = comm_seconds(prof, node_ranks, "send_recv", 2, L.tp, 2 * kv);
      const double step_f = block.attn_f / L.cp, step_b = block.attn_b / L.cp;
      per_block = (L.cp - 1) * (std::max(0.0, hop - step_f) + std::max(0.0, hop - step_b)) + hop;
      total = (3.0 * L.cp - 2) * hop;
    } else {
      auto a2a = [&](double bytes) {
        return comm_seconds(prof, node_ranks, "all_gather", L.cp, (L.cp - 1) * L.tp, bytes);
      };
      per_block = 2 * (2 * a2a(q) + 2 * a2a(kv));
      total = per_block;
    }
    c.comm_exposed += mb * per_block * blocks[slow];
    c.comm_total += mb * total * blocks[slow];
  }

  // The pipeline: the schedule's makespan over the stages (Note [Step-time model]).
  if (L.pp > 1) {
    const double S = prof.device == "cpu" ? double(node_ranks) / prof.cores : 1.0;
    const PipelineTime pt = pipeline_time(stages, slow, L, S);
    c.bubble = pt.bubble;
    for (double* part : {&c.gemm, &c.attention, &c.memory, &c.loss, &c.recompute, &c.overhead})
      *part *= pt.compute_scale;
    const double v = L.virtual_stages;
    // Activations forward and their gradients back, per micro-batch and chunk boundary.
    const double act_bytes = (L.sp ? n / L.tp : n) * s.d * a;
    const double p2p = comm_seconds(prof, node_ranks, "send_recv", 2, L.tp * L.cp, act_bytes);
    c.comm_exposed += 2 * mb * v * p2p;
    c.comm_total += 2 * mb * v * p2p;
    if (m.tie_word_embeddings && L.schedule != "zb_v") {  // zb_v: one stage holds both ends
      const double tied = comm_seconds(prof, node_ranks, "all_reduce", 2, L.tp * L.cp * (L.pp - 1),
                                       double(s.vocab) * s.d * 4);
      c.comm_exposed += tied;
      c.comm_total += tied;
    }
  }

  // Data parallelism over dp ranks, L.tp x L.cp x L.pp apart; the cp ranks of a batch join its
  // reduction and sharding (shards = dp x cp ranks, tp apart within a cp group).
  const double P = params[slow].total();
  const double grad_bytes = 4 * P;
  const int shards = dp * L.cp;
  const int64_t dp_stride = int64_t(L.tp) * L.cp * L.pp;
  const int64_t shards_span = (dp - 1) * dp_stride + (L.cp - 1) * L.tp;
  auto dp_comm = [&](const std::string& op, double bytes) {
    return comm_seconds(prof, node_ranks, op, shards, shards_span, bytes);
  };
  const double last_backward = w.backward();
  const double compute_step = c.gemm + c.attention + c.memory + c.loss + c.overhead;
  // Note [CPU network overlap]: on CPU nodes a collective across hosts runs its copies and the
  // network stack on the cores that compute, so none of it hides behind backward or the next
  // units' compute. Measured on 2 network-namespace hosts (bench/plan_accuracy.sh HOSTS=2):
  // ZeRO-3's gathers of the llama shape left 166 ms of 228 exposed where overlap predicted 6,
  // DDP's all-reduce about its whole time. Inside a node the overlap holds while every rank has
  // a core; with more ranks than cores (Note [Oversubscribed bubble]) there is no idle core for
  // the communication threads either, and the members of a collective run in turns: on 4 ranks
  // of 2 cores the data-parallel collectives left 48-181 ms exposed where overlap predicted 2-21
  // (bench/plan_accuracy.sh, 4 ranks), so there they are charged whole too.
  const bool oversubscribed = prof.device == "cpu" && node_ranks > prof.cores;
  auto hidden_off = [&](int64_t span) {
    return prof.device == "cpu" && (span >= node_ranks || oversubscribed);
  };
  const bool sharded = L.strategy == "zero1" || L.strategy == "zero2" || L.strategy == "zero3" ||
                       L.strategy == "hsdp";
  if (shards > 1) {
    const double bucket = std::min(grad_bytes, 25.0 * (1 << 20));
    if (L.strategy == "ddp" || L.strategy == "none") {  // none: over the cp ranks alone
      const double total = dp_comm("all_reduce", grad_bytes);
      const double last = dp_comm("all_reduce", bucket);
      c.comm_total += total;
      c.comm_exposed +=
          hidden_off(shards_span) ? total : last + std::max(0.0, total - last - last_backward);
    } else if (L.strategy == "zero1" || L.strategy == "zero2") {
      const double rs = dp_comm("reduce_scatter", grad_bytes);
      const double ag = dp_comm("all_gather", L.compute == DType::f32 ? 4 * P : a * P);
      const double rs_per_step = L.strategy == "zero2" && L.pp == 1 ? mb * rs : rs;
      c.comm_total += rs_per_step + ag;
      if (L.strategy == "zero2" && !hidden_off(shards_span)) {
        const double last = dp_comm("reduce_scatter", bucket);
        c.comm_exposed += last + std::max(0.0, rs_per_step - last - mb * last_backward) + ag;
      } else {
        c.comm_exposed += rs_per_step + ag;
      }
    } else {  // zero3, hsdp: gathers per micro-batch, prefetched
      const int gather_group = L.strategy == "hsdp" ? L.shard_group : shards;
      const int64_t g_span = gather_group == shards ? shards_span : (gather_group - 1) * dp_stride;
      auto g_comm = [&](const std::string& op, double bytes) {
        return comm_seconds(prof, node_ranks, op, std::max(1, gather_group), g_span, bytes);
      };
      const double gathers = mb * 2 * g_comm("all_gather", a * P);
      const double rs = (L.pp == 1 ? mb : 1.0) * g_comm("reduce_scatter", grad_bytes);
      double total = gathers + rs;
      if (L.strategy == "hsdp" && gather_group < shards) {
        total += dp_comm("all_reduce", grad_bytes / gather_group);
      }
      const double first_unit = g_comm("all_gather", a * P / std::max(1.0, blocks[slow]));
      c.comm_total += total;
      c.comm_exposed += hidden_off(g_span)
                            ? total
                            : first_unit + std::max(0.0, total - first_unit - compute_step);
    }
  }

  // The optimizer: AdamW over this rank's share, the gradient norm, zeroing, casts.
  const double opt_elems = sharded ? P / shards : P;
  const double grad_elems =
      (L.strategy == "zero2" || L.strategy == "zero3" || L.strategy == "hsdp") ? P / shards : P;
  c.optimizer =
      mdl.f32_elementwise("adamw", opt_elems) + mdl.f32_elementwise("sum_squares", grad_elems) +
      mdl.f32_elementwise("max_abs", grad_elems) + mdl.f32_elementwise("zero", grad_elems);
  if (L.compute != DType::f32) c.optimizer += mdl.f32_elementwise("cast", P);

  // Offload (Note [Offload pages]): the optimizer's masters and two moments of its share are read
  // and written back once a step; under zero2/3 the reduced gradient shard is written to the
  // file in backward and read with its page. Reads of the next page run while the last one is
  // written back, so the two directions overlap: the slower one is the step's. ZeRO-3's
  // offloaded f32 parameters are read again for each micro-batch's backward and each forward but
  // the first, which gathers from the masters its page's deferred update leaves in memory (Note
  // [Deferred step]); in a narrower compute dtype all gather from the shard's copy in memory
  // (Note [Offloaded compute copy], offload_store.h).
  if (L.offload) {
    BRAID_CHECK(prof.disk_read_gbs > 0 && prof.disk_write_gbs > 0, "machine profile '", prof.name,
                "' has no disk bandwidth (disk_read_gbs, disk_write_gbs) for offload");
    const bool grads = L.strategy == "zero2" || L.strategy == "zero3" || L.strategy == "hsdp";
    const double state = 12 * opt_elems + (grads ? 4 * grad_elems : 0);
    const bool param_reads = L.strategy == "zero3" && L.compute == DType::f32;
    const double reads = state + (param_reads ? (2 * mb - 1) * 4 * P / shards : 0);
    // The node's ranks share its disk, each with a file of its own, and the profile's rates are
    // one process's: on the project's VM two processes moving 2 GB each at once took 2.7x as
    // long to read and 2.5-3.2x as long to write as one alone (bench/offload_bench).
    c.offload = node_ranks *
                std::max(reads / (prof.disk_read_gbs * 1e9), state / (prof.disk_write_gbs * 1e9));
  }

  c.step = compute_step + c.optimizer + c.comm_exposed + c.bubble + c.offload;
  const double tokens = double(in.seq_len) * L.micro_batch * L.accumulation * dp;
  c.tokens_per_s = tokens / c.step;
  const double sheet = L.compute == DType::f32 ? prof.peak_gflops_f32 : prof.peak_gflops_bf16;
  c.peak_gflops = sheet > 0 ? sheet : rates.gemm_gflops(L.compute);
  c.mfu = m.flops_per_token(in.seq_len) * c.tokens_per_s / (in.world * c.peak_gflops * 1e9);
  return c;
}

}  // namespace braid::parallel::cost
