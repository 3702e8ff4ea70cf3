#include "braid/parallel/cost/machine_profile.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "braid/core/error.h"

namespace braid::parallel::cost {

namespace {

using nlohmann::json;

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

// Note [Spec profiles]: a spec sheet gives peak rates and bandwidths, not braid's per-op
// costs. A hand-written profile's gemm_tflops should be what large GEMMs reach (about 70% of
// the data-sheet peak on A100/H100, as cuBLAS measures); attention runs at half that rate
// (flash attention's forward reaches about half of the GEMM rate, its backward less: 2.5x the
// forward's time); memory-bound ops move op_bytes() per element at memory_gbs (bf16 halves
// them: compute_at() leaves that to step_cost, which scales by the element size).
ComputeRates spec_rates(const json& j, const std::string& source) {
  ComputeRates r;
  auto need = [&](const char* key) {
    BRAID_CHECK(j.contains(key) && j.at(key).is_number() && j.at(key).get<double>() > 0, source,
                ": field '", key, "' must be a positive number");
    return j.at(key).get<double>();
  };
  r.ranks = j.value("ranks_per_node", 1);
  r.threads = 1;
  r.gemm_gflops_bf16 = need("gemm_tflops_bf16") * 1e3;
  r.gemm_gflops_f32 =
      j.contains("gemm_tflops_f32") ? need("gemm_tflops_f32") * 1e3 : r.gemm_gflops_bf16 / 2;
  r.gemm_half_dim = j.value("gemm_half_dim", 64.0);
  // Causal attention's forward: 2 T^2 hs multiply-adds = 4 T^2 hs / 2 flops, at half the rate.
  const double attn_flops_per_ns = r.gemm_gflops_bf16 / 2;  // GFLOP/s = flops per ns
  r.attn_fwd_a_ns = 2.0 / attn_flops_per_ns;
  r.attn_bwd_a_ns = 2.5 * r.attn_fwd_a_ns;
  r.stream_gbs = need("memory_gbs");
  r.op_overhead_us = j.value("op_overhead_us", 5.0);
  return r;
}

LinkFit link_from(const json& j, const std::string& source, const std::string& field) {
  BRAID_CHECK(j.is_object(), source, ": field '", field, "' must be an object {latency_us, gbs}");
  LinkFit f;
  f.latency_us = j.value("latency_us", -1.0);
  f.gbs = j.value("gbs", -1.0);
  BRAID_CHECK(f.latency_us >= 0 && f.gbs > 0, source, ": field '", field,
              "' needs latency_us >= 0 and gbs > 0");
  return f;
}

// One link for every collective, as a ring moves the bytes: an all-reduce 2 (g-1)/g of the
// buffer, a reduce-scatter or all-gather (g-1)/g, a broadcast or a send once (fits store the
// time for the rank's buffer, so the ring's factor goes into gbs).
TransportFits spec_fits(const LinkFit& link, int max_group) {
  TransportFits t;
  for (int g = 2; g <= std::max(2, max_group); g *= 2) {
    const double ring = double(g - 1) / g;
    t.ops["all_reduce"][g] = {link.latency_us * 2 * (g - 1), link.gbs / (2 * ring)};
    t.ops["reduce_scatter"][g] = {link.latency_us * (g - 1), link.gbs / ring};
    t.ops["all_gather"][g] = {link.latency_us * (g - 1), link.gbs / ring};
    t.ops["broadcast"][g] = {link.latency_us * std::log2(g), link.gbs};
    t.ops["send_recv"][g] = link;
  }
  return t;
}

json fits_json(const TransportFits& t) {
  json j = json::object();
  for (const auto& [op, sizes] : t.ops) {
    for (const auto& [g, f] : sizes) {
      j[op][std::to_string(g)] = {{"latency_us", f.latency_us}, {"gbs", f.gbs}};
    }
  }
  return j;
}

TransportFits fits_from(const json& j, const std::string& source, const std::string& field) {
  TransportFits t;
  BRAID_CHECK(j.is_object(), source, ": field '", field, "' must be an object");
  for (const auto& [op, sizes] : j.items()) {
    BRAID_CHECK(sizes.is_object(), source, ": field '", field, ".", op, "' must be an object");
    for (const auto& [g, f] : sizes.items()) {
      const int size = std::atoi(g.c_str());
      BRAID_CHECK(size >= 2, source, ": field '", field, ".", op, "': group size '", g,
                  "' must be a number >= 2");
      t.ops[op][size] = link_from(f, source, field + "." + op + "." + g);
    }
  }
  return t;
}

json rates_json(const ComputeRates& r) {
  return {{"ranks", r.ranks},
          {"threads", r.threads},
          {"gemm_gflops_f32", r.gemm_gflops_f32},
          {"gemm_gflops_bf16", r.gemm_gflops_bf16},
          {"gemm_half_dim", r.gemm_half_dim},
          {"attn_fwd_a_ns", r.attn_fwd_a_ns},
          {"attn_fwd_c_ns", r.attn_fwd_c_ns},
          {"attn_bwd_a_ns", r.attn_bwd_a_ns},
          {"attn_bwd_c_ns", r.attn_bwd_c_ns},
          {"attn_bf16_factor", r.attn_bf16_factor},
          {"stream_gbs", r.stream_gbs},
          {"elementwise_ns", r.elementwise_ns},
          {"op_overhead_us", r.op_overhead_us}};
}

ComputeRates rates_from(const json& j, const std::string& source, size_t i) {
  const std::string where = source + ": compute[" + std::to_string(i) + "]";
  BRAID_CHECK(j.is_object(), where, " must be an object");
  ComputeRates r;
  try {
    r.ranks = j.at("ranks").get<int>();
    r.threads = j.at("threads").get<int>();
    r.gemm_gflops_f32 = j.at("gemm_gflops_f32").get<double>();
    r.gemm_gflops_bf16 = j.at("gemm_gflops_bf16").get<double>();
    r.gemm_half_dim = j.at("gemm_half_dim").get<double>();
    r.attn_fwd_a_ns = j.at("attn_fwd_a_ns").get<double>();
    r.attn_fwd_c_ns = j.at("attn_fwd_c_ns").get<double>();
    r.attn_bwd_a_ns = j.at("attn_bwd_a_ns").get<double>();
    r.attn_bwd_c_ns = j.at("attn_bwd_c_ns").get<double>();
    r.attn_bf16_factor = j.value("attn_bf16_factor", 1.0);
    r.stream_gbs = j.at("stream_gbs").get<double>();
    r.elementwise_ns = j.value("elementwise_ns", std::map<std::string, double>{});
    r.op_overhead_us = j.value("op_overhead_us", 0.0);
  } catch (const json::exception& e) {
    BRAID_THROW(where, ": ", e.what());
  }
  return r;
}

}  // namespace

double ComputeRates::gemm_gflops(DType dtype) const {
  return dtype == DType::f32 ? gemm_gflops_f32 : gemm_gflops_bf16;
}

double LinkFit::seconds(double bytes) const {
  return latency_us * 1e-6 + (gbs > 0 ? bytes / (gbs * 1e9) : 0.0);
}

double TransportFits::seconds(const std::string& op, int size, double bytes) const {
  if (size <= 1) return 0;
  auto it = ops.find(op);
  BRAID_CHECK(it != ops.end() && !it->second.empty(), "the machine profile has no '", op, "' fit");
  const auto& sizes = it->second;
  auto exact = sizes.find(size);
  if (exact != sizes.end()) return exact->second.seconds(bytes);
  // The nearest size measured below (else above); a ring's traffic per rank grows as (g-1)/g,
  // its latency with g - 1 steps.
  auto above = sizes.lower_bound(size);
  const auto& [g, fit] = above == sizes.begin() ? *above : *std::prev(above);
  const double bytes_scale = (double(size - 1) / size) / (double(g - 1) / g);
  const double steps_scale = double(size - 1) / (g - 1);
  return fit.latency_us * 1e-6 * steps_scale + bytes * bytes_scale / (fit.gbs * 1e9);
}

ComputeRates MachineProfile::compute_at(int ranks) const {
  BRAID_CHECK(!compute.empty(), "the machine profile '", name, "' has no compute rates");
  const ComputeRates* base = &compute.front();
  for (const auto& r : compute) {
    if (r.ranks == ranks) return r;
    if (r.ranks < ranks) base = &r;
  }
  // Past the counts measured: each rank gets its share of the cores (ranks beyond the cores
  // time-slice them), against the share it had when measured.
  ComputeRates r = *base;
  if (device != "cpu") return r;  // a GPU per rank: the rate is the device's
  // A rank's share of the cores is cores / ranks, threads or time slices alike.
  const double scale = double(base->ranks) / ranks;
  r.ranks = ranks;
  r.threads = std::max(1, cores / ranks);
  r.gemm_gflops_f32 *= scale;
  r.gemm_gflops_bf16 *= scale;
  r.attn_fwd_a_ns /= scale;
  r.attn_fwd_c_ns /= scale;
  r.attn_bwd_a_ns /= scale;
  r.attn_bwd_c_ns /= scale;
  r.stream_gbs *= scale;
  for (auto& [k, ns] : r.elementwise_ns) ns /= scale;
  return r;
}

int64_t MachineProfile::rank_memory(int ranks_on_node) const {
  if (memory_per_rank > 0) return memory_per_rank;
  return node_memory / std::max(1, ranks_on_node);
}

void MachineProfile::validate() const {
  BRAID_CHECK(device == "cpu" || device == "cuda", "machine profile '", name,
              "': device must be cpu or cuda, got '", device, "'");
  BRAID_CHECK(cores >= 1, "machine profile '", name, "': cores must be >= 1");
  BRAID_CHECK(!compute.empty(), "machine profile '", name, "': no compute rates");
  for (const auto& r : compute) {
    BRAID_CHECK(r.ranks >= 1 && r.threads >= 1 && r.gemm_gflops_f32 > 0 && r.gemm_gflops_bf16 > 0 &&
                    r.stream_gbs > 0 && r.gemm_half_dim >= 0,
                "machine profile '", name, "': the rates for ", r.ranks,
                " ranks need ranks, threads, gemm_gflops and stream_gbs > 0");
  }
  BRAID_CHECK(memory_per_rank > 0 || node_memory > 0, "machine profile '", name,
              "': needs memory_per_rank or node_memory");
}

MachineProfile profile_from_json(const std::string& text, const std::string& source) {
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception& e) {
    BRAID_THROW(source, ": not JSON: ", e.what());
  }
  BRAID_CHECK(j.is_object(), source, ": a machine profile is a JSON object");
  MachineProfile p;
  p.name = j.value("name", source);
  p.device = j.value("device", "cpu");
  p.ranks_per_node = j.value("ranks_per_node", 0);
  if (j.contains("gemm_tflops_bf16")) {
    // The spec-sheet form (Note [Spec profiles]).
    p.calibrated_at = "spec sheet";
    p.cores = j.value("cores", std::max(1, p.ranks_per_node));
    BRAID_CHECK(p.ranks_per_node >= 1, source, ": field 'ranks_per_node' must be >= 1");
    BRAID_CHECK(j.contains("memory_per_rank_gib"), source,
                ": field 'memory_per_rank_gib' is required");
    p.memory_per_rank = static_cast<int64_t>(j.at("memory_per_rank_gib").get<double>() * kGiB);
    p.compute.push_back(spec_rates(j, source));
    BRAID_CHECK(j.contains("node_link"), source, ": field 'node_link' is required");
    p.node = spec_fits(link_from(j.at("node_link"), source, "node_link"), p.ranks_per_node);
    if (j.contains("network_link")) {
      p.network = spec_fits(link_from(j.at("network_link"), source, "network_link"), 1 << 16);
    }
    p.disk_read_gbs = j.value("disk_read_gbs", 0.0);
    p.disk_write_gbs = j.value("disk_write_gbs", 0.0);
    p.peak_gflops_bf16 = j.value("peak_tflops_bf16", 0.0) * 1e3;
    p.peak_gflops_f32 = j.value("peak_tflops_f32", p.peak_gflops_bf16 / 2e3) * 1e3;
    p.validate();
    return p;
  }
  try {
    p.cpu = j.value("cpu", "");
    p.cores = j.at("cores").get<int>();
    p.memory_per_rank = j.value("memory_per_rank", int64_t{0});
    p.node_memory = j.value("node_memory", int64_t{0});
    p.disk_read_gbs = j.value("disk_read_gbs", 0.0);
    p.disk_write_gbs = j.value("disk_write_gbs", 0.0);
    p.calibrated_at = j.value("calibrated_at", "");
    p.peak_gflops_bf16 = j.value("peak_gflops_bf16", 0.0);
    p.peak_gflops_f32 = j.value("peak_gflops_f32", 0.0);
  } catch (const json::exception& e) {
    BRAID_THROW(source, ": ", e.what());
  }
  BRAID_CHECK(j.contains("compute") && j.at("compute").is_array(), source,
              ": field 'compute' must be an array (or give the spec-sheet fields, "
              "gemm_tflops_bf16 and the others: docs/plan.md)");
  for (size_t i = 0; i < j.at("compute").size(); ++i) {
    p.compute.push_back(rates_from(j.at("compute")[i], source, i));
  }
  std::sort(p.compute.begin(), p.compute.end(),
            [](const ComputeRates& a, const ComputeRates& b) { return a.ranks < b.ranks; });
  if (j.contains("node")) p.node = fits_from(j.at("node"), source, "node");
  if (j.contains("network")) p.network = fits_from(j.at("network"), source, "network");
  p.validate();
  return p;
}

