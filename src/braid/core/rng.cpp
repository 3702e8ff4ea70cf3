#include "braid/core/rng.h"

#include <cmath>

namespace braid {

namespace {
uint64_t splitmix64(uint64_t& x) {
  uint64_t z = (x += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}
uint64_t rotl(uint64_t x, int k) {
  return (x << k) | (x >> (64 - k));
}
}  // namespace

Rng::Rng(uint64_t seed) : seed_(seed) {
  uint64_t x = seed;
  for (auto& v : s_) v = splitmix64(x);
}

uint64_t Rng::next_u64() {
  uint64_t result = rotl(s_[1] * 5, 7) * 9;
  uint64_t t = s_[1] << 17;
  s_[2] ^= s_[0];
  s_[3] ^= s_[1];
  s_[1] ^= s_[2];
  s_[0] ^= s_[3];
  s_[2] ^= t;
  s_[3] = rotl(s_[3], 45);
  return result;
}

void Rng::discard(uint64_t n) {
  for (uint64_t i = 0; i < n; ++i) next_u64();
}

float Rng::uniform() {
  return static_cast<float>(next_u64() >> 40) * (1.0f / 16777216.0f);
}

float Rng::normal() {
  // Box-Muller with u1 in (0, 1] so the log is finite.
  double u1 = (static_cast<double>(next_u64() >> 11) + 1.0) * (1.0 / 9007199254740992.0);
  double u2 = static_cast<double>(next_u64() >> 11) * (1.0 / 9007199254740992.0);
  return static_cast<float>(std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2));
}

uint64_t Rng::below(uint64_t n) {
  // Lemire's multiply-shift; the tiny bias at 2^64 scale is irrelevant for sampling.
  return static_cast<uint64_t>((static_cast<unsigned __int128>(next_u64()) * n) >> 64);
}

Rng Rng::fork(uint64_t stream) const {
  uint64_t x = seed_ ^ (0xd1b54a32d192ed03ull * (stream + 1));
  return Rng(splitmix64(x));
}

}  // namespace braid
