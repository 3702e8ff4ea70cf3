#include "braid/train/svg_chart.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>

#include "braid/core/memory_tracker.h"

namespace braid::train {

namespace {

constexpr double kWidth = 760, kHeight = 300;
constexpr double kLeft = 78, kRight = 20, kTop = 34, kBottom = 46;
constexpr double kPlotW = kWidth - kLeft - kRight, kPlotH = kHeight - kTop - kBottom;

// Round tick values covering [lo, hi]: steps of 1, 2 or 5 times a power of ten.
std::vector<double> ticks(double lo, double hi) {
  const double raw = (hi - lo) / 5;
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  const double n = raw / mag;
  const double step = (n < 1.5 ? 1 : n < 3 ? 2 : n < 7 ? 5 : 10) * mag;
  std::vector<double> out;
  for (double v = std::ceil(lo / step) * step; v <= hi + step * 1e-9; v += step)
    out.push_back(std::abs(v) < step * 1e-9 ? 0 : v);
  return out;
}

struct Frame {
  double x0, x1, y0, y1;
  double px(double x) const { return kLeft + (x - x0) / (x1 - x0) * kPlotW; }
  double py(double y) const { return kTop + kPlotH - (y - y0) / (y1 - y0) * kPlotH; }
};

// The frame for the points' extent (a degenerate range widened; y padded 5%).
Frame frame_of(double xlo, double xhi, double ylo, double yhi, bool y_from_zero) {
  if (!(xhi > xlo)) xhi = xlo + 1;
  if (y_from_zero) ylo = std::min(0.0, ylo);
  if (!(yhi > ylo)) {
    yhi = ylo + (ylo == 0 ? 1 : std::abs(ylo) * 0.1);
    ylo = y_from_zero ? ylo : ylo - (yhi - ylo);
  }
  const double pad = (yhi - ylo) * 0.05;
  return {xlo, xhi, y_from_zero && ylo >= 0 ? ylo : ylo - pad, yhi + pad};
}

std::string tick_label(double v, bool bytes) {
  if (bytes) return format_bytes(static_cast<int64_t>(v));
  return fmt("%.4g", v);
}

// The frame's axes, grid, tick labels, titles; the chart's body goes after it.
std::string open_svg(const ChartAxes& a, const Frame& f) {
  std::string s = "<svg class=\"chart\" xmlns=\"http://www.w3.org/2000/svg\" width=\"" +
                  fmt("%.0f", kWidth) + "\" height=\"" + fmt("%.0f", kHeight) +
                  "\" viewBox=\"0 0 " + fmt("%.0f", kWidth) + " " + fmt("%.0f", kHeight) +
                  "\" data-title=\"" + html_escape(a.title) + "\">\n";
  s += "<text x=\"" + fmt("%.0f", kLeft) + "\" y=\"20\" class=\"title\">" + html_escape(a.title) +
       "</text>\n";
  for (double v : ticks(f.y0, f.y1)) {
    const double y = f.py(v);
    s += "<line class=\"grid\" x1=\"" + fmt("%.1f", kLeft) + "\" x2=\"" +
         fmt("%.1f", kLeft + kPlotW) + "\" y1=\"" + fmt("%.1f", y) + "\" y2=\"" + fmt("%.1f", y) +
         "\"/><text class=\"tick\" text-anchor=\"end\" x=\"" + fmt("%.1f", kLeft - 6) + "\" y=\"" +
         fmt("%.1f", y + 4) + "\">" + tick_label(v, a.y_bytes) + "</text>\n";
  }
  for (double v : ticks(f.x0, f.x1)) {
    const double x = f.px(v);
    s += "<line class=\"grid\" x1=\"" + fmt("%.1f", x) + "\" x2=\"" + fmt("%.1f", x) + "\" y1=\"" +
         fmt("%.1f", kTop) + "\" y2=\"" + fmt("%.1f", kTop + kPlotH) +
         "\"/><text class=\"tick\" text-anchor=\"middle\" x=\"" + fmt("%.1f", x) + "\" y=\"" +
         fmt("%.1f", kTop + kPlotH + 16) + "\">" + tick_label(v, false) + "</text>\n";
  }
  s += "<rect class=\"frame\" x=\"" + fmt("%.1f", kLeft) + "\" y=\"" + fmt("%.1f", kTop) +
       "\" width=\"" + fmt("%.1f", kPlotW) + "\" height=\"" + fmt("%.1f", kPlotH) + "\"/>\n";
  s += "<text class=\"label\" text-anchor=\"middle\" x=\"" + fmt("%.1f", kLeft + kPlotW / 2) +
       "\" y=\"" + fmt("%.0f", kHeight - 8) + "\">" + html_escape(a.x_label) + "</text>\n";
  s += "<text class=\"label\" text-anchor=\"middle\" transform=\"translate(16," +
       fmt("%.1f", kTop + kPlotH / 2) + ") rotate(-90)\">" + html_escape(a.y_label) + "</text>\n";
  return s;
}

std::string legend(const std::vector<std::pair<std::string, std::string>>& entries) {
  std::string s = "<div class=\"legend\">";
  for (const auto& [name, color] : entries)
    s += "<span><i style=\"background:" + color + "\"></i>" + html_escape(name) + "</span>";
  return s + "</div>";
}

std::string empty_chart(const ChartAxes& a, const std::string& why) {
  return "<figure><div class=\"empty\"><b>" + html_escape(a.title) + "</b>: " + html_escape(why) +
         "</div></figure>\n";
}

std::string points_attr(const Frame& f, const std::vector<std::pair<double, double>>& pts) {
  std::string s;
  for (const auto& [x, y] : pts) s += fmt("%.1f", f.px(x)) + "," + fmt("%.1f", f.py(y)) + " ";
  return s;
}

}  // namespace

std::string palette(size_t i) {
  static const char* colors[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd",
                                 "#8c564b", "#e377c2", "#17becf", "#7f7f7f", "#bcbd22"};
  return colors[i % (sizeof colors / sizeof *colors)];
}

std::string fmt(const char* format, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, format, v);
  return buf;
}

