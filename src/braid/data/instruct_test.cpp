// Instruction data (instruct.h): examples parsed with errors that say what is wrong, rendered
// through each template with real tokenizers (Qwen3's chatml, LLaMA-3's, GPT-2 plain) so that
// exactly the assistant's tokens are trained, and braid prepare-data laying them out in rows with
// flag shards that the DataLoader masks by (Note [Token flags]).
#include "braid/data/instruct.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "braid/core/error.h"
#include "braid/data/data_loader.h"
#include "braid/data/prepare_data.h"
#include "braid/data/token_flags.h"
#include "braid/data/tokenizer_test_util.h"

namespace braid::data {
namespace {

std::unique_ptr<Tokenizer> tokenizer(const std::string& name) {
  const std::string dir = testutil::data_dir() + "/tokenizers/" + name;
  if (!std::filesystem::exists(dir)) return nullptr;
  return Tokenizer::from_path(dir);
}

#define NEED_TOKENIZER(var, name) \
  auto var = tokenizer(name);     \
  if (!var) GTEST_SKIP() << "no " name " tokenizer: run scripts/fetch-data.sh data"

void expect_error(const std::function<void()>& f, const std::string& want) {
  try {
    f();
    ADD_FAILURE() << "no error, wanted: " << want;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(want), std::string::npos) << e.what();
  }
}

// The text of the ids whose flags are trained (and not an example start).
std::string trained_text(const Tokenizer& tok, const EncodedExample& e) {
  std::vector<int32_t> ids;
  for (size_t i = 0; i < e.ids.size(); ++i)
    if ((e.flags[i] & kFlagTarget) && !(e.flags[i] & kFlagSegmentStart)) ids.push_back(e.ids[i]);
  return tok.decode(ids);
}

TEST(Instruct, BadExamplesSayWhatIsWrong) {
  expect_error([] { parse_instruct_example("{\"prompt\": 1"); }, "not JSON");
  expect_error([] { parse_instruct_example("[1, 2]"); }, "not a JSON object");
  expect_error([] { parse_instruct_example("{\"text\": \"x\"}"); },
               "neither \"messages\" nor \"prompt\" and \"completion\"");
  expect_error([] { parse_instruct_example("{\"prompt\": \"x\"}"); }, "no \"completion\" field");
  expect_error([] { parse_instruct_example("{\"prompt\": \"x\", \"completion\": 3}"); },
               "\"completion\" is number, not a string");
  expect_error([] { parse_instruct_example("{\"messages\": []}"); }, "non-empty array");
  expect_error([] { parse_instruct_example(R"({"messages": [{"role": "bot", "content": "x"}]})"); },
               "message 0 has role \"bot\"");
  expect_error([] { parse_instruct_example(R"({"messages": [{"role": "user"}]})"); },
               "message 0 has no \"content\" field");
  expect_error(
      [] { parse_instruct_example(R"({"messages": [{"role": "user", "content": "x"}]})"); },
      "no assistant message");
  expect_error([] { chat_template_from_name("jinja"); }, "not one of plain, chatml, llama3");
}

TEST(Instruct, ChatmlTrainsTheAssistantTurnsAndTheirEndOnly) {
  NEED_TOKENIZER(tok, "qwen3");
  const auto msgs = parse_instruct_example(
      R"({"messages": [{"role": "system", "content": "Be brief."},
                       {"role": "user", "content": "Hi <|im_end|> there"},
                       {"role": "assistant", "content": "Hello!"},
                       {"role": "user", "content": "2+2?"},
                       {"role": "assistant", "content": "4"}]})");
  check_template_tokens(ChatTemplate::chatml, *tok);
  const EncodedExample e = encode_example(msgs, ChatTemplate::chatml, *tok);
  ASSERT_EQ(e.ids.size(), e.flags.size());
  EXPECT_EQ(tok->decode(e.ids),
            "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi <|im_end|> "
            "there<|im_end|>\n<|im_start|>assistant\nHello!<|im_end|>\n<|im_start|>user\n2+2?"
            "<|im_end|>\n<|im_start|>assistant\n4<|im_end|>\n");
  EXPECT_EQ(trained_text(*tok, e), "Hello!<|im_end|>4<|im_end|>");
  EXPECT_EQ(e.flags[0], kFlagSegmentStart);
  // A user's "<|im_end|>" is text, not the marker: the marker appears 5 times, once a turn.
  const int32_t end = tok->special_token_id("<|im_end|>");
  EXPECT_EQ(std::count(e.ids.begin(), e.ids.end(), end), 5);
}

TEST(Instruct, Llama3AndPlainTemplates) {
  NEED_TOKENIZER(llama, "llama3");
  const auto pc = parse_instruct_example(R"({"prompt": "Say hi.", "completion": "Hi!"})");
  // Meta's template trims each content.
  const auto padded = parse_instruct_example(R"({"prompt": " Say hi.\n", "completion": "Hi!  "})");
  const EncodedExample e = encode_example(padded, ChatTemplate::llama3, *llama);
  EXPECT_EQ(llama->decode(e.ids),
            "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nSay hi.<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\nHi!<|eot_id|>");
  EXPECT_EQ(trained_text(*llama, e), "Hi!<|eot_id|>");
  NEED_TOKENIZER(gpt2, "gpt2");
  const EncodedExample p = encode_example(pc, ChatTemplate::plain, *gpt2);
  EXPECT_EQ(gpt2->decode(p.ids), "<|endoftext|>Say hi.Hi!<|endoftext|>");
  EXPECT_EQ(trained_text(*gpt2, p), "Hi!<|endoftext|>");
  expect_error([&] { check_template_tokens(ChatTemplate::chatml, *gpt2); },
               "chat template chatml needs the token <|im_start|>");
}

