#include "testing/gradcheck.h"

#include <algorithm>
#include <cmath>
#include <sstream>

namespace braid::testing {
namespace {

using autograd::Variable;

// sum(out * R) in f64.
double projected(const Variable& out, const std::vector<float>& r) {
  std::vector<float> v = out.value().to_f32_vector();
  double s = 0.0;
  for (size_t i = 0; i < v.size(); ++i) s += static_cast<double>(v[i]) * r[i];
  return s;
}

}  // namespace

::testing::AssertionResult gradcheck(const GradcheckFn& f, const std::vector<Tensor>& inputs,
                                     const GradcheckOptions& options) {
  std::vector<int> checked = options.check_inputs;
  if (checked.empty())
    for (size_t i = 0; i < inputs.size(); ++i) checked.push_back(static_cast<int>(i));
  for (int i : checked)
    if (i < 0 || i >= static_cast<int>(inputs.size()) || inputs[i].dtype() != DType::f32)
      return ::testing::AssertionFailure()
             << "gradcheck: input " << i << " cannot be checked (out of range or not f32)";

  // Private copies: perturbation must not touch the caller's tensors.
  std::vector<Tensor> values;
  for (const Tensor& t : inputs) values.push_back(t.clone());
  auto is_checked = [&](int i) { return std::count(checked.begin(), checked.end(), i) > 0; };

  // Analytic.
  std::vector<Variable> vars;
  for (size_t i = 0; i < values.size(); ++i)
    vars.emplace_back(values[i], is_checked(static_cast<int>(i)), "input" + std::to_string(i));
  Variable out = f(vars);
  if (!out.requires_grad())
    return ::testing::AssertionFailure() << "gradcheck: the output does not require grad";
  Rng rng(options.seed);
  Tensor r = Tensor::randn(out.shape(), rng, 1.0f, DType::f32);
  std::vector<float> rv = r.to_f32_vector();
  Tensor dout = r.to(out.value().dtype());
  out.backward(dout);

  // Numeric, element by element, without recording.
  autograd::NoGradGuard no_grad;
  std::vector<Variable> plain;
  for (const Tensor& t : values) plain.emplace_back(t, false);
  for (int i : checked) {
    if (!vars[i].grad().defined())
      return ::testing::AssertionFailure() << "gradcheck: input " << i << " got no gradient";
    std::vector<float> analytic = vars[i].grad().to_f32_vector();
    float* x = values[i].data<float>();
    for (int64_t j = 0; j < values[i].numel(); ++j) {
      const float orig = x[j];
      x[j] = orig + static_cast<float>(options.eps);
      double hi = projected(f(plain), rv);
      x[j] = orig - static_cast<float>(options.eps);
      double lo = projected(f(plain), rv);
      x[j] = orig;
      // The actual step after f32 rounding of orig +- eps.
      double step = static_cast<double>(orig + static_cast<float>(options.eps)) -
                    static_cast<double>(orig - static_cast<float>(options.eps));
      double numeric = (hi - lo) / step;
      double a = analytic[j];
      if (!(std::fabs(a - numeric) <= options.atol + options.rtol * std::fabs(numeric))) {
        return ::testing::AssertionFailure()
               << "gradcheck: input " << i << " (shape " << values[i].shape().str() << ") element "
               << j << ": analytic " << a << ", numeric " << numeric << " (eps " << options.eps
               << ", rtol " << options.rtol << ", atol " << options.atol << ")";
      }
    }
  }
  return ::testing::AssertionSuccess();
}

}  // namespace braid::testing