std::string html_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

std::string line_chart(const ChartAxes& a, const std::vector<ChartSeries>& series) {
  constexpr double inf = std::numeric_limits<double>::infinity();
  double xlo = inf, xhi = -inf, ylo = inf, yhi = -inf;
  for (const ChartSeries& s : series)
    for (const auto* pts : {&s.points, &s.lower})
      for (const auto& [x, y] : *pts) {
        if (!std::isfinite(x) || !std::isfinite(y)) continue;
        xlo = std::min(xlo, x), xhi = std::max(xhi, x);
        ylo = std::min(ylo, y), yhi = std::max(yhi, y);
      }
  if (xlo == inf) return empty_chart(a, "nothing logged");
  const Frame f = frame_of(xlo, xhi, ylo, yhi, a.y_from_zero);
  std::string s = open_svg(a, f);
  std::vector<std::pair<std::string, std::string>> keys;
  for (const ChartSeries& c : series) {
    std::vector<std::pair<double, double>> pts, low;
    for (const auto& p : c.points)
      if (std::isfinite(p.second)) pts.push_back(p);
    for (const auto& p : c.lower)
      if (std::isfinite(p.second)) low.push_back(p);
    if (pts.empty()) continue;
    if (!low.empty()) {
      std::reverse(low.begin(), low.end());
      s += "<polygon class=\"band\" fill=\"" + c.color + "\" points=\"" + points_attr(f, pts) +
           points_attr(f, low) + "\"/>\n";
    }
    s += "<polyline class=\"series\" fill=\"none\" stroke=\"" + c.color + "\"" +
         (c.dashed ? " stroke-dasharray=\"6 4\"" : "") + " points=\"" + points_attr(f, pts) +
         "\"/>\n";
    if (c.markers || pts.size() == 1)
      for (const auto& [x, y] : pts)
        s += "<circle fill=\"" + c.color + "\" r=\"3\" cx=\"" + fmt("%.1f", f.px(x)) + "\" cy=\"" +
             fmt("%.1f", f.py(y)) + "\"/>";
    keys.emplace_back(c.name, c.color);
  }
  return "<figure>" + s + "</svg>" + legend(keys) + "</figure>\n";
}

