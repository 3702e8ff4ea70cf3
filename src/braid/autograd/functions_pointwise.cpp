// Normalisations, activations, rope and the shape/element-wise helpers.
#include "braid/autograd/function_util.h"
#include "braid/autograd/functions.h"
#include "braid/kernels/ops.h"

namespace braid::autograd {

using namespace detail;

namespace {

class LayerNormNode : public Node {
 public:
  LayerNormNode(Tensor mean, Tensor rstd) : mean_(std::move(mean)), rstd_(std::move(rstd)) {}
  const char* name() const override { return "layernorm"; }
  void backward(const Tensor& dout, const std::vector<Tensor*>& dinputs) override {
    kernels::layernorm_backward(dinputs[0], dinputs[1], dinputs[2], dout, inputs[0].value(),
                                inputs[1].value(), mean_, rstd_);
  }
  void release() override {
    mean_ = Tensor();
    rstd_ = Tensor();
  }

 private:
  Tensor mean_, rstd_;  // [N] f32
};

class RmsNormNode : public Node {
 public:
  explicit RmsNormNode(Tensor rstd) : rstd_(std::move(rstd)) {}
  const char* name() const override { return "rmsnorm"; }
  void backward(const Tensor& dout, const std::vector<Tensor*>& dinputs) override {
    kernels::rmsnorm_backward(dinputs[0], dinputs[1], dout, inputs[0].value(), inputs[1].value(),
                              rstd_);
  }
  void release() override { rstd_ = Tensor(); }

 private:
  Tensor rstd_;  // [N] f32
};

class GeluNode : public Node {
 public:
  const char* name() const override { return "gelu"; }
  void backward(const Tensor& dout, const std::vector<Tensor*>& dinputs) override {
    if (dinputs[0]) kernels::gelu_backward(*dinputs[0], dout, inputs[0].value());
  }
  bool sets_fresh_grad(size_t) const override { return true; }
  void backward_fresh(const Tensor& dout, const std::vector<Tensor*>& dinputs,
                      const std::vector<bool>& fresh) override {
    kernels::gelu_backward(*dinputs[0], dout, inputs[0].value(), /*accumulate=*/!fresh[0]);
  }
};

class SwigluNode : public Node {
 public:
  const char* name() const override { return "swiglu"; }
  void backward(const Tensor& dout, const std::vector<Tensor*>& dinputs) override {
    kernels::swiglu_backward(dinputs[0], dinputs[1], dout, inputs[0].value(), inputs[1].value());
  }
};

class RopeNode : public Node {
 public:
  RopeNode(float theta, Tensor positions) : theta_(theta), positions_(std::move(positions)) {}
  const char* name() const override { return "rope"; }
  void backward(const Tensor& dout, const std::vector<Tensor*>& dinputs) override {
    if (!dinputs[0]) return;
    if (positions_.defined()) {
      kernels::rope_backward(*dinputs[0], dout, theta_, positions_);
    } else {
      kernels::rope_backward(*dinputs[0], dout, theta_);
    }
  }
  void release() override { positions_ = Tensor(); }

 private:
  float theta_;
  Tensor positions_;  // i32 [T], or undefined: 0..T-1
};

class AddNode : public Node {
 public:
  const char* name() const override { return "add"; }
  bool first_input_gets_dout() const override { return true; }
  void backward(const Tensor& dout, const std::vector<Tensor*>& dinputs) override {
    for (Tensor* d : dinputs) pass_on(d, dout, /*set=*/false);
  }
  // A new buffer (the branch's input, its first being handed dout's) is a copy of dout.
  bool sets_fresh_grad(size_t) const override { return true; }
  void backward_fresh(const Tensor& dout, const std::vector<Tensor*>& dinputs,
                      const std::vector<bool>& fresh) override {
    for (size_t i = 0; i < dinputs.size(); ++i) pass_on(dinputs[i], dout, fresh[i]);
  }

