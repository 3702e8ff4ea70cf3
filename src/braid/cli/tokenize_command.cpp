// braid tokenize: prints the token ids of a text (or of stdin), or decodes ids.
#include <charconv>
#include <cstdio>
#include <iostream>
#include <iterator>
#include <sstream>
#include <string>
#include <vector>

#include "braid/cli/command.h"
#include "braid/cli/command_line.h"
#include "braid/core/error.h"
#include "braid/data/tokenizer.h"

namespace {

int run_tokenize(const std::vector<std::string>& args) {
  braid::cli::CommandLine cl(
      "tokenize",
      "Prints the token ids of TEXT (the arguments joined by spaces; stdin when there are none), "
      "one line, space-separated. With --decode, TEXT is ids and the decoded text is printed.");
  CLI::App& app = cl.app();
  std::string dir = "data/gpt2";
  bool decode = false;
  std::vector<std::string> words;
  app.add_option("--tokenizer", dir,
                 "tokenizer directory (tokenizer.json, tokenizer.model, or GPT-2's encoder.json + "
                 "vocab.bpe) or a tokenizer.json or tokenizer.model")
      ->type_name("DIR")
      ->capture_default_str();
  app.add_flag("--decode", decode, "TEXT is token ids: print the text they stand for");
  app.add_option("TEXT", words, "the text, or with --decode the ids")->type_name("");
  if (auto status = cl.parse(args)) return *status;

  std::string text;
  if (words.empty()) {
    text.assign(std::istreambuf_iterator<char>(std::cin), {});
  } else {
    for (size_t i = 0; i < words.size(); ++i) text += (i ? " " : "") + words[i];
  }
  auto tok = braid::data::Tokenizer::from_path(dir);
  if (decode) {
    std::vector<int32_t> ids;
    std::istringstream in(text);
    for (std::string w; in >> w;) {
      int32_t id = 0;
      const auto [end, ec] = std::from_chars(w.data(), w.data() + w.size(), id);
      BRAID_CHECK(ec == std::errc() && end == w.data() + w.size(),
                  "--decode expects integer token ids, got '", w, "'");
      ids.push_back(id);
    }
    const std::string out = tok->decode_text(ids);  // as HF prints it: U+FFFD for broken UTF-8
    std::fwrite(out.data(), 1, out.size(), stdout);
    std::fputc('\n', stdout);
    return 0;
  }
  auto ids = tok->encode(text);
  std::string line;
  for (size_t i = 0; i < ids.size(); ++i) line += (i ? " " : "") + std::to_string(ids[i]);
  std::printf("%s\n", line.c_str());
  return 0;
}

}  // namespace

BRAID_COMMAND("tokenize", "print the token ids of a text", run_tokenize);
