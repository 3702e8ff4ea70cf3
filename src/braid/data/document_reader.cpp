#include "braid/data/document_reader.h"

#include <cstring>
#include <nlohmann/json.hpp>
#include <vector>

#include "braid/core/error.h"

namespace braid::data {

namespace {

using nlohmann::json;

constexpr size_t kReadBytes = size_t{1} << 20;

bool ends_with(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

// JSON's whitespace: a line of only these is blank.
bool is_json_space(char c) {
  return c == ' ' || c == '\t' || c == '\r' || c == '\n';
}

bool is_blank(std::string_view line) {
  for (char c : line) {
    if (!is_json_space(c)) return false;
  }
  return true;
}

// Note [One field by SAX]: a JSONL line is parsed by events, keeping only the top-level
// object's `field` (moved out of the parser, not copied) and the names of its other keys for
// the error message, so a line's metadata (urls, scores, nested objects) is validated but
// never built into a DOM.
class FieldSax : public nlohmann::json_sax<json> {
 public:
  FieldSax(std::string_view field, std::string& out) : field_(field), out_(out) {}

  bool null() override { return scalar("null"); }
  bool boolean(bool) override { return scalar("a boolean"); }
  bool number_integer(number_integer_t) override { return scalar("a number"); }
  bool number_unsigned(number_unsigned_t) override { return scalar("a number"); }
  bool number_float(number_float_t, const string_t&) override { return scalar("a number"); }
  bool binary(binary_t&) override { return scalar("binary data"); }
  bool string(string_t& s) override {
    if (depth_ == 1 && at_field_) out_ = std::move(s);
    return scalar("a string");
  }
  bool start_object(std::size_t) override { return open("an object"); }
  bool start_array(std::size_t) override { return open("an array"); }
  bool end_object() override { return close(); }
  bool end_array() override { return close(); }
  bool key(string_t& k) override {
    if (depth_ == 1) {
      at_field_ = k == field_;
      if (keys_.size() < kKeysNamed) {
        keys_.push_back(k);
      } else {
        more_keys_ = true;
      }
    }
    return true;
  }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception& e) override {
    std::string msg = e.what();
    if (auto p = msg.find("] "); p != std::string::npos) msg = msg.substr(p + 2);
    if (msg.rfind("parse error at line 1, ", 0) == 0) {
      msg = "at " + msg.substr(std::strlen("parse error at line 1, "));
    } else {
      msg = "(" + msg + ")";
    }
    error_ = "invalid JSON " + msg;
    return false;
  }

  const std::string& error() const { return error_; }
  const char* top() const { return top_; }
  const char* found() const { return found_; }
  // The top-level keys, the first kKeysNamed of them; more_keys: there were others.
  const std::vector<std::string>& keys() const { return keys_; }
  bool more_keys() const { return more_keys_; }
  static constexpr size_t kKeysNamed = 8;

 private:
  bool scalar(const char* what) {
    if (depth_ == 0) top_ = what;
    if (depth_ == 1 && at_field_) found_ = what;
    at_field_ = at_field_ && depth_ != 1;
    return true;
  }
  bool open(const char* what) {
    scalar(what);
    ++depth_;
    return true;
  }
  bool close() {
    --depth_;
    return true;
  }

  std::string_view field_;
  std::string& out_;
  int depth_ = 0;
  bool at_field_ = false;        // the last top-level key read was field_
  const char* top_ = nullptr;    // what the line holds
  const char* found_ = nullptr;  // what field_ holds (the last one, if repeated, as json::parse)
  std::vector<std::string> keys_;
  bool more_keys_ = false;
  std::string error_;
};

}  // namespace

DocumentFormat document_format_of(std::string_view path) {
  return ends_with(strip_compression(path), ".jsonl") ? DocumentFormat::jsonl
                                                      : DocumentFormat::text;
}

DocumentReader::DocumentReader(const std::string& path, std::string field)
    : file_(path), format_(document_format_of(path)), field_(std::move(field)) {}

std::string DocumentReader::where() const {
  return format_ == DocumentFormat::jsonl ? file_.path() + ":" + std::to_string(line_)
                                          : file_.path();
}

bool DocumentReader::next_line(std::string_view& line) {
  size_t scanned = pos_;  // no '\n' in [pos_, scanned)
  while (true) {
    const void* nl = std::memchr(buf_.data() + scanned, '\n', buf_.size() - scanned);
    if (nl != nullptr) {
      const size_t end = static_cast<const char*>(nl) - buf_.data();
      line = std::string_view(buf_).substr(pos_, end - pos_);
      pos_ = end + 1;
      return true;
    }
    if (eof_) {
      if (pos_ == buf_.size()) return false;
      line = std::string_view(buf_).substr(pos_);  // a last line without '\n'
      pos_ = buf_.size();
      return true;
    }
    buf_.erase(0, pos_);  // keep only the unfinished line
    pos_ = 0;
    scanned = buf_.size();
    buf_.resize(scanned + kReadBytes);
    const size_t got = file_.read(buf_.data() + scanned, kReadBytes);
    buf_.resize(scanned + got);
    eof_ = got == 0;
  }
}

bool DocumentReader::next(std::string& text) {
  if (format_ == DocumentFormat::text) {
    if (text_done_) return false;
    text_done_ = true;
    // Note [Reading a text document]: appended block by block from one reused buffer, into a
    // string reserved to the file's size when it is stored plain, so a document costs one
    // allocation of its own size (reading into a fresh 1 MiB-grown string cost a mapping and
    // its page faults per document: 14% of a one-thread run on the demo corpus).
    text.clear();
    if (file_.compression() == Compression::none) text.reserve(file_.size() + 1);
    buf_.resize(kReadBytes);
    for (size_t got; (got = file_.read(buf_.data(), buf_.size())) > 0;)
      text.append(buf_.data(), got);
    buf_.clear();
    return true;
  }
  std::string_view line;
  while (next_line(line)) {
    ++line_;
    if (is_blank(line)) continue;
    if (field_.empty()) {  // the whole line (instruction data parses it itself)
      text.assign(line);
      return true;
    }
    FieldSax sax(field_, text);
    if (!json::sax_parse(line.begin(), line.end(), &sax)) {
      BRAID_THROW(where(), ": ", sax.error());
    }
    BRAID_CHECK(sax.top() == std::string_view("an object"), where(), ": the line holds ", sax.top(),
                ", not a JSON object");
    if (sax.found() == nullptr) {
      std::string keys;
      for (const auto& k : sax.keys()) keys += (keys.empty() ? "\"" : ", \"") + k + "\"";
      BRAID_THROW(where(), ": no \"", field_, "\" field (the object has ",
                  keys.empty() ? "no fields" : "fields " + keys + (sax.more_keys() ? ", ..." : ""),
                  "; --field names another)");
    }
    BRAID_CHECK(sax.found() == std::string_view("a string"), where(), ": field \"", field_,
                "\" holds ", sax.found(), ", not a string");
    return true;
  }
  return false;
}

int64_t DocumentReader::count(const std::string& path) {
  if (document_format_of(path) == DocumentFormat::text) return 1;
  InputFile file(path);
  std::string block(kReadBytes, '\0');
  int64_t n = 0;
  bool has_content = false;  // the line so far holds something other than whitespace
  for (size_t got; (got = file.read(block.data(), block.size())) > 0;) {
    for (size_t i = 0; i < got; ++i) {
      const char c = block[i];
      if (c == '\n') {
        n += has_content;
        has_content = false;
      } else if (!is_json_space(c)) {
        has_content = true;
      }
    }
  }
  return n + has_content;
}

}  // namespace braid::data
