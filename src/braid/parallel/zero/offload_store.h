// OffloadedStateStore: the optimizer's state (and, with offloaded parameters, its master
// weights) in this rank's OffloadFile, paged in unit by unit around the optimizer step
// (Note [Optimizer state], optim/state_store.h).
//
// Note [Offload pages]: a page is one unit's piece (zero_options.h): num_states x piece floats
// of state, and piece floats of master weights when those are offloaded too. The step visits
// the slices page by page; while page p is updated, page p+1 is being read and page p-1 written
// back, so three pages are in memory at most (two when the step is deferred, Note [Deferred
// step]; their staging is charged to optimizer state, parameters and gradients). Everything else of
// the optimizer's state lives only in the file. An offloaded gradient page is read with the page
// and scaled by *grad_scale (clipping, Note [Offloaded gradients], zero_runtime.cpp); it is not
// written back.
//
// Note [Offloaded compute copy]: with parameters offloaded and a compute dtype narrower than f32
// (bf16, fp16), each unit keeps its shard cast to the compute dtype in memory (2 bytes a
// parameter of the shard, a quarter of what the file holds for it), and forward and backward
// gather from that copy instead of reading the f32 shard back from the file twice a micro-batch.
// The copy is refreshed from the master weights wherever they are written (the step's pages,
// a checkpoint's load), before the unit counts as updated. With the gradient norm taken from the
// pieces as they are written (Note [Offloaded norm], zero_runtime.cpp), a step's traffic is the
// state once in and once out (masters, two moments, gradients: 16 bytes a parameter each way).
// Measured on bench-small, zero3 with both offloads, 2 ranks (26.5 MiB shard): bf16 106.0 MiB
// read and 106.0 written a step, 4.0x the shard each way; it was 179.4 MiB read (6.77x). In fp32
// the masters are what forward computes with, read from the file for each gather (152.8 MiB,
// 5.77x), but for the forward that updates them (Note [Deferred step]: 126.4 MiB, 4.77x). The copy
// is a host buffer, as the pages are (Note [Offload on a device]: a gather on a device copies it
// there).
//
// Note [Deferred step]: with f32 masters offloaded and no compute copy (fp32 training), forward
// all-gathers each unit from its f32 shard, which it read back from the file; the optimizer step
// had just written that shard there. So the store takes the step (defer_step, optim/
// state_store.h) and updates each such page just before its unit's forward needs it
// (ZeroRuntime::start_gather through DeferredPages::run), from the page's read of masters,
// state and gradient, and forward gathers from the updated masters in memory: one f32 read of
// the shard a step less (fp32 GPT-2 large, bench/offload.sh: 1.48x -> 1.23x the state's bytes). The
// update is the step's own (its learning rate, step count and clipping scale), so the bits are the
// same. Pages whose masters are in memory are updated at the step as before (their units'
// after-step exchange needs them). Nothing reads a pending page's masters, state or gradient
// before it is updated: forward updates the page it gathers, a gradient write, an export's
// gather and synchronize() update theirs first, and the next step and visit() update the rest.
// The pages read ahead in the forward's order, as in a step; a page's update waits for the last
// one's write-back (its unit's forward ran meanwhile), so forward holds two pages at once.
//
// Note [Offload on a device]: the file's pages are host buffers; the step runs where the page's
// master weights live. With the masters in memory on a device (training.device cuda, parameters
// not offloaded) a page's state and offloaded gradients are copied to that device once read (and
// scaled), handed to the optimizer there, and copied back to the host buffers before they are
// written; with the masters offloaded too, the whole step runs on the host over the buffers.
#pragma once

#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "braid/optim/optimizer.h"
#include "braid/optim/state_store.h"
#include "braid/parallel/zero/offload_file.h"

namespace braid::parallel {

// A step's pages left for forward (Note [Deferred step]), as ZeroRuntime sees them.
class DeferredPages {
 public:
  virtual bool pending(int page) const = 0;
  // Updates the page; its f32 masters as updated (at least the piece's elements).
  virtual Tensor run(int page) = 0;
  // Updates every pending page and waits for the write-backs (nothing of the step left in memory).
  virtual void run_all() = 0;

