#include "braid/data/document_reader.h"

#include <gtest/gtest.h>

#include <vector>

#include "braid/data/compress_test_util.h"
#include "braid/data/test_util.h"

namespace braid::data {
namespace {

using testutil::error_of;
using testutil::TempDir;
using testutil::write;

std::vector<std::string> documents(const std::string& path, const std::string& field = "text") {
  DocumentReader r(path, field);
  std::vector<std::string> out;
  for (std::string text; r.next(text);) out.push_back(text);
  EXPECT_EQ(DocumentReader::count(path), static_cast<int64_t>(out.size())) << path;
  return out;
}

TEST(DocumentReader, FormatIsChosenByName) {
  EXPECT_EQ(document_format_of("a.jsonl"), DocumentFormat::jsonl);
  EXPECT_EQ(document_format_of("a.jsonl.zst"), DocumentFormat::jsonl);
  EXPECT_EQ(document_format_of("a.txt.gz"), DocumentFormat::text);
  EXPECT_EQ(document_format_of("a.json"), DocumentFormat::text);
}

TEST(DocumentReader, TextFileIsOneDocument) {
  TempDir dir;
  write(dir.file("a.txt"), "line one\n\nline two\n");
  write(dir.file("empty.txt"), "");
  EXPECT_EQ(documents(dir.file("a.txt")), std::vector<std::string>{"line one\n\nline two\n"});
  EXPECT_EQ(documents(dir.file("empty.txt")), std::vector<std::string>{""});
}

TEST(DocumentReader, JsonlGivesTheFieldOfEachLineSkippingBlankOnes) {
  TempDir dir;
  write(dir.file("a.jsonl"),
        "{\"id\": 1, \"text\": \"hello \\\"world\\\"\\n\", \"meta\": {\"text\": 5}}\n"
        "\n"
        "  \t\r\n"
        "{\"text\": \"caf\\u00e9 \xe6\x97\xa5\xe6\x9c\xac \xf0\x9f\x98\x80\", \"body\": \"b\"}\r\n"
        "{\"text\": \"\"}\n"
        "{\"text\": \"last, no newline\"}");
  EXPECT_EQ(documents(dir.file("a.jsonl")),
            (std::vector<std::string>{"hello \"world\"\n",
                                      "caf\xc3\xa9 \xe6\x97\xa5\xe6\x9c\xac \xf0\x9f\x98\x80", "",
                                      "last, no newline"}));

  DocumentReader r(dir.file("a.jsonl"), "text");
  std::string text;
  ASSERT_TRUE(r.next(text));
  EXPECT_EQ(r.line(), 1);
  ASSERT_TRUE(r.next(text));
  EXPECT_EQ(r.line(), 4);
  EXPECT_EQ(r.where(), dir.file("a.jsonl") + ":4");

  write(dir.file("b.jsonl"), "{\"text\": 1, \"body\": \"one\"}\n{\"body\": \"two\"}\n");
  EXPECT_EQ(documents(dir.file("b.jsonl"), "body"), (std::vector<std::string>{"one", "two"}));
}

TEST(DocumentReader, CompressedJsonlAndLongLinesStream) {
  TempDir dir;
  std::string jsonl;
  std::vector<std::string> want;
  for (int i = 0; i < 40; ++i) {
    // Lines of up to 200 KB, so that lines cross the reader's 1 MiB blocks.
    want.push_back(std::string(static_cast<size_t>(i) * 5000 + 1, static_cast<char>('a' + i % 26)));
    jsonl += "{\"text\": \"" + want.back() + "\"}\n";
  }
  testutil::write_gz(dir.file("big.jsonl.gz"), jsonl);
  testutil::write_zst(dir.file("big.jsonl.zst"), jsonl);
  EXPECT_EQ(documents(dir.file("big.jsonl.gz")), want);
  EXPECT_EQ(documents(dir.file("big.jsonl.zst")), want);
}

// The error next() throws on the third line of a file holding `line` there.
std::string third_line_error(const TempDir& dir, const std::string& line) {
  write(dir.file("bad.jsonl"), "{\"text\": \"a\"}\n\n" + line + "\n{\"text\": \"d\"}\n");
  return error_of([&] {
    DocumentReader r(dir.file("bad.jsonl"), "text");
    for (std::string text; r.next(text);) {
    }
  });
}

TEST(DocumentReader, BadLinesNameFileLineAndWhat) {
  TempDir dir;
  const std::string at = dir.file("bad.jsonl") + ":3: ";
  auto msg = third_line_error(dir, "{\"text\": \"unterminated}");
  EXPECT_NE(msg.find(at + "invalid JSON at column 24: "), std::string::npos) << msg;
  msg = third_line_error(dir, "{\"text\": \"a\"} trailing");
  EXPECT_NE(msg.find(at + "invalid JSON at column "), std::string::npos) << msg;
  msg = third_line_error(dir, "{\"text\": \"bad utf-8 \xc3\x28\"}");
  EXPECT_NE(msg.find(at + "invalid JSON"), std::string::npos) << msg;
  msg = third_line_error(dir, "[\"text\", \"a\"]");
  EXPECT_NE(msg.find(at + "the line holds an array, not a JSON object"), std::string::npos) << msg;
  msg = third_line_error(dir, "\"just a string\"");
  EXPECT_NE(msg.find(at + "the line holds a string, not a JSON object"), std::string::npos) << msg;
  msg = third_line_error(dir, "{\"id\": 3, \"body\": \"x\"}");
  EXPECT_NE(msg.find(at + "no \"text\" field (the object has fields \"id\", \"body\"; --field "
                          "names another)"),
            std::string::npos)
      << msg;
  msg = third_line_error(
      dir, "{\"a\":1,\"b\":1,\"c\":1,\"d\":1,\"e\":1,\"f\":1,\"g\":1,\"h\":1,\"i\":1}");
  EXPECT_NE(msg.find("\"g\", \"h\", ...; --field names another)"), std::string::npos) << msg;
  msg = third_line_error(dir, "{}");
  EXPECT_NE(msg.find(at + "no \"text\" field (the object has no fields"), std::string::npos) << msg;
  msg = third_line_error(dir, "{\"meta\": {\"text\": \"nested is not it\"}}");
  EXPECT_NE(msg.find(at + "no \"text\" field"), std::string::npos) << msg;
  for (auto [value, what] : {std::pair{"5", "a number"},
                             {"null", "null"},
                             {"true", "a boolean"},
                             {"[\"a\"]", "an array"},
                             {"{\"s\": \"a\"}", "an object"}}) {
    msg = third_line_error(dir, std::string("{\"text\": ") + value + "}");
    EXPECT_NE(msg.find(at + "field \"text\" holds " + what + ", not a string"), std::string::npos)
        << msg;
  }
}

}  // namespace
}  // namespace braid::data
