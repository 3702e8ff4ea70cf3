// braid tokenize: prints the GPT-2 token ids of a text (or of stdin), or decodes ids.
#include <cstdio>
#include <iostream>
#include <iterator>
#include <sstream>
#include <string>
#include <vector>

#include "braid/cli/args.h"
#include "braid/cli/command.h"
#include "braid/core/error.h"
#include "braid/data/bpe_tokenizer.h"

namespace {

constexpr const char* kUsage =
    "usage: braid tokenize [--tokenizer DIR] [--decode] [TEXT...]\n"
    "\n"
    "Prints the token ids of TEXT (the arguments joined by spaces; stdin when there are none),\n"
    "one line, space-separated. With --decode, TEXT is ids and the decoded text is printed.\n"
    "  --tokenizer DIR   encoder.json + vocab.bpe (default data/gpt2)\n";

int run_tokenize(const std::vector<std::string>& args) {
  std::string dir = "data/gpt2";
  bool decode = false;
  std::vector<std::string> words;
  for (size_t i = 0; i < args.size(); ++i) {
    if (args[i] == "--help" || args[i] == "-h") {
      std::fputs(kUsage, stdout);
      return 0;
    } else if (args[i] == "--tokenizer") {
      BRAID_CHECK(i + 1 < args.size(), "--tokenizer needs a directory (see braid tokenize --help)");
      dir = args[++i];
    } else if (args[i] == "--decode") {
      decode = true;
    } else {
      words.push_back(args[i]);
    }
  }
  std::string text;
  if (words.empty()) {
    text.assign(std::istreambuf_iterator<char>(std::cin), {});
  } else {
    for (size_t i = 0; i < words.size(); ++i) text += (i ? " " : "") + words[i];
  }
  auto tok = braid::data::BpeTokenizer::from_dir(dir);
  if (decode) {
    std::vector<int32_t> ids;
    std::istringstream in(text);
    std::string w;
    while (in >> w) {
      ids.push_back(static_cast<int32_t>(braid::cli::parse_int("--decode", w)));
    }
    std::string out = tok.decode(ids);
    std::fwrite(out.data(), 1, out.size(), stdout);
    std::fputc('\n', stdout);
    return 0;
  }
  auto ids = tok.encode(text);
  std::string line;
  for (size_t i = 0; i < ids.size(); ++i) line += (i ? " " : "") + std::to_string(ids[i]);
  std::printf("%s\n", line.c_str());
  return 0;
}

}  // namespace

BRAID_COMMAND("tokenize", "print the GPT-2 token ids of a text", run_tokenize);
