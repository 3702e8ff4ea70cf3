#include "braid/nn/model.h"

#include "braid/core/error.h"

namespace braid::nn {

void Model::materialize(bool allocate_grads, int64_t pad_multiple, DType compute, bool masters) {
  BRAID_CHECK(!flat_.defined(), "Model: the model is already materialised");
  BRAID_CHECK(!layout_.units().empty(),
              "Model: no units declared (a model calls declare_units() after declaring its "
              "parameters)");
  flat_ = FlatBuffer(layout_.with_padding(pad_multiple), allocate_grads, compute, masters);
}

FlatBuffer& Model::flat() {
  BRAID_CHECK(flat_.defined(),
              "Model: the model is not materialised in one buffer (a sharded strategy holds its "
              "parameters; gather them through the strategy)");
  return flat_;
}

const FlatBuffer& Model::flat() const {
  return const_cast<Model*>(this)->flat();
}

}  // namespace braid::nn