 protected:
  ~DeferredPages() = default;
};

// Test hook: whether a store may defer its steps (default true; Note [Deferred step]).
void set_deferred_step_for_testing(bool on);

struct OffloadPage {
  int64_t piece = 0;      // elements
  int param_region = -1;  // the offloaded master weights, or -1
  Tensor master;          // the master weights in memory (when not offloaded)
  Tensor compute_copy;    // offloaded masters: their compute-dtype copy in memory, or undefined
                          // (Note [Offloaded compute copy])
  int grad_region = -1;   // the offloaded reduced gradient, or -1 (then ParamSlice::grad)
};

// Where an optimizer slice lives: its page and its offset in the page's piece.
struct SlicePlace {
  std::string name;
  int64_t offset = 0;  // in the parameter (ShardRecord::offset)
  int page = 0;
  int64_t at = 0;  // in the piece
};

class OffloadedStateStore : public optim::StateStore, public DeferredPages {
 public:
  // page_done(p): every slice of page p is updated (Note [Update overlap],
  // unit_ordered_store.h). link(this) once built and link(nullptr) when going: where deferred
  // pages are run from (Note [Deferred step]).
  OffloadedStateStore(std::shared_ptr<OffloadFile> file, std::vector<OffloadPage> pages,
                      std::vector<SlicePlace> places, const float* grad_scale,
                      std::function<void(int)> page_done,
                      std::function<void(DeferredPages*)> link = nullptr);
  ~OffloadedStateStore() override;

  void attach(const std::vector<const optim::ParamSlice*>& slices, int num_states) override;
  std::vector<size_t> step_order() const override { return order_; }
  void begin_step() override;
  optim::SliceSlot acquire(size_t i) override;
  void release(size_t i) override;
  void end_step() override;
  void set_updater(std::function<void(size_t)> update) override { updater_ = std::move(update); }
  bool defer_step() override;
  void flush() override;
  bool pending(int page) const override { return pending_.at(static_cast<size_t>(page)); }
  Tensor run(int page) override;
  void run_all() override {
    flush();
    end_step();
  }
  std::vector<Tensor> resident_state(size_t i) override;
  // Page by page, read and (with write) written back before the next page is read.
  void visit(const std::function<void(size_t, optim::SliceSlot&)>& fn, bool write) override;
  std::string describe() const override;

 private:
  struct Loaded {
    int page = -1;
    Tensor state;   // [num_states x piece] (rounded up for the transfer)
    Tensor params;  // [piece] when offloaded
    Tensor grads;   // [piece] when offloaded
    // On the step's device (Note [Offload on a device]): state and grads there, or undefined.
    Tensor device_state;
    Tensor device_grads;
    bool ready = false;  // read and (gradients) scaled
    std::vector<std::shared_ptr<IoTicket>> io;
    int remaining = 0;  // trainable slices of the page not released yet
  };
  Loaded* find(int page);
  bool deferrable(int page) const;  // Note [Deferred step]
  void mark_pending();
  void load(int page);
  void wait_loaded(Loaded& l);
  void refresh_compute_copy(int page, const Tensor& params);
  void write_back(Loaded& l);
  void reap(bool wait_all);

  std::shared_ptr<OffloadFile> file_;
  std::vector<OffloadPage> pages_;
  std::vector<SlicePlace> places_;
  const float* grad_scale_;
  std::function<void(int)> page_done_;
  int num_states_ = 0;
  std::vector<int> state_region_;  // per page
  std::vector<int> page_of_;       // per slice
  std::vector<int64_t> at_;        // per slice
  std::vector<int64_t> numel_;     // per slice
  std::vector<int> trainable_;     // per page: slices with a gradient
  std::vector<int> page_order_;    // pages in step order (with trainable slices)
  std::vector<size_t> order_;
  std::deque<Loaded> loaded_;   // read or being read
  std::deque<Loaded> writing_;  // being written back
  // Note [Deferred step]
  std::function<void(DeferredPages*)> link_;
  std::function<void(size_t)> updater_;
  std::vector<std::vector<size_t>> slices_of_;  // per page, in step order
  std::vector<bool> pending_;                   // per page: this step's update not run yet
  float scale_ = 1.0f;                          // the step's *grad_scale
  Tensor updated_params_;                       // the last page run's masters
};

}  // namespace braid::parallel
