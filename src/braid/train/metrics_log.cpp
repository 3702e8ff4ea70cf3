#include "braid/train/metrics_log.h"

#include <cerrno>
#include <cmath>
#include <cstring>

#include "braid/core/error.h"

namespace braid::train {

namespace {
std::string number(double v) {
  if (!std::isfinite(v)) return "null";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.9g", v);
  return buf;
}
}  // namespace

std::string json_quote(const std::string& s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c == '\n') {
      out += "\\n";
    } else if (c < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", c);
      out += buf;
    } else {
      out += static_cast<char>(c);
    }
  }
  return out + "\"";
}

MetricsLine::MetricsLine(const std::string& kind) : text_("{\"kind\":" + json_quote(kind)) {}

MetricsLine& MetricsLine::add_json(const std::string& key, const std::string& json) {
  text_ += "," + json_quote(key) + ":" + json;
  return *this;
}

MetricsLine& MetricsLine::add(const std::string& key, double v) {
  return add_json(key, number(v));
}

MetricsLine& MetricsLine::add(const std::string& key, int64_t v) {
  return add_json(key, std::to_string(v));
}

MetricsLine& MetricsLine::add(const std::string& key, const std::string& v) {
  return add_json(key, json_quote(v));
}

MetricsLine& MetricsLine::add(const std::string& key, const std::vector<double>& v) {
  std::string list = "[";
  for (size_t i = 0; i < v.size(); ++i) list += (i ? "," : "") + number(v[i]);
  return add_json(key, list + "]");
}

MetricsLog::MetricsLog(const std::filesystem::path& path, bool append) : path_(path) {
  std::error_code ec;
  if (path.has_parent_path()) std::filesystem::create_directories(path.parent_path(), ec);
  file_ = std::fopen(path.c_str(), append ? "a" : "w");
  BRAID_CHECK(file_ != nullptr, "metrics log ", path.string(), ": ", std::strerror(errno));
}

MetricsLog::~MetricsLog() {
  if (file_) std::fclose(file_);
}

void MetricsLog::write(const MetricsLine& line) {
  const std::string text = line.str() + "\n";
  BRAID_CHECK(
      std::fwrite(text.data(), 1, text.size(), file_) == text.size() && std::fflush(file_) == 0,
      "metrics log ", path_.string(), ": ", std::strerror(errno));
}

}  // namespace braid::train
