// Rng: a seeded, per-object generator (xoshiro256**, seeded through splitmix64). No global
// generator exists; whoever needs randomness owns or is handed an Rng. Its state can be saved
// and restored so resumed runs continue the same stream.
#pragma once

#include <array>
#include <cstdint>

namespace braid {

class Rng {
 public:
  explicit Rng(uint64_t seed = 0);

  uint64_t next_u64();
  void discard(uint64_t n);         // n draws of next_u64, thrown away
  float uniform();                  // [0, 1)
  float normal();                   // standard normal (Box-Muller)
  uint64_t below(uint64_t n);       // uniform integer in [0, n)
  Rng fork(uint64_t stream) const;  // an independent generator derived from this one's seed

  struct State {
    std::array<uint64_t, 4> s;
    uint64_t seed;
  };
  State state() const { return {s_, seed_}; }
  void set_state(const State& st) {
    s_ = st.s;
    seed_ = st.seed;
  }

 private:
  std::array<uint64_t, 4> s_{};
  uint64_t seed_ = 0;
};

}  // namespace braid