std::string profile_to_json(const MachineProfile& p) {
  json j = {{"name", p.name},
            {"device", p.device},
            {"cpu", p.cpu},
            {"cores", p.cores},
            {"ranks_per_node", p.ranks_per_node},
            {"memory_per_rank", p.memory_per_rank},
            {"node_memory", p.node_memory},
            {"disk_read_gbs", p.disk_read_gbs},
            {"disk_write_gbs", p.disk_write_gbs},
            {"calibrated_at", p.calibrated_at},
            {"peak_gflops_bf16", p.peak_gflops_bf16},
            {"peak_gflops_f32", p.peak_gflops_f32}};
  j["compute"] = json::array();
  for (const auto& r : p.compute) j["compute"].push_back(rates_json(r));
  j["node"] = fits_json(p.node);
  if (!p.network.empty()) j["network"] = fits_json(p.network);
  return j.dump(2) + "\n";
}

MachineProfile load_profile(const std::string& path) {
  std::ifstream in(path);
  BRAID_CHECK(in.good(), "machine profile '", path,
              "' cannot be read: make one with `braid plan --calibrate` (it writes ",
              default_profile_path(), ") or write one from a spec sheet (docs/plan.md)");
  std::stringstream ss;
  ss << in.rdbuf();
  return profile_from_json(ss.str(), path);
}

