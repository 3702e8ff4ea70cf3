#include "braid/parallel/cost/stage_work.h"

#include "braid/parallel/cost/step_cost.h"
#include "braid/parallel/pipeline/schedule.h"

namespace braid::parallel::cost {

Shapes local_shapes(const nn::ModelConfig& m, int tp) {
  Shapes s;
  s.d = m.d_model;
  s.hs = m.head_size();
  s.heads = m.n_head / tp;
  s.kv_heads = std::max<int64_t>(1, m.n_kv_head / tp);
  s.h = m.d_ff / tp;
  s.vocab = (m.vocab_size + tp - 1) / tp;
  s.swiglu = m.is_llama();
  return s;
}

// Note [Framework cost]: what a step spends outside the kernels (autograd's bookkeeping, fresh
// buffers: page faults and zeroing) grows with the buffers a block makes: its outputs forward
// (norms, qkv and its split, attention, projection, adds, the MLP's) and as many gradients
// backward. Calibration measures the time per element of that count on a real block
// (calibrate.cpp), the model charges it per block.
double fresh_elements(double d, double qkv, double mlp_in, double h, double tokens) {
  return 2 * tokens * (6.0 * d + 2 * qkv + mlp_in + h);
}

namespace {

// The ops a block dispatches forward and backward (for the overhead).
constexpr double kOpsPerBlock = 40;

}  // namespace

StageWork block_work(const KernelCosts& mdl, const Shapes& s, const Layout& L, int64_t seq_len) {
  StageWork w;
  const double n = double(L.micro_batch) * seq_len / L.cp;  // this rank's tokens
  const double qkv = double(s.heads + 2 * s.kv_heads) * s.hs, attn_out = double(s.heads) * s.hs;
  const double mlp_in = s.swiglu ? 2.0 * s.h : double(s.h);
  const double qkv_f = mdl.gemm_fwd(n, qkv, s.d), proj_f = mdl.gemm_fwd(n, s.d, attn_out);
  w.gemm_f = qkv_f + proj_f + mdl.gemm_fwd(n, mlp_in, s.d) + mdl.gemm_fwd(n, s.d, s.h);
  w.gemm_b = mdl.gemm_bwd(n, qkv, s.d) + mdl.gemm_bwd(n, s.d, attn_out) +
             mdl.gemm_bwd(n, mlp_in, s.d) + mdl.gemm_bwd(n, s.d, s.h);
  w.weight = mdl.gemm(qkv, s.d, n) + mdl.gemm(s.d, attn_out, n) + mdl.gemm(mlp_in, s.d, n) +
             mdl.gemm(s.d, s.h, n);
  // A causal attention over the whole sequence shared evenly by the cp ranks (ring's zig-zag
  // blocks, Ulysses' head groups); ring merges each block's result (Note [Context-parallel
  // cost]).
  const double seqs = double(L.micro_batch) * s.heads;
  w.attn_f = mdl.attention_fwd(seqs, double(seq_len), double(s.hs)) / L.cp;
  w.attn_b = mdl.attention_bwd(seqs, double(seq_len), double(s.hs)) / L.cp;
  // Norms and residual adds on the rows this rank holds (all of them without sequence
  // parallelism); the activation on its slice of the MLP; RoPE on its heads.
  const double rows = L.sp ? n / L.tp : n;
  const std::string norm = s.swiglu ? "rmsnorm" : "layernorm";
  const std::string act = s.swiglu ? "swiglu" : "gelu";
  const double norm_f = 2 * mdl.elementwise(norm + "_fwd", rows * s.d);
  const double act_f = mdl.elementwise(act + "_fwd", n * s.h);
  double rope_f = 0, rope_b = 0;
  if (s.swiglu) {
    rope_f = mdl.elementwise("rope_fwd", n * (s.heads + s.kv_heads) * s.hs);
    rope_b = mdl.elementwise("rope_bwd", n * (s.heads + s.kv_heads) * s.hs);
  }
  // Residual adds forward; backward hands the gradient to both inputs (two axpy each).
  const double adds_f = 2 * mdl.elementwise("add", rows * s.d);
  const double adds_b = 4 * mdl.elementwise("axpy", rows * s.d);
  // GPT-2's fused qkv projection is split into q, k, v by column copies, gathered back in
  // backward.
  const double split_f = s.swiglu ? 0.0 : mdl.elementwise("copy", qkv * n);
  const double split_b = s.swiglu ? 0.0 : mdl.elementwise("add_columns", qkv * n);
  const double merges =
      L.cp > 1 && L.cp_mode == "ring" ? L.cp * mdl.f32_elementwise("axpy", n * s.heads * s.hs) : 0;
  w.mem_f = norm_f + act_f + rope_f + adds_f + split_f + merges;
  w.mem_b = 2 * mdl.elementwise(norm + "_bwd", rows * s.d) +
            mdl.elementwise(act + "_bwd", n * s.h) + rope_b + adds_b + split_b;
  if (L.checkpointing == "full") {
    w.recompute = w.gemm_f + w.attn_f + w.mem_f;
    w.gemm_b += w.gemm_f;
    w.attn_b += w.attn_f;
    w.mem_b += w.mem_f;
  } else if (L.checkpointing == "selective") {
    w.recompute = qkv_f + proj_f + w.attn_f + norm_f / 2 + rope_f;
    w.gemm_b += qkv_f + proj_f;
    w.attn_b += w.attn_f;
    w.mem_b += norm_f / 2 + rope_f;
  }
  w.overhead = mdl.overhead(kOpsPerBlock) +
               mdl.elementwise("alloc", fresh_elements(s.d, qkv, mlp_in, s.h, n));
  return w;
}

namespace {

double block_params(const nn::ModelConfig& m, const Shapes& s) {
  const double qkv = double(s.heads + 2 * s.kv_heads) * s.hs;
  double p = s.d * qkv + double(s.heads) * s.hs * s.d + (s.swiglu ? 3.0 : 2.0) * s.d * s.h;
  p += (m.has_bias() ? 4.0 : 2.0) * s.d;         // norms
  if (m.has_bias()) p += qkv + s.d + s.h + s.d;  // linear biases
  return p;
}

}  // namespace

StageParams stage_params(const nn::ModelConfig& m, const Shapes& s, int stage, int pp,
                         double blocks) {
  StageParams p;
  p.blocks = block_params(m, s) * blocks;
  const bool first = stage == 0, last = stage == pp - 1;
  const double wte = double(s.vocab) * s.d;
  if (first) p.embedding = wte + (m.is_gpt2() ? double(m.max_seq_len) * s.d : 0.0);
  // The head: tied to wte (a copy on the last stage of a pipeline), or its own matrix.
  if (last) p.head = (m.tie_word_embeddings && pp == 1 ? 0.0 : wte) + double(s.d) * 2;
  return p;
}

// Blocks per rank: n_layer / (pp v) per virtual stage, or, when they do not divide (a balanced
// split), the remainder one each to the virtual stages between the first and the last, which
// also hold the embedding and the head.
std::vector<double> stage_blocks(int64_t n_layer, int pp, int v) {
  const int vs = pp * v;
  std::vector<double> per_vs(vs, double(n_layer / vs));
  int64_t rest = n_layer % vs;
  for (int k = 1; k + 1 < vs && rest > 0; ++k, --rest) per_vs[k] += 1;
  for (int k = 0; rest > 0; k = (k + 1) % vs, --rest) per_vs[k] += 1;
  std::vector<double> per_rank(pp, 0.0);
  for (int k = 0; k < vs; ++k) per_rank[k % pp] += per_vs[k];
  return per_rank;
}

PipelineTime pipeline_time(const std::vector<StageWork>& stages, int slow, const Layout& L,
                           double S) {
  const double mb = double(L.accumulation);
  double max_c = 0, sum_c = 0;
  for (const auto& st : stages) {
    const double cs = st.forward() + st.backward();
    max_c = std::max(max_c, cs);
    sum_c += cs;
  }
  const double v = L.virtual_stages;
  // zb_h1 (Note [ZB-H1 bubble], pipeline/schedule.h): the stages' idle time is F + B - W
  // where 1F1B's is F + B + W.
  double idle = (sum_c - max_c) / v;
  if (L.schedule == "zb_h1") {
    idle = 0;
    for (int st = 0; st < L.pp; ++st) {
      if (st != slow) idle += stages[st].forward() + stages[st].backward() - 2 * stages[st].weight;
    }
  }
  // zb_v (Note [ZB-V], pipeline/schedule.h): the last stage starts after one chunk's forward
  // of each stage before it, then nothing waits; with few micro-batches one micro-batch's
  // chain through the 2 pp chunks and back (F + B of a chunk each) is the path instead.
  if (L.schedule == "zb_v") {
    // A stage's forward and input-gradient passes, F + B (backward() is B + W).
    auto f_b = [&](int st) {
      return stages[st].forward() + stages[st].backward() - stages[st].weight;
    };
    double start = 0, chain = 0;
    for (int st = 0; st < L.pp; ++st) {
      if (st != L.pp - 1) start += stages[st].forward() / 2;
      chain += f_b(st);
    }
    const double path = mb * f_b(slow) + chain - f_b(slow) / 2;
    idle = std::max(start, path - mb * max_c);
  }
  PipelineTime out;
  out.bubble = idle;
  // Note [Oversubscribed bubble]: on a CPU node with S = ranks / cores > 1, a rank idle in
  // the bubble, or on a stage with less work, lends its share of the cores to the ranks that
  // work (Note [Shared cores], pipeline/schedule.cpp): the schedule is simulated with each
  // stage's passes running up to S times faster while fewer stages work. Above m max c the
  // difference is bubble; below it the slowest stage ran faster than its share, and its parts
  // shrink by as much.
  if (S > 1) {
    const auto kind = pipeline::schedule_from_name(L.schedule);
    const bool split = pipeline::has_weight_passes(kind);
    std::vector<pipeline::PassCosts> passes;
    for (const auto& st : stages) {
      const double weight = split ? st.weight : 0;
      passes.push_back({st.forward() / v, (st.backward() - weight) / v, weight / v});
    }
    const pipeline::ScheduleShape shape{kind, L.pp, int(L.accumulation), int(v)};
    const double busy = mb * max_c;
    const double pipeline = pipeline::simulate(shape, passes, S).makespan;
    out.bubble = std::max(0.0, pipeline - busy);
    if (pipeline < busy) out.compute_scale = pipeline / busy;
  }
  return out;
}

}  // namespace braid::parallel::cost
