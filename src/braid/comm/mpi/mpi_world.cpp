// The MPI backend's entry points: the world group and the raw-MPI baseline.
#include <mpi.h>

#include "braid/comm/mpi/mpi_group.h"
#include "braid/comm/mpi/raw_mpi.h"
#include "braid/comm/world.h"
#include "braid/core/error.h"

namespace braid::comm {

bool mpi_built() {
  return true;
}

std::shared_ptr<ProcessGroup> create_mpi_world(ProcessGroupOptions options) {
  auto runtime = MpiRuntime::acquire();
  MPI_Comm comm = MPI_COMM_NULL;
  mpi_check(MPI_Comm_dup(MPI_COMM_WORLD, &comm), "MPI_Comm_dup");
  return std::make_shared<MpiGroup>(std::move(runtime), comm, std::move(options));
}

namespace {

MPI_Datatype mpi_type(DType t) {
  switch (t) {
    case DType::f32:
      return MPI_FLOAT;
    case DType::i32:
      return MPI_INT32_T;
    case DType::i64:
      return MPI_INT64_T;
    case DType::u8:
      return MPI_UINT8_T;
    default:
      break;
  }
  throw CommError(detail::concat("raw MPI has no ", dtype_name(t), " sum"));
}

class RawMpiImpl : public RawMpi {
 public:
  explicit RawMpiImpl(MPI_Comm parent) {
    mpi_check(MPI_Comm_dup(parent, &comm_), "MPI_Comm_dup");
    MPI_Comm_size(comm_, &size_);
  }
  ~RawMpiImpl() override { MPI_Comm_free(&comm_); }

  void all_reduce(Tensor& t) override {
    mpi_check(
        MPI_Allreduce(MPI_IN_PLACE, t.raw_data(), count(t), mpi_type(t.dtype()), MPI_SUM, comm_),
        "MPI_Allreduce");
  }
  void reduce_scatter(Tensor& out, const Tensor& in) override {
    BRAID_CHECK(in.numel() == out.numel() * size_, "raw reduce_scatter needs equal chunks");
    mpi_check(MPI_Reduce_scatter_block(in.raw_data(), out.raw_data(), count(out),
                                       mpi_type(in.dtype()), MPI_SUM, comm_),
              "MPI_Reduce_scatter_block");
  }
  void all_gather(Tensor& out, const Tensor& in) override {
    BRAID_CHECK(out.numel() == in.numel() * size_, "raw all_gather needs equal chunks");
    mpi_check(MPI_Allgather(in.raw_data(), bytes(in), MPI_BYTE, out.raw_data(), bytes(in), MPI_BYTE,
                            comm_),
              "MPI_Allgather");
  }
  void broadcast(Tensor& t, int root) override {
    mpi_check(MPI_Bcast(t.raw_data(), bytes(t), MPI_BYTE, root, comm_), "MPI_Bcast");
  }
  void all_to_all(Tensor& out, const Tensor& in) override {
    BRAID_CHECK(in.numel() % size_ == 0, "raw all_to_all needs equal chunks");
    int b = bytes(in) / size_;
    mpi_check(MPI_Alltoall(in.raw_data(), b, MPI_BYTE, out.raw_data(), b, MPI_BYTE, comm_),
              "MPI_Alltoall");
  }
  void barrier() override { mpi_check(MPI_Barrier(comm_), "MPI_Barrier"); }

 private:
  static int count(const Tensor& t) {
    BRAID_CHECK(t.numel() < (int64_t{1} << 31), "raw MPI count ", t.numel(), " over int");
    return static_cast<int>(t.numel());
  }
  static int bytes(const Tensor& t) {
    BRAID_CHECK(t.nbytes() < (size_t{1} << 31), "raw MPI message of ", t.nbytes(), " bytes");
    return static_cast<int>(t.nbytes());
  }
  MPI_Comm comm_ = MPI_COMM_NULL;
  int size_ = 1;
};

}  // namespace

std::unique_ptr<RawMpi> RawMpi::create(ProcessGroup& group) {
  auto* mpi = dynamic_cast<MpiGroup*>(&group);
  if (!mpi) return nullptr;
  return std::make_unique<RawMpiImpl>(mpi->comm());
}

}  // namespace braid::comm