void save_profile(const MachineProfile& profile, const std::string& path) {
  namespace fs = std::filesystem;
  const fs::path p(path);
  if (p.has_parent_path()) fs::create_directories(p.parent_path());
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp);
    out << profile_to_json(profile);
    BRAID_CHECK(out.good(), "cannot write the machine profile to '", tmp, "'");
  }
  fs::rename(tmp, p);
}

std::string cpu_model_name() {
  std::ifstream in("/proc/cpuinfo");
  for (std::string line; std::getline(in, line);) {
    if (line.starts_with("model name")) {
      const auto colon = line.find(':');
      if (colon != std::string::npos) return line.substr(line.find_first_not_of(' ', colon + 1));
    }
  }
  return "";
}

std::string default_profile_path() {
  if (const char* e = std::getenv("BRAID_MACHINE_PROFILE"); e && *e) return e;
  char host[256] = "localhost";
  gethostname(host, sizeof host - 1);
  std::string dir;
  if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x) {
    dir = x;
  } else if (const char* h = std::getenv("HOME"); h && *h) {
    dir = std::string(h) + "/.cache";
  } else {
    dir = ".";
  }
  return dir + "/braid/machine-" + host + ".json";
}

double op_bytes(const std::string& c) {
  static const std::map<std::string, double> bytes = {
      {"layernorm_fwd", 8},  {"layernorm_bwd", 12}, {"rmsnorm_fwd", 8}, {"rmsnorm_bwd", 12},
      {"gelu_fwd", 8},       {"gelu_bwd", 12},      {"swiglu_fwd", 12}, {"swiglu_bwd", 20},
      {"rope_fwd", 8},       {"rope_bwd", 8},       {"add", 12},        {"embedding_fwd", 8},
      {"embedding_bwd", 12}, {"ce_fwd", 8},         {"ce_bwd", 8},      {"adamw", 28},
      {"cast", 6},           {"sum_squares", 4},    {"max_abs", 4},     {"alloc", 4},
      {"zero", 4},           {"copy", 8},           {"axpy", 12},       {"add_columns", 12}};
  auto it = bytes.find(c);
  BRAID_CHECK(it != bytes.end(), "no op class '", c, "'");
  return it->second;
}

}  // namespace braid::parallel::cost
