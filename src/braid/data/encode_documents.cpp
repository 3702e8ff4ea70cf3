#include "braid/data/encode_documents.h"

#include <algorithm>
#include <condition_variable>
#include <deque>
#include <exception>
#include <mutex>
#include <optional>
#include <thread>

#include "braid/core/error.h"
#include "braid/data/document_reader.h"

namespace braid::data {

namespace {

struct ReadDocument {
  int64_t index;
  std::string text;
  std::string where;
  int64_t file_bytes_done;
};

}  // namespace

void encode_documents(const std::vector<std::string>& files, const Tokenizer& tokenizer,
                      const EncodeDocumentsOptions& o,
                      const std::function<void(EncodedDocument&)>& sink) {
  const int threads = std::max(1, o.threads);
  const bool tokenizer_adds_separator = [&] {
    const std::vector<int32_t> empty = tokenizer.clone()->encode("");
    return !empty.empty() && empty.front() == o.separator;
  }();
  const int64_t window = o.window_documents > 0 ? o.window_documents : 16 * int64_t{threads};

  // Everything below is guarded by mu. Documents go reader -> queue -> a worker -> ring
  // (slot index % window) -> sink; `read - delivered` is what is held in between.
  std::mutex mu;
  std::condition_variable cv;
  std::deque<ReadDocument> queue;
  std::vector<std::optional<EncodedDocument>> ring(static_cast<size_t>(window));
  int64_t read = 0, delivered = 0, bytes_held = 0;
  bool reading_done = false, failed = false;
  std::exception_ptr error;
  auto fail = [&](std::exception_ptr e) {
    std::lock_guard<std::mutex> lock(mu);
    if (!failed) error = std::move(e);
    failed = true;
    cv.notify_all();
  };

  auto reader = [&] {
    try {
      int64_t files_before = 0;  // bytes of the files already read
      for (const auto& path : files) {
        DocumentReader r(path, o.field);
        std::string text;
        while (r.next(text)) {
          const auto bytes = static_cast<int64_t>(text.size());
          std::unique_lock<std::mutex> lock(mu);
          cv.wait(lock, [&] {
            return failed || read == delivered ||
                   (read - delivered < window && bytes_held + bytes <= o.window_bytes);
          });
          if (failed) return;
          queue.push_back({read++, std::move(text), r.where(), files_before + r.file_bytes_read()});
          bytes_held += bytes;
          cv.notify_all();
        }
        files_before += r.file_bytes_read();
      }
      std::lock_guard<std::mutex> lock(mu);
      reading_done = true;
      cv.notify_all();
    } catch (...) {
      fail(std::current_exception());
    }
  };

  auto worker = [&](std::unique_ptr<Tokenizer> tok) {
    while (true) {
      ReadDocument doc;
      {
        std::unique_lock<std::mutex> lock(mu);
        cv.wait(lock, [&] { return failed || !queue.empty() || reading_done; });
        if (failed || queue.empty()) return;
        doc = std::move(queue.front());
        queue.pop_front();
      }
      EncodedDocument out{.index = doc.index,
                          .ids = {},
                          .flags = {},
                          .text_bytes = static_cast<int64_t>(doc.text.size()),
                          .file_bytes_done = doc.file_bytes_done};
      out.ids.reserve(doc.text.size() / 3 + 16);  // English is about 4.5 bytes a GPT-2 token
      try {
        if (o.encode) {
          o.encode(doc.text, *tok, out);
        } else {
          if (!tokenizer_adds_separator) out.ids.push_back(o.separator);
          tok->encode(doc.text, out.ids);
        }
      } catch (const std::exception& e) {
        fail(std::make_exception_ptr(Error(doc.where + ": " + e.what())));
        return;
      }
      std::lock_guard<std::mutex> lock(mu);
      ring[static_cast<size_t>(doc.index % window)] = std::move(out);
      cv.notify_all();
    }
  };

  std::vector<std::thread> pool;
  pool.emplace_back(reader);
  for (int t = 0; t < threads; ++t) pool.emplace_back(worker, tokenizer.clone());

  try {
    while (true) {
      EncodedDocument doc;
      {
        std::unique_lock<std::mutex> lock(mu);
        auto& slot = ring[static_cast<size_t>(delivered % window)];
        cv.wait(lock,
                [&] { return failed || slot.has_value() || (reading_done && delivered == read); });
        if (failed || !slot.has_value()) break;
        doc = std::move(*slot);
        slot.reset();
        ++delivered;
        bytes_held -= doc.text_bytes;
        cv.notify_all();
      }
      sink(doc);
    }
  } catch (...) {
    fail(std::current_exception());
  }
  for (auto& t : pool) t.join();
  if (error) std::rethrow_exception(error);
}

}  // namespace braid::data
