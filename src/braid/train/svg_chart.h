// Charts as inline SVG for the run report (run_report.h): line charts (series overlaid, an
// optional band between two curves), stacked areas, and a timeline of bars per row. Static
// markup: the page needs no script or network to draw them.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace braid::train {

struct ChartSeries {
  std::string name;
  std::string color;                              // CSS colour
  std::vector<std::pair<double, double>> points;  // (x, y), x increasing
  std::vector<std::pair<double, double>> lower;   // a band down to these (x, y), or empty
  bool dashed = false;
  bool markers = false;
};

struct ChartAxes {
  std::string title;
  std::string x_label;
  std::string y_label;
  bool y_from_zero = false;
  bool y_bytes = false;  // ticks as "12 MiB"
};

// Every series as a polyline over shared axes, a legend underneath. An empty chart says so.
std::string line_chart(const ChartAxes& axes, const std::vector<ChartSeries>& series);

// Layers stacked bottom to top over the same x values (each layer: name, colour, y per x).
struct StackLayer {
  std::string name;
  std::string color;
  std::vector<double> values;
};
std::string stacked_chart(const ChartAxes& axes, const std::vector<double>& x,
                          const std::vector<StackLayer>& layers);

// One row per entry of `rows` (a rank), each a list of bars (start, duration, colour, label).
struct TimelineBar {
  double start = 0;
  double duration = 0;
  std::string color;
  std::string label;
};
struct TimelineKey {
  std::string name;
  std::string color;
};
std::string timeline_chart(const ChartAxes& axes, const std::vector<std::string>& row_names,
                           const std::vector<std::vector<TimelineBar>>& rows,
                           const std::vector<TimelineKey>& key);

// The i-th colour of a fixed palette (runs, categories).
std::string palette(size_t i);
std::string html_escape(const std::string& s);
// One number through a printf format ("%.1f").
std::string fmt(const char* format, double v);

}  // namespace braid::train
