#include "braid/train/run_report.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "braid/core/error.h"
#include "braid/core/memory_tracker.h"
#include "braid/train/svg_chart.h"

namespace braid::train {

namespace fs = std::filesystem;
using json = nlohmann::ordered_json;  // memory categories in the order logged

namespace {

double num(const json& j, const char* key, double missing) {
  auto it = j.find(key);
  return it == j.end() || !it->is_number() ? missing : it->get<double>();
}

std::string str(const json& j, const char* key) {
  auto it = j.find(key);
  return it == j.end() || !it->is_string() ? "" : it->get<std::string>();
}

double median(std::vector<double> v) {
  if (v.empty()) return NAN;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

std::string timeline_color(const std::string& kind) {
  if (kind == "forward") return "#1f77b4";
  if (kind == "backward") return "#2ca02c";
  if (kind == "weight") return "#bcbd22";  // zb_h1's weight-gradient passes
  if (kind == "optimizer") return "#9467bd";
  if (kind == "idle") return "#d62728";
  return "#ff7f0e";  // send, recv
}

std::string summary_table(const std::vector<RunMetrics>& runs) {
  std::string s =
      "<table><tr><th>run</th><th>model</th><th>layout</th><th>ranks</th><th>steps</th>"
      "<th>last loss</th><th>last val loss</th><th>tokens/s</th><th>MFU</th>"
      "<th>peak memory (rank 0)</th></tr>\n";
  for (size_t i = 0; i < runs.size(); ++i) {
    const RunMetrics& r = runs[i];
    auto cell = [](const std::string& v) { return "<td>" + html_escape(v) + "</td>"; };
    const std::string last_loss = r.steps.empty() ? "-" : fmt("%.4f", r.steps.back().loss);
    const std::string last_val = r.evals.empty() ? "-" : fmt("%.4f", r.evals.back().second);
    s += "<tr><td><i style=\"background:" + palette(i) + "\"></i>" + html_escape(r.name) + "</td>" +
         cell(r.model) + cell(r.layout) + cell(std::to_string(r.world_size)) +
         cell((r.steps.empty() ? "0" : std::to_string(r.steps.back().step)) + " / " +
              std::to_string(r.max_steps)) +
         cell(last_loss) + cell(last_val) +
         cell(r.tokens_per_s >= 0 ? fmt("%.0f", r.tokens_per_s) : "-") +
         cell(r.mfu >= 0 ? fmt("%.1f%%", r.mfu * 100) : "-") +
         cell(r.peak_tracked_bytes >= 0 ? format_bytes(r.peak_tracked_bytes) : "-") + "</tr>\n";
  }
  return s + "</table>\n";
}

// Per run, one value per logged step.
std::vector<ChartSeries> per_run(const std::vector<RunMetrics>& runs,
                                 double (*value)(const LoggedStep&)) {
  std::vector<ChartSeries> out;
  for (size_t i = 0; i < runs.size(); ++i) {
    ChartSeries s{runs[i].name, palette(i), {}, {}, false, false};
    for (const LoggedStep& st : runs[i].steps)
      s.points.emplace_back(static_cast<double>(st.step), value(st));
    out.push_back(s);
  }
  return out;
}

std::string memory_chart(const RunMetrics& r) {
  std::vector<double> x;
  std::map<std::string, std::vector<double>> by_category;
  std::vector<std::string> order;
  for (const LoggedStep& s : r.steps) x.push_back(static_cast<double>(s.step));
  for (size_t i = 0; i < r.steps.size(); ++i)
    for (const auto& [category, bytes] : r.steps[i].memory) {
      auto [it, fresh] = by_category.try_emplace(category, r.steps.size(), 0.0);
      if (fresh) order.push_back(category);
      it->second[i] = bytes;
    }
  std::vector<StackLayer> layers;
  for (const std::string& c : order) {
    const auto& v = by_category[c];
    if (*std::max_element(v.begin(), v.end()) > 0) layers.push_back({c, palette(layers.size()), v});
  }
  return stacked_chart({"Memory by category, rank 0: " + r.name, "step", "bytes", true, true}, x,
                       layers);
}

std::string spread_chart(const RunMetrics& r) {
  ChartSeries mid{"median over ranks", palette(0), {}, {}, false, false};
  ChartSeries top{"slowest rank (band: fastest to slowest)", palette(1), {}, {}, true, false};
  for (const LoggedStep& s : r.steps) {
    if (s.step_ms_ranks.empty()) continue;
    const double x = static_cast<double>(s.step);
    const auto [lo, hi] = std::minmax_element(s.step_ms_ranks.begin(), s.step_ms_ranks.end());
    mid.points.emplace_back(x, median(s.step_ms_ranks));
    top.points.emplace_back(x, *hi);
    top.lower.emplace_back(x, *lo);
  }
  return line_chart({"Step time over " + std::to_string(r.world_size) + " rank(s): " + r.name,
                     "step", "ms", true, false},
                    {top, mid});
}

std::string pipeline_chart(const RunMetrics& r) {
  std::vector<std::string> names;
  std::vector<std::vector<TimelineBar>> rows;
  for (size_t k = 0; k < r.timeline.size(); ++k) {
    names.push_back("rank " + std::to_string(k));
    std::vector<TimelineBar> bars;
    for (const LoggedEvent& e : r.timeline[k]) {
      std::string label = e.kind;
      if (e.micro >= 0) label += " micro-batch " + std::to_string(e.micro);
      if (e.chunk >= 0) label += " chunk " + std::to_string(e.chunk);
      bars.push_back({e.start_ms, e.duration_ms, timeline_color(e.kind),
                      label + fmt(", %.2f ms", e.duration_ms)});
    }
    rows.push_back(bars);
  }
  return timeline_chart(
      {"Pipeline, last step: " + r.name, "ms from the step's start", "", false, false}, names, rows,
      {{"forward", timeline_color("forward")},
       {"backward", timeline_color("backward")},
       {"weight gradients (zb_h1)", timeline_color("weight")},
       {"send / recv", timeline_color("send")},
       {"waiting for a peer", timeline_color("idle")},
       {"optimizer", timeline_color("optimizer")}});
}

constexpr const char* kStyle = R"(<style>
body { font: 14px/1.4 system-ui, sans-serif; margin: 24px; color: #222; }
h1 { font-size: 20px; } h2 { font-size: 16px; margin-top: 28px; }
table { border-collapse: collapse; } td, th { border: 1px solid #ccc; padding: 3px 8px; }
i { display: inline-block; width: 12px; height: 12px; margin-right: 6px; vertical-align: -1px; }
figure { margin: 12px 0; } .legend span { margin-right: 16px; }
svg .title { font-weight: bold; font-size: 14px; } svg .tick { font-size: 11px; fill: #555; }
svg .label { font-size: 12px; fill: #333; } svg .grid { stroke: #eee; }
svg .frame { fill: none; stroke: #999; } svg .series { stroke-width: 2; }
svg .band { opacity: 0.2; stroke: none; } svg .area { opacity: 0.85; stroke: none; }
.empty { color: #777; } #drawn { color: #999; font-size: 11px; }
</style>)";

// After layout, each chart's drawn marks (non-empty boxes) listed under the page: what a
// headless browser check reads back (report_chromium_test.sh).
constexpr const char* kCheck = R"(<script>
window.addEventListener('load', () => {
  const out = [];
  for (const svg of document.querySelectorAll('svg.chart')) {
    let marks = 0;
    for (const m of svg.querySelectorAll('polyline, polygon, rect.bar, circle')) {
      const b = m.getBBox();
      if (b.width > 0 || b.height > 0) ++marks;
    }
    out.push(svg.dataset.title + ': ' + marks + ' marks drawn');
  }
  document.getElementById('drawn').textContent = out.join('\n');
});
</script>)";

}  // namespace

RunMetrics read_run_metrics(const fs::path& run) {
  const fs::path file = fs::is_directory(run) ? run / "metrics.jsonl" : run;
  std::ifstream in(file);
  BRAID_CHECK(in, "report: cannot read ", file.string(),
              fs::exists(file) ? "" : " (no such file: was the run made by this braid?)");
  RunMetrics r;
  r.name = (fs::is_directory(run) ? run : run.parent_path()).filename().string();
  std::string line;
  for (int64_t n = 1; std::getline(in, line); ++n) {
    if (line.empty()) continue;
    json j;
    try {
      j = json::parse(line);
    } catch (const json::exception& e) {
      BRAID_THROW("report: ", file.string(), ":", n, ": not a JSON object (", e.what(), ")");
    }
    BRAID_CHECK(j.is_object() && j.contains("kind"), "report: ", file.string(), ":", n,
                ": a line without a \"kind\"");
    const std::string kind = str(j, "kind");
    if (kind == "run") {
      r.model = str(j, "model");
      r.layout = str(j, "layout");
      r.world_size = static_cast<int64_t>(num(j, "world_size", 1));
      r.max_steps = static_cast<int64_t>(num(j, "max_steps", 0));
      const int64_t start = static_cast<int64_t>(num(j, "start_step", 0));
      std::erase_if(r.steps, [&](const LoggedStep& s) { return s.step > start; });
      std::erase_if(r.evals, [&](const auto& e) { return e.first > start; });
    } else if (kind == "step") {
      LoggedStep s;
      s.step = static_cast<int64_t>(num(j, "step", 0));
      s.loss = num(j, "loss", NAN);
      s.lr = num(j, "lr", NAN);
      s.grad_norm = num(j, "grad_norm", -1);
      s.tokens_per_s = num(j, "tokens_per_s", NAN);
      s.mfu = num(j, "mfu", NAN);
      s.step_ms = num(j, "step_ms", NAN);
      s.exposed_comm_ms = num(j, "exposed_comm_ms", 0);
      s.bubble = num(j, "bubble", -1);
      if (j.contains("step_ms_ranks") && j["step_ms_ranks"].is_array())
        for (const json& v : j["step_ms_ranks"])
          if (v.is_number()) s.step_ms_ranks.push_back(v.get<double>());
      if (j.contains("memory") && j["memory"].is_object())
        for (const auto& [k, v] : j["memory"].items())
          if (v.is_number()) s.memory.emplace_back(k, v.get<double>());
      r.steps.push_back(s);
    } else if (kind == "eval") {
      r.evals.emplace_back(static_cast<int64_t>(num(j, "step", 0)), num(j, "val_loss", NAN));
    } else if (kind == "timeline") {
      r.timeline.clear();
      try {
        for (const json& rank : j.at("ranks")) {
          std::vector<LoggedEvent> events;
          for (const json& e : rank)
            events.push_back({e.at(0).get<std::string>(), e.at(1).get<int>(), e.at(2).get<int>(),
                              e.at(3).get<double>(), e.at(4).get<double>()});
          r.timeline.push_back(events);
        }
      } catch (const json::exception& e) {
        BRAID_THROW("report: ", file.string(), ":", n, ": a damaged timeline (", e.what(), ")");
      }
    } else if (kind == "end") {
      r.tokens_per_s = num(j, "tokens_per_s", -1);
      r.step_ms = num(j, "step_ms", -1);
      r.mfu = num(j, "mfu", -1);
      r.peak_tracked_bytes = static_cast<int64_t>(num(j, "peak_tracked_bytes", -1));
    }
  }
  return r;
}

std::string report_html(const std::vector<RunMetrics>& runs) {
  std::string names;
  for (const RunMetrics& r : runs) names += (names.empty() ? "" : ", ") + r.name;
  std::string h = "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>braid report: " +
                  html_escape(names) + "</title>\n" + kStyle +
                  "</head><body>\n<h1>braid report: " + html_escape(names) + "</h1>\n" +
                  summary_table(runs);
  std::vector<ChartSeries> loss = per_run(runs, [](const LoggedStep& s) { return s.loss; });
  for (size_t i = 0; i < runs.size(); ++i) {
    ChartSeries val{runs[i].name + " (validation)", palette(i), {}, {}, true, true};
    for (const auto& [step, v] : runs[i].evals) val.points.emplace_back(step, v);
    if (!val.points.empty()) loss.push_back(val);
  }
  h += "<h2>Loss</h2>\n" + line_chart({"Training and validation loss", "step", "loss"}, loss);
  h += "<h2>Speed</h2>\n" +
       line_chart({"Throughput", "step", "tokens/s", true},
                  per_run(runs, [](const LoggedStep& s) { return s.tokens_per_s; })) +
       line_chart({"Model FLOPs utilisation", "step", "% of measured GEMM peak", true},
                  per_run(runs, [](const LoggedStep& s) { return s.mfu * 100; }));
  h += "<h2>Memory</h2>\n";
  for (const RunMetrics& r : runs) h += memory_chart(r);
  h += "<h2>Step time over ranks</h2>\n";
  for (const RunMetrics& r : runs) h += spread_chart(r);
  bool any_pipeline = false;
  for (const RunMetrics& r : runs) any_pipeline |= !r.timeline.empty();
  if (any_pipeline) {
    h += "<h2>Pipeline</h2>\n";
    for (const RunMetrics& r : runs)
      if (!r.timeline.empty()) h += pipeline_chart(r);
  }
  return h + "<pre id=\"drawn\"></pre>\n" + kCheck + "\n</body></html>\n";
}

}  // namespace braid::train