std::string stacked_chart(const ChartAxes& a, const std::vector<double>& x,
                          const std::vector<StackLayer>& layers) {
  if (x.empty() || layers.empty()) return empty_chart(a, "nothing logged");
  std::vector<double> top(x.size(), 0.0);
  for (const StackLayer& l : layers)
    for (size_t i = 0; i < x.size() && i < l.values.size(); ++i) top[i] += l.values[i];
  const Frame f = frame_of(x.front(), x.back(), 0, *std::max_element(top.begin(), top.end()),
                           /*y_from_zero=*/true);
  std::string s = open_svg(a, f);
  std::vector<double> base(x.size(), 0.0);
  std::vector<std::pair<std::string, std::string>> keys;
  for (const StackLayer& l : layers) {
    std::vector<std::pair<double, double>> upper, lower;
    for (size_t i = 0; i < x.size(); ++i) {
      const double v = i < l.values.size() ? l.values[i] : 0;
      lower.emplace_back(x[i], base[i]);
      base[i] += v;
      upper.emplace_back(x[i], base[i]);
    }
    std::reverse(lower.begin(), lower.end());
    s += "<polygon class=\"area\" fill=\"" + l.color + "\" points=\"" + points_attr(f, upper) +
         points_attr(f, lower) + "\"/>\n";
    keys.emplace_back(l.name, l.color);
  }
  return "<figure>" + s + "</svg>" + legend(keys) + "</figure>\n";
}

std::string timeline_chart(const ChartAxes& a, const std::vector<std::string>& row_names,
                           const std::vector<std::vector<TimelineBar>>& rows,
                           const std::vector<TimelineKey>& key) {
  double end = 0;
  for (const auto& r : rows)
    for (const TimelineBar& b : r) end = std::max(end, b.start + b.duration);
  if (rows.empty() || end <= 0) return empty_chart(a, "no pipeline step recorded");
  const Frame f{0, end, 0, 1};
  ChartAxes axes = a;
  std::string s = "<svg class=\"chart\" xmlns=\"http://www.w3.org/2000/svg\" width=\"" +
                  fmt("%.0f", kWidth) + "\" height=\"" + fmt("%.0f", kHeight) + "\" data-title=\"" +
                  html_escape(a.title) + "\">\n<text x=\"" + fmt("%.0f", kLeft) +
                  "\" y=\"20\" class=\"title\">" + html_escape(a.title) + "</text>\n";
  for (double v : ticks(0, end)) {
    const double x = f.px(v);
    s += "<line class=\"grid\" x1=\"" + fmt("%.1f", x) + "\" x2=\"" + fmt("%.1f", x) + "\" y1=\"" +
         fmt("%.1f", kTop) + "\" y2=\"" + fmt("%.1f", kTop + kPlotH) +
         "\"/><text class=\"tick\" text-anchor=\"middle\" x=\"" + fmt("%.1f", x) + "\" y=\"" +
         fmt("%.1f", kTop + kPlotH + 16) + "\">" + tick_label(v, false) + "</text>\n";
  }
  const double row_h = kPlotH / static_cast<double>(rows.size());
  for (size_t r = 0; r < rows.size(); ++r) {
    const double y = kTop + row_h * static_cast<double>(r);
    s += "<text class=\"tick\" text-anchor=\"end\" x=\"" + fmt("%.1f", kLeft - 6) + "\" y=\"" +
         fmt("%.1f", y + row_h / 2 + 4) + "\">" +
         html_escape(r < row_names.size() ? row_names[r] : "") + "</text>\n";
    for (const TimelineBar& b : rows[r])
      s += "<rect class=\"bar\" fill=\"" + b.color + "\" x=\"" + fmt("%.2f", f.px(b.start)) +
           "\" y=\"" + fmt("%.1f", y + 2) + "\" width=\"" +
           fmt("%.2f", std::max(0.5, b.duration / end * kPlotW)) + "\" height=\"" +
           fmt("%.1f", row_h - 4) + "\"><title>" + html_escape(b.label) + "</title></rect>";
    s += "\n";
  }
  s += "<text class=\"label\" text-anchor=\"middle\" x=\"" + fmt("%.1f", kLeft + kPlotW / 2) +
       "\" y=\"" + fmt("%.0f", kHeight - 8) + "\">" + html_escape(axes.x_label) + "</text>\n";
  std::vector<std::pair<std::string, std::string>> keys;
  for (const TimelineKey& k : key) keys.emplace_back(k.name, k.color);
  return "<figure>" + s + "</svg>" + legend(keys) + "</figure>\n";
}

}  // namespace braid::train
