// tokenize_bench TOKENIZER_PATH... [--corpus DIR]: MB/s of Tokenizer::encode over the corpus
// (default $BRAID_DATA_DIR/sotu, else data/sotu), on one thread and on every core, as
// prepare-data runs it (one clone per thread, documents shared out), loading not counted.
//
// Note [Tokenising speed]: on the demo corpus (10.8 MB of English, 233 documents) the
// byte-level tokenizers (GPT-2, LLaMA-3, Qwen3, GPT-4o) are bounded by the PCRE2-JIT
// pre-tokenizer regex plus a hash lookup per piece (BPE merges run only on cache misses); the
// SentencePiece-style ones (LLaMA-2, Mistral) have no pre-tokenizer, so each document is one
// piece and the merge heap over all its characters dominates (HF's Rust BPE does the same).
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "braid/data/prepare_data.h"
#include "braid/data/tokenizer.h"

namespace {

double run(const braid::data::Tokenizer& proto, const std::vector<std::string>& docs, int threads,
           int64_t* ids) {
  std::atomic<size_t> next{0};
  std::atomic<int64_t> count{0};
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&, tok = proto.clone()] {
      std::vector<int32_t> out;
      for (size_t i; (i = next++) < docs.size();) {
        out.clear();
        tok->encode(docs[i], out);
        count += static_cast<int64_t>(out.size());
      }
    });
  }
  for (auto& t : pool) t.join();
  *ids = count;
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> paths;
  const char* env = std::getenv("BRAID_DATA_DIR");
  std::string corpus = std::string(env != nullptr && *env != '\0' ? env : "data") + "/sotu";
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--corpus" && i + 1 < argc) {
      corpus = argv[++i];
    } else {
      paths.push_back(a);
    }
  }
  if (paths.empty()) {
    std::fprintf(stderr, "usage: tokenize_bench TOKENIZER_PATH... [--corpus DIR]\n");
    return 2;
  }
  std::vector<std::string> docs;
  double bytes = 0;
  for (const auto& f : braid::data::list_text_files({corpus})) {
    std::ifstream in(f, std::ios::binary);
    std::ostringstream ss;
    ss << in.rdbuf();
    docs.push_back(ss.str());
    bytes += static_cast<double>(docs.back().size());
  }
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  std::printf("corpus %s: %zu documents, %.1f MB; %d cores\n", corpus.c_str(), docs.size(),
              bytes / 1e6, cores);
  for (const auto& p : paths) {
    const auto tok = braid::data::Tokenizer::from_path(p);
    for (int threads : {1, cores}) {
      int64_t ids = 0;
      const double secs = run(*tok, docs, threads, &ids);
      std::printf("%-40s %-20s %2d thread(s): %7.1f MB/s, %9lld ids\n", p.c_str(),
                  tok->kind().c_str(), threads, bytes / 1e6 / secs, static_cast<long long>(ids));
    }
  }
  return 0;
}
