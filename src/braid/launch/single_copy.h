// Which single-copy mechanism a job's MPI uses between the ranks of a host (Note [Single copy],
// launcher.h): what `braid launch --single-copy auto` (the default) resolves to.
#pragma once

#include <string>

#include "braid/launch/launcher.h"

namespace braid::launch {

// Whether this machine lets one process read another's memory with process_vm_readv the way
// OpenMPI's vader does for "cma" (the reader allowed by the other's PR_SET_PTRACER_ANY); false
// where Yama, seccomp (containers) or missing capabilities forbid it. Forks once.
bool cma_permitted();

// o.single_copy with "auto" resolved: cma where every rank runs on this host and CMA is
// permitted, else none.
std::string resolved_single_copy(const LaunchOptions& o);

}  // namespace braid::launch
