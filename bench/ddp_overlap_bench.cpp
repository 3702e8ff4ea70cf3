// DDP overlap: how much of the gradient all-reduce hides behind backward.
//
//   braid launch -n 2 --threads 1 -- build/release/bench/ddp_overlap_bench [preset] [iters]
//                                                                     [bucket_mb]
//
// Per iteration, interleaved so load changes hit all three alike:
//   compute  forward + backward with sync off (no communication)
//   comm     the all-reduce of every bucket alone (launched together, then waited)
//   step     forward + backward with DDP on, through finish_backward()
// Each timing is the slowest rank's (a synchronous step is as slow as its slowest rank).
// exposed = the time finish_backward() waited for communication inside `step`, on the rank that
// waited least: the last rank to finish backward waits only for communication, the others also
// wait for it (straggler time, not communication). hidden = comm - exposed: the communication
// that ran while backward was still computing. step - compute is the whole price of DDP per
// step (exposed communication plus the CPU the communication thread takes from backward).
// Medians over iterations; rank 0 prints.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "braid/comm/world.h"
#include "braid/core/rng.h"
#include "braid/launch/process_setup.h"
#include "braid/launch/threads.h"
#include "braid/nn/transformer.h"
#include "braid/parallel/ddp/distributed_data_parallel.h"

using namespace braid;
using Clock = std::chrono::steady_clock;

static double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}
static double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

int main(int argc, char** argv) {
  std::string preset = argc > 1 ? argv[1] : "bench-small";
  int iters = argc > 2 ? std::atoi(argv[2]) : 8;
  parallel::DdpOptions opts;
  if (argc > 3) opts.bucket_mb = std::atof(argv[3]);
  const int64_t B = 4, T = 256;  // per rank: global batch 8 on 2 ranks
  launch::tune_allocator();
  launch::apply_threads_per_rank();
  auto world = comm::init_world();
  nn::Transformer model(nn::ModelConfig::preset(preset), {.seed = 1});
  std::vector<parallel::DdpParam> params;
  for (const auto& e : model.flat().entries()) params.push_back({e.param->var, e.range.offset});
  parallel::DistributedDataParallel ddp(params, model.flat().params(), model.flat().grads(), world,
                                        opts);
  Rng rng(7 + world->rank());
  Tensor ids = Tensor::empty(Shape{B, T}, DType::i32), tgt = Tensor::empty(Shape{B, T}, DType::i32);
  for (int64_t i = 0; i < B * T; ++i) {
    ids.data<int32_t>()[i] = static_cast<int32_t>(rng.below(model.config().vocab_size));
    tgt.data<int32_t>()[i] = static_cast<int32_t>(rng.below(model.config().vocab_size));
  }
  auto fwd_bwd = [&] {
    model.zero_grad();
    model.loss(ids, tgt, static_cast<double>(B * T * world->size())).backward();
  };
  std::vector<double> compute, comm_only, step, exposed;
  for (int it = 0; it < iters + 1; ++it) {
    auto t0 = Clock::now();
    ddp.set_sync(false);
    fwd_bwd();
    double c = ms_since(t0);
    world->barrier()->wait();

    t0 = Clock::now();
    std::vector<std::shared_ptr<comm::Work>> works;
    for (const auto& b : ddp.buckets())
      works.push_back(world->all_reduce(model.flat().grads().flat_range(b.offset, b.size)));
    for (auto& w : works) w->wait();
    double m = ms_since(t0);
    world->barrier()->wait();

    t0 = Clock::now();
    ddp.set_sync(true);
    fwd_bwd();
    ddp.finish_backward();
    double s = ms_since(t0);
    // Slowest rank's timings, and the least wait (negated max).
    Tensor t = Tensor::empty(Shape{4}, DType::f32);
    float* v = t.data<float>();
    v[0] = static_cast<float>(c);
    v[1] = static_cast<float>(m);
    v[2] = static_cast<float>(s);
    v[3] = -static_cast<float>(ddp.last_step_stats().exposed_wait_ms);
    world->all_reduce(t, comm::ReduceOp::max)->wait();
    if (it == 0) continue;  // warm-up
    compute.push_back(v[0]);
    comm_only.push_back(v[1]);
    step.push_back(v[2]);
    exposed.push_back(-v[3]);
  }
  if (world->rank() == 0) {
    double c = median(compute), m = median(comm_only), s = median(step);
    double e = median(exposed), hidden = std::max(0.0, m - e);
    const auto& st = ddp.last_step_stats();
    std::printf(
        "ddp overlap: %s, %d ranks x %d thread(s), micro-batch %lld x %lld, bucket %.1f "
        "MiB: %zu buckets (%.1f MiB of gradients)\n",
        preset.c_str(), world->size(), launch::threads_per_rank(), static_cast<long long>(B),
        static_cast<long long>(T), opts.bucket_mb, ddp.buckets().size(),
        static_cast<double>(st.bytes) / 1048576.0);
    std::printf("%-30s %9s\n", "per step (median)", "ms");
    std::printf("%-30s %9.1f\n", "compute (fwd+bwd, no comm)", c);
    std::printf("%-30s %9.1f\n", "communication alone", m);
    std::printf("%-30s %9.1f\n", "DDP step (fwd+bwd+reduce)", s);
    std::printf(
        "%-30s %9.1f  (finish_backward waiting on the last rank; %lld of %zu buckets "
        "launched in backward)\n",
        "exposed communication", e, static_cast<long long>(st.buckets_launched_in_backward),
        ddp.buckets().size());
    std::printf("%-30s %9.1f  (%.0f%% of communication)\n", "hidden behind backward", hidden,
                m > 0 ? 100.0 * hidden / m : 0.0);
    std::printf("%-30s %9.1f  (step - compute: exposed + CPU taken from backward)\n",
                "DDP cost per step", s - c);
  }
  return 0;
}
