// KeyedCache: results of a costly pure function kept by a string naming its inputs, shared by
// every thread (ranks as threads estimate too). Note [Unit cache] (memory_estimate.cpp) says
// why the estimator needs it: the planner asks for the same declarations and scratch replays
// thousands of times. Bounded: past `capacity` entries it starts again from empty.
#pragma once

#include <cstddef>
#include <map>
#include <mutex>
#include <string>
#include <utility>

namespace braid::parallel {

template <typename Value>
class KeyedCache {
 public:
  explicit KeyedCache(size_t capacity = size_t{1} << 16) : capacity_(capacity) {}

  // The value kept for `key`, else make()'s, kept. make() runs outside the lock.
  template <typename Make>
  Value get(const std::string& key, Make&& make) {
    {
      std::lock_guard lock(mu_);
      auto it = values_.find(key);
      if (it != values_.end()) return it->second;
    }
    Value v = std::forward<Make>(make)();
    std::lock_guard lock(mu_);
    if (values_.size() >= capacity_) values_.clear();
    values_.emplace(key, v);
    return v;
  }

 private:
  size_t capacity_;
  std::mutex mu_;
  std::map<std::string, Value> values_;
};

}  // namespace braid::parallel