 private:
  static void pass_on(Tensor* d, const Tensor& dout, bool set) {
    if (!d) return;
    if (set) {
      d->copy_(dout);
    } else {
      kernels::axpy(*d, dout, 1.0f);
    }
  }
};

class BiasAddNode : public Node {
 public:
  const char* name() const override { return "bias_add"; }
  void backward(const Tensor& dout, const std::vector<Tensor*>& dinputs) override {
    if (dinputs[0]) kernels::axpy(*dinputs[0], dout, 1.0f);
    if (dinputs[1]) kernels::bias_add_backward(*dinputs[1], dout);
  }
};

// Note [Reshape gradient]: the engine usually hands dout's buffer to the input
// (first_input_gets_dout), so the axpy below only runs when the input already has a buffer or is a
// leaf.
class ReshapeNode : public Node {
 public:
  const char* name() const override { return "reshape"; }
  bool first_input_gets_dout() const override { return true; }
  void backward(const Tensor& dout, const std::vector<Tensor*>& dinputs) override {
    if (!dinputs[0]) return;
    Tensor dx = dinputs[0]->view(dout.shape());
    kernels::axpy(dx, dout, 1.0f);
  }
};

class SliceLastDimNode : public Node {
 public:
  explicit SliceLastDimNode(int64_t start) : start_(start) {}
  const char* name() const override { return "slice_last_dim"; }
  void backward(const Tensor& dout, const std::vector<Tensor*>& dinputs) override {
    if (!dinputs[0]) return;
    Tensor dx = dinputs[0]->view(rows(dinputs[0]->shape()));
    kernels::add_columns(dx, dout.view(rows(dout.shape())), start_);
  }

 private:
  int64_t start_;
};

// Backward of a cast: the gradient arrives in the output's dtype and is added into the input's
// (axpy converts), so a bf16 activation can feed an f32 computation and get its gradient back.
class CastNode : public Node {
 public:
  const char* name() const override { return "cast"; }
  void backward(const Tensor& dout, const std::vector<Tensor*>& dinputs) override {
    if (dinputs[0]) kernels::axpy(*dinputs[0], dout, 1.0f);
  }
};

class ScaleNode : public Node {
 public:
  explicit ScaleNode(float alpha) : alpha_(alpha) {}
  const char* name() const override { return "scale"; }
  void backward(const Tensor& dout, const std::vector<Tensor*>& dinputs) override {
    if (dinputs[0]) kernels::axpy(*dinputs[0], dout, alpha_);
  }