TEST(Instruct, PrepareDataWritesRowsTheLoaderMasks) {
  NEED_TOKENIZER(tok, "qwen3");
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("braid_instruct_" + std::to_string(getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir / "in");
  {
    std::ofstream f(dir / "in" / "sft.jsonl");
    for (int i = 0; i < 10; ++i) {
      f << R"({"prompt": "Count to )" << i << R"(.", "completion": ")";
      for (int k = 0; k <= i; ++k) f << k << " ";
      f << "\"}\n";
    }
    f << R"({"messages": [{"role": "user", "content": ")" << std::string(3000, 'x')
      << R"("}, {"role": "assistant", "content": "long"}]})"
      << "\n";
  }
  PrepareDataOptions o;
  o.inputs = {(dir / "in").string()};
  o.tokenizer_dir = testutil::data_dir() + "/tokenizers/qwen3";
  o.out_dir = (dir / "out").string();
  o.val_fraction = 0.1;
  o.chat_template = "chatml";
  o.seq_len = 63;
  const PrepareDataResult r = prepare_data(o);
  EXPECT_EQ(r.train.rows + r.val.rows, 11);
  EXPECT_EQ(r.train.truncated + r.val.truncated, 1);  // the 3000-x prompt
  const auto meta = nlohmann::json::parse(std::ifstream(dir / "out" / "meta.json"));
  EXPECT_EQ(meta["row_tokens"], 64);
  EXPECT_EQ(TokenDataset::row_layout(o.out_dir).row_tokens, 64);
  for (const auto& s : r.train.shards)
    EXPECT_TRUE(fs::exists(flags_path((dir / "out" / s).string())));

  DataLoaderOptions lo;
  lo.batch_size = 1;
  lo.seq_len = 63;
  lo.stride = 64;
  lo.shuffle = false;
  DataLoader loader(TokenDataset::find_shards(o.out_dir, "train"), lo);
  ASSERT_TRUE(loader.masked());
  ASSERT_EQ(loader.num_samples(), r.train.rows);
  int64_t counted = 0;
  std::string trained;
  for (int64_t i = 0; i < r.train.rows; ++i) {
    const Batch b = loader.next();
    counted += b.counted;
    // Each row is one example from its start; every counted target is a completion token.
    EXPECT_EQ(tok->decode({b.inputs.data<int32_t>()[0]}), "<|im_start|>");
    std::vector<int32_t> ids;
    for (int64_t t = 0; t < 63; ++t)
      if (b.targets.data<int32_t>()[t] != kIgnoreTarget)
        ids.push_back(b.targets.data<int32_t>()[t]);
    trained += tok->decode(ids) + "|";
  }
  EXPECT_EQ(counted, r.train.trained);
  EXPECT_NE(trained.find("0 1 2 <|im_end|>|"), std::string::npos) << trained;
  EXPECT_EQ(trained.find("Count"), std::string::npos) << "a prompt token is trained: " << trained;

  // Packed: as many whole examples a row as fit, the same trained tokens, positions restarting at
  // each example's first token (<|im_start|>) and at the padding.
  PrepareDataOptions po = o;
  po.out_dir = (dir / "packed").string();
  po.layout = "pack";
  const PrepareDataResult p = prepare_data(po);
  EXPECT_EQ(p.train.documents + p.val.documents, 11);
  EXPECT_LT(p.train.rows, r.train.rows);
  EXPECT_EQ(p.train.trained, r.train.trained);
  EXPECT_TRUE(TokenDataset::row_layout(po.out_dir).packed);
  EXPECT_FALSE(TokenDataset::row_layout(o.out_dir).packed);
  lo.positions = true;
  DataLoader packed(TokenDataset::find_shards(po.out_dir, "train"), lo);
  const int32_t start = tok->special_token_id("<|im_start|>");
  int64_t starts = 0, packed_counted = 0;
  for (int64_t i = 0; i < p.train.rows; ++i) {
    const Batch b = packed.next();
    packed_counted += b.counted;
    for (int64_t t = 0; t < 63; ++t) {
      if (b.positions.data<int32_t>()[t] != 0) continue;
      const int32_t id = b.inputs.data<int32_t>()[t];
      EXPECT_TRUE(id == start || id == tok->special_token_id("<|endoftext|>")) << id;
      starts += id == start;
    }
  }
  EXPECT_EQ(starts, p.train.documents);
  EXPECT_EQ(packed_counted, p.train.trained);

  // A malformed line: one error naming file and line, and the output left as it was.
  std::ofstream(dir / "in" / "sft.jsonl", std::ios::app) << "{\"prompt\": \"x\"}\n";
  o.force = true;
  expect_error([&] { prepare_data(o); }, "sft.jsonl:12: the example has no \"completion\" field");
  EXPECT_EQ(TokenDataset::row_layout(o.out_dir).row_tokens, 64);
  EXPECT_TRUE(fs::exists(dir / "out" / r.train.shards.front()));
  // Text files are not instruction data.
  std::ofstream(dir / "in" / "notes.txt") << "hello";
  expect_error([&] { prepare_data(o); }, "is not JSONL");
  fs::remove_all(dir);
}

}  // namespace
}  // namespace braid::data
