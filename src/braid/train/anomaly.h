// Non-finite values in training (Note [Non-finite steps], Note [Anomaly detection]): finding
// where the first inf/nan of a step came from, and injecting one for tests.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "braid/nn/transformer.h"

namespace braid::train {

// Note [Anomaly detection]: with training.detect_anomaly every module's forward output and every
// trainable parameter's gradient is checked for inf/nan as it is produced (a max |x| pass over
// it), and the first one of the step is remembered: forward post hooks fire innermost module
// first, so the name is where the value appeared, not a parent that carried it on. The gradient
// check runs before any strategy hook can send the gradient to a reduction, so it sees this
// rank's own gradient. Checks stop for the rest of the step once something is found.
class AnomalyDetector {
 public:
  // Hooks every module and trainable parameter of a materialised model.
  explicit AnomalyDetector(nn::Transformer& model);
  void begin_step();
  void set_micro_step(int64_t micro_step);
  // "activation: output of 'transformer.h.1.attn' (forward, micro-step 0)"; "" when clean.
  std::string first() const;

 private:
  struct State;
  std::shared_ptr<State> state_;
};

// Makes the next forward of the model's token embedding write NaN into its output's first
// element (one rank's batch poisoned), once. Tests only (BRAID_FAULT_PLAN point "nan").
class NanInjector {
 public:
  explicit NanInjector(nn::Transformer& model);
  void arm() { *armed_ = true; }

 private:
  std::shared_ptr<bool> armed_;
};

}  // namespace braid::train
