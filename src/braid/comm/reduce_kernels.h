// Rank-ordered reductions: the one place where values from different ranks are combined.
//
// Note [Deterministic reduction]: every backend reduces element i as
//   acc = x_0[i]; acc = acc (+) x_1[i]; ... acc = acc (+) x_{n-1}[i]
// in rank order, in f32 for f32/bf16/f16 (rounded back once), in int64 for the integer types,
// then divides by n for avg. all_reduce and reduce_scatter (+ all_gather) run this same code on
// the same inputs, so they agree bit for bit, and so do the local and MPI backends.
#pragma once

#include <cstdint>

#include "braid/comm/reduce_op.h"
#include "braid/core/dtype.h"

namespace braid::comm {

// dst[i] = reduce(srcs[0][i], ..., srcs[n-1][i]); dst2 (may be null) gets the same values.
// dst or dst2 may alias a source element for element (reads happen before writes).
// `stream`: write dst with non-temporal stores (Note [Streaming stores] in the .cpp), for a large
// destination that is no source and will not be read soon; dst2 must then be null.
void reduce_ranks(const void* const* srcs, int n, void* dst, void* dst2, int64_t count, DType dtype,
                  ReduceOp op, bool stream = false);

// Ends an avg folded by sum elsewhere (a fold split over hosts, combine_of): x[i] /= ranks,
// in f32 as reduce_ranks divides, so the bits are reduce_ranks' avg.
void divide_by_ranks(float* x, int64_t count, int ranks);

}  // namespace braid::comm
