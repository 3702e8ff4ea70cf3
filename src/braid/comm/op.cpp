#include "braid/comm/op.h"

#include <sstream>

namespace braid::comm {

std::string_view reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum:
      return "sum";
    case ReduceOp::avg:
      return "avg";
    case ReduceOp::max:
      return "max";
    case ReduceOp::min:
      return "min";
  }
  return "?";
}

std::string_view op_type_name(OpType op) {
  switch (op) {
    case OpType::none:
      return "none";
    case OpType::all_reduce:
      return "all_reduce";
    case OpType::reduce_scatter:
      return "reduce_scatter";
    case OpType::all_gather:
      return "all_gather";
    case OpType::broadcast:
      return "broadcast";
    case OpType::send:
      return "send";
    case OpType::recv:
      return "recv";
    case OpType::all_to_all:
      return "all_to_all";
    case OpType::barrier:
      return "barrier";
    case OpType::split:
      return "split";
  }
  return "?";
}

std::string Fingerprint::str() const {
  std::ostringstream os;
  auto type = static_cast<OpType>(op);
  os << op_type_name(type);
  if (type == OpType::barrier || type == OpType::none) {
    os << "()";
    return os.str();
  }
  os << "(" << dtype_name(static_cast<DType>(dtype)) << ", count " << count;
  if (type == OpType::all_reduce || type == OpType::reduce_scatter)
    os << ", " << reduce_op_name(static_cast<ReduceOp>(reduce));
  if (type == OpType::broadcast) os << ", root " << root;
  os << ")";
  return os.str();
}

Fingerprint CollectiveOp::fingerprint() const {
  Fingerprint f;
  f.op = static_cast<uint8_t>(type);
  f.seq = seq;
  if (type == OpType::barrier) return f;
  const Tensor& t = (type == OpType::all_gather || type == OpType::split) ? out : in;
  f.dtype = static_cast<uint8_t>(t.dtype());
  f.count = t.numel();
  if (type == OpType::all_reduce || type == OpType::reduce_scatter)
    f.reduce = static_cast<uint8_t>(reduce);
  if (type == OpType::broadcast) f.root = root;
  return f;
}

OpSummary CollectiveOp::summary() const {
  OpSummary s;
  s.fp = fingerprint();
  if (type == OpType::send || type == OpType::recv) {
    s.peer = root;
    s.tag = tag;
  }
  return s;
}

std::string OpSummary::str() const {
  std::ostringstream os;
  os << op_type_name(type()) << " seq " << fp.seq;
  if (type() == OpType::send || type() == OpType::recv) {
    os << " (" << dtype_name(static_cast<DType>(fp.dtype)) << ", count " << fp.count
       << (type() == OpType::send ? ", to rank " : ", from rank ") << peer << ", tag " << tag
       << ")";
    return os.str();
  }
  std::string f = fp.str();
  os << " " << f.substr(f.find('('));
  return os.str();
}

}  // namespace braid::comm
