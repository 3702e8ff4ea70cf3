#include "braid/train/training_device.h"

#include <cstdlib>
#include <string>

#include "braid/comm/device_group.h"
#include "braid/core/device_backend.h"
#include "braid/core/error.h"

namespace braid::train {

// Note [Training device]: with training.device other than cpu, the model, its gradients and
// optimizer state are made under a DeviceScope (so on the device), each micro-batch's token ids
// are copied there, and every step and evaluation runs under the scope; what the trainer keeps
// on the host (losses, norms, metrics, the values its collectives agree on) comes back through
// Tensor::item and the like or is made on the host. Several ranks run the data-parallel
// strategies (ddp, zero1/2/3, fsdp and its hybrids), pipeline parallelism (every schedule; its
// headers and losses travel in host tensors: Note [Pipeline metadata on the host]), tensor
// parallelism with or without sequence parallelism (the vocabulary-parallel loss merges its row
// statistics on the host: Note [Vocabulary-parallel statistics on the host]; the slices are cut
// and gathered on the host: Note [Slices on the host]), context parallelism (ring attention's
// merges and slices and Ulysses' layouts are kernels: kernels::attention_merge, copy_columns,
// set_columns; the token ids and positions are split on the host) and their mixes. Their
// collectives take the device tensors: over the device's own group where there is one (NCCL:
// device_world below, Note [Device groups]), which stages the host tensors onto the device, else
// over the trainer's host groups (threads, MPI), which stage the device tensors through host
// buffers (Note [Device staging] in comm/process_group.h).
// Checkpoints save the device shards through host copies and resume by copying them back (Note
// [Checkpoints from a device] in checkpoint/save_plan.cpp): the files are the CPU run's, so either
// loads the other's. Samples run the model on the device and read its logits on the host
// (Trainer::last_logits). Offload pages the optimizer state (and gradients, parameter shards)
// between the file's host buffers and the device (Note [Offload on a device] in
// parallel/zero/offload_store.h).
Device training_device(const config::TrainConfig& c) {
  const std::string& d = c.training.device;
  if (d == "cpu") return Device::cpu();
  const char* env = std::getenv("OMPI_COMM_WORLD_LOCAL_RANK");
  if (!env) env = std::getenv("SLURM_LOCALID");
  const int index = d == "cuda" ? (env ? std::atoi(env) : 0) : std::atoi(d.c_str() + 5);
  const Device dev{DeviceType::cuda, index};
  require_device_backend(dev);  // "braid was built without a CUDA backend" where it was
  const config::ParallelSection& p = c.parallel;
  const std::string group = comm::device_group_backend(dev.type);
  BRAID_CHECK(p.comm_backend != "nccl" || group == "nccl",
              "parallel.comm_backend: nccl, but this braid has no NCCL group for ", dev.str(),
              group.empty() ? std::string(" (built without NCCL: cmake -DBRAID_CUDA=ON where NCCL "
                                          "is installed)")
                            : " (its device group is " + group + ")",
              "; use parallel.comm_backend: host or auto");
  return dev;
}

std::shared_ptr<comm::ProcessGroup> device_world(const config::TrainConfig& c, Device device,
                                                 comm::ProcessGroup* world) {
  const std::string& want = c.parallel.comm_backend;
  if (!world || device.is_cpu() || want == "host") return nullptr;
  const std::string have = comm::device_group_backend(device.type);
  if (have.empty()) return nullptr;
  comm::ProcessGroupOptions options = world->options();
  options.name = world->name() + "/" + have;
  options.timeout = world->timeout();
  return comm::make_device_group(*world, device, options);
}

}  // namespace braid::train
