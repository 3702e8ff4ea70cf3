// The tp placement's element walk (Note [Placements]): for every cut (dim 0 and 1, sections,
// padding) and any range of the slice, the runs map each local element to the whole element a
// naive per-element formula gives, cover the range once, and are maximal.
#include "braid/core/shard_record.h"

#include <gtest/gtest.h>

#include <vector>

namespace braid {
namespace {

// The whole offset of local element `at` of slice s of `whole` (-1: padding), one at a time.
int64_t naive(const Shape& whole, const TpSlice& s, int64_t at) {
  const Shape local = s.local_shape(whole);
  std::vector<int64_t> idx(static_cast<size_t>(local.dim()));
  for (int i = local.dim() - 1; i >= 0; --i) {
    idx[static_cast<size_t>(i)] = at % local[i];
    at /= local[i];
  }
  const int64_t padded = s.padded > 0 ? s.padded : whole[s.dim];
  const int64_t rows = padded / s.parts, part = rows / s.sections;
  const int64_t j = idx[static_cast<size_t>(s.dim)];
  idx[static_cast<size_t>(s.dim)] = (j / part) * (padded / s.sections) + s.part * part + j % part;
  if (idx[static_cast<size_t>(s.dim)] >= whole[s.dim]) return -1;
  int64_t w = 0;
  for (int i = 0; i < whole.dim(); ++i) w = w * whole[i] + idx[static_cast<size_t>(i)];
  return w;
}

TEST(ShardRecord, RunsMapEveryLocalElementToItsWholeElement) {
  struct Cut {
    Shape whole;
    TpSlice s;
  };
  std::vector<Cut> cuts;
  for (int part = 0; part < 2; ++part) {
    cuts.push_back({Shape{6, 4}, {.dim = 0, .parts = 2, .part = part}});
    cuts.push_back({Shape{4, 6}, {.dim = 1, .parts = 2, .part = part}});
    cuts.push_back({Shape{12, 5}, {.dim = 0, .sections = 3, .parts = 2, .part = part}});
    cuts.push_back({Shape{7, 3}, {.dim = 0, .parts = 2, .part = part, .padded = 8}});  // vocab
    cuts.push_back({Shape{2, 6, 3}, {.dim = 1, .sections = 3, .parts = 2, .part = part}});
  }
  cuts.push_back({Shape{5, 3}, {}});  // whole
  for (const Cut& c : cuts) {
    const int64_t n = c.s.local_shape(c.whole).numel();
    for (int64_t begin = 0; begin < n; begin += 3) {
      for (int64_t end = begin; end <= n; end += 5) {
        std::vector<int64_t> got(static_cast<size_t>(end - begin), -2);
        int64_t last_local = begin, last_whole = -3, last_n = 0;
        for_each_run(c.whole, c.s, begin, end, [&](int64_t l, int64_t w, int64_t len) {
          EXPECT_EQ(l, last_local + last_n) << "runs in order, no gap";
          // Maximal: a run never continues the one before it in both orders.
          EXPECT_FALSE(last_n > 0 && ((w < 0 && last_whole < 0) ||
                                      (w >= 0 && last_whole >= 0 && w == last_whole + last_n)))
              << c.s.str() << " at " << l;
          for (int64_t k = 0; k < len; ++k)
            got[static_cast<size_t>(l - begin + k)] = w < 0 ? -1 : w + k;
          last_local = l;
          last_whole = w;
          last_n = len;
        });
        for (int64_t at = begin; at < end; ++at)
          ASSERT_EQ(got[static_cast<size_t>(at - begin)], naive(c.whole, c.s, at))
              << c.whole.str() << " " << c.s.str() << " element " << at;
      }
    }
  }
}

TEST(ShardRecord, LocalShapesAndNames) {
  const TpSlice qkv{.dim = 0, .sections = 3, .parts = 2, .part = 1};
  EXPECT_EQ(qkv.local_shape(Shape{12, 5}), (Shape{6, 5}));
  EXPECT_EQ(qkv.str(), "shard(dim=0, sections=3, part 1 of 2)");
  EXPECT_EQ(TpSlice{}.str(), "replicate");
  const TpSlice vocab{.dim = 0, .parts = 4, .part = 3, .padded = 52};
  EXPECT_EQ(vocab.local_shape(Shape{50, 8}), (Shape{13, 8}));
  EXPECT_TRUE(
      vocab.same_cut({.dim = 0, .parts = 4, .part = 3, .padded = 52, .counts_in_norm = false}));
  EXPECT_FALSE(vocab.same_cut({.dim = 0, .parts = 4, .part = 2, .padded = 52}));
  ShardRecord r{"w", Shape{12, 5}, qkv, 0, 30};
  EXPECT_EQ(r.local_shape(), (Shape{6, 5}));
  EXPECT_FALSE(r.is_whole());
  EXPECT_THROW((TpSlice{.dim = 0, .parts = 5}.local_shape(Shape{12, 5})), Error);
}

}  // namespace
}  // namespace braid