 private:
  float alpha_;
};

void check_norm_args(const char* fn, const Variable& x, const Variable& w, const Variable* b) {
  check_defined(fn, "x", x);
  check_defined(fn, "w", w);
  BRAID_CHECK(x.shape().dim() >= 1 && w.shape() == Shape{x.shape()[-1]}, fn, ": weight ",
              w.shape().str(), " does not match x ", x.shape().str(), " (need w[C])");
  check_same_dtype(fn, "w", w, "x", x);
  if (b) {
    check_defined(fn, "b", *b);
    BRAID_CHECK(b->shape() == w.shape(), fn, ": bias ", b->shape().str(), " does not match x ",
                x.shape().str(), " (need b[C])");
    check_same_dtype(fn, "b", *b, "x", x);
  }
}

}  // namespace

Variable layernorm(const Variable& x, const Variable& w, const Variable& b, float eps) {
  check_norm_args("layernorm", x, w, &b);
  int64_t n = rows(x.shape())[0];
  Tensor out = activation(x.shape(), x.value().dtype());
  Tensor mean = activation(Shape{n}, DType::f32);
  Tensor rstd = activation(Shape{n}, DType::f32);
  kernels::layernorm_forward(out, mean, rstd, x.value(), w.value(), b.value(), eps);
  bool record = should_record({&x, &w, &b});
  return result(out, record, std::make_shared<LayerNormNode>(mean, rstd), {x, w, b});
}

Variable rmsnorm(const Variable& x, const Variable& w, float eps) {
  check_norm_args("rmsnorm", x, w, nullptr);
  Tensor out = activation(x.shape(), x.value().dtype());
  Tensor rstd = activation(Shape{rows(x.shape())[0]}, DType::f32);
  kernels::rmsnorm_forward(out, rstd, x.value(), w.value(), eps);
  return result(out, should_record({&x, &w}), std::make_shared<RmsNormNode>(rstd), {x, w});
}

Variable gelu(const Variable& x) {
  check_defined("gelu", "x", x);
  Tensor out = activation(x.shape(), x.value().dtype());
  kernels::gelu_forward(out, x.value());
  return result(out, should_record({&x}), std::make_shared<GeluNode>(), {x});
}

Variable swiglu(const Variable& gate, const Variable& up) {
  check_defined("swiglu", "gate", gate);
  check_defined("swiglu", "up", up);
  BRAID_CHECK(gate.shape() == up.shape(), "swiglu: gate ", gate.shape().str(), " and up ",
              up.shape().str(), " differ");
  check_same_dtype("swiglu", "up", up, "gate", gate);
  Tensor out = activation(gate.shape(), gate.value().dtype());
  kernels::swiglu_forward(out, gate.value(), up.value());
  return result(out, should_record({&gate, &up}), std::make_shared<SwigluNode>(), {gate, up});
}

Variable rope(const Variable& x, float theta, const Tensor& positions) {
  check_defined("rope", "x", x);
  BRAID_CHECK(x.shape().dim() == 4 && x.shape()[3] % 2 == 0,
              "rope: x must be [B,T,NH,HS] with "
              "even HS, got ",
              x.shape().str());
  Tensor out = activation(x.shape(), x.value().dtype());
  if (positions.defined()) {
    kernels::rope_forward(out, x.value(), theta, positions);
  } else {
    kernels::rope_forward(out, x.value(), theta);
  }
  return result(out, should_record({&x}), std::make_shared<RopeNode>(theta, positions), {x});
}

Variable add(const Variable& a, const Variable& b) {
  check_defined("add", "a", a);
  check_defined("add", "b", b);
  BRAID_CHECK(a.shape() == b.shape(), "add: a ", a.shape().str(), " and b ", b.shape().str(),
              " differ");
  check_same_dtype("add", "b", b, "a", a);
  Tensor out = activation(a.shape(), a.value().dtype());
  kernels::add_forward(out, a.value(), b.value());
  return result(out, should_record({&a, &b}), std::make_shared<AddNode>(), {a, b});
}

Variable bias_add(const Variable& x, const Variable& b) {
  check_defined("bias_add", "x", x);
  check_defined("bias_add", "b", b);
  BRAID_CHECK(b.shape().dim() == 1 && x.shape().dim() >= 1 && x.shape()[-1] == b.shape()[0],
              "bias_add: x ", x.shape().str(), " and b ", b.shape().str(),
              " do not match (need x[..., C] and b[C])");
  check_same_dtype("bias_add", "b", b, "x", x);
  Tensor out = activation(x.shape(), x.value().dtype());
  kernels::bias_add_forward(out, x.value(), b.value());
  return result(out, should_record({&x, &b}), std::make_shared<BiasAddNode>(), {x, b});
}

Variable reshape(const Variable& x, const Shape& shape) {
  check_defined("reshape", "x", x);
  BRAID_CHECK(shape.numel() == x.shape().numel(), "reshape: cannot view x ", x.shape().str(), " (",
              x.shape().numel(), " elements) as ", shape.str());
  return result(x.value().view(shape), should_record({&x}), std::make_shared<ReshapeNode>(), {x});
}

Variable slice_last_dim(const Variable& x, int64_t start, int64_t width) {
  check_defined("slice_last_dim", "x", x);
  BRAID_CHECK(x.shape().dim() >= 1 && start >= 0 && width >= 0 && start + width <= x.shape()[-1],
              "slice_last_dim: columns [", start, ", ", start + width, ") out of range for x ",
              x.shape().str());
  Tensor out = activation(with_last(x.shape(), width), x.value().dtype());
  Tensor out2 = out.view(rows(out.shape()));
  kernels::copy_columns(out2, x.value().view(rows(x.shape())), start);
  return result(out, should_record({&x}), std::make_shared<SliceLastDimNode>(start), {x});
}

Variable scale(const Variable& x, float alpha) {
  check_defined("scale", "x", x);
  Tensor out = activation(x.shape(), x.value().dtype());
  out.copy_(x.value());
  kernels::scale(out, alpha);
  return result(out, should_record({&x}), std::make_shared<ScaleNode>(alpha), {x});
}

Variable cast(const Variable& x, DType dtype) {
  check_defined("cast", "x", x);
  BRAID_CHECK(is_floating(dtype) && is_floating(x.value().dtype()),
              "cast: ", dtype_name(x.value().dtype()), " -> ", dtype_name(dtype),
              ": only f32, bf16 and f16 cast (and differentiate)");
  Tensor out = activation(x.shape(), dtype);
  kernels::cast(out, x.value());
  return result(out, should_record({&x}), std::make_shared<CastNode>(), {x});
}

}  // namespace braid::autograd
