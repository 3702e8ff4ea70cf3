#include "braid/core/shard_record.h"

namespace braid {

Shape TpSlice::local_shape(const Shape& whole) const {
  if (!is_split()) return whole;
  BRAID_CHECK(dim >= 0 && dim < whole.dim(), "tensor slice: dim ", dim, " of ", whole.str());
  std::vector<int64_t> d = whole.vec();
  const int64_t padded = this->padded > 0 ? this->padded : d[static_cast<size_t>(dim)];
  BRAID_CHECK(padded % (sections * parts) == 0, "tensor slice: dim ", dim, " of ", whole.str(),
              " (padded ", padded, ") does not split into ", sections, " sections of ", parts,
              " parts");
  d[static_cast<size_t>(dim)] = padded / parts;
  return Shape(d);
}

std::string TpSlice::str() const {
  if (!is_split()) return "replicate";
  std::string s = "shard(dim=" + std::to_string(dim);
  if (sections > 1) s += ", sections=" + std::to_string(sections);
  if (padded > 0) s += ", padded=" + std::to_string(padded);
  return s + ", part " + std::to_string(part) + " of " + std::to_string(parts) + ")";
}

}  // namespace braid
