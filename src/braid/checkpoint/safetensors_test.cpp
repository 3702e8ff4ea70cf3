#include "braid/checkpoint/safetensors.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <fstream>

#include "testing/tensor_compare.h"

namespace braid::checkpoint {
namespace {

namespace fs = std::filesystem;

class SafetensorsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("braid_st_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // A file with the given raw header text followed by `data_bytes` zero bytes.
  fs::path raw_file(const std::string& header, int64_t data_bytes, const char* name = "x") {
    fs::path p = dir_ / (std::string(name) + ".safetensors");
    std::ofstream f(p, std::ios::binary);
    uint64_t n = header.size();
    f.write(reinterpret_cast<const char*>(&n), 8);
    f.write(header.data(), static_cast<std::streamsize>(header.size()));
    std::string zeros(static_cast<size_t>(data_bytes), '\0');
    f.write(zeros.data(), static_cast<std::streamsize>(zeros.size()));
    return p;
  }

  static std::string error_of(const fs::path& p) {
    try {
      SafetensorsReader r(p);
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  }

  fs::path dir_;
};

TEST_F(SafetensorsTest, RoundTripsEveryDtypeAndMetadata) {
  Rng rng(7);
  Tensor a = Tensor::randn(Shape{3, 5}, rng);
  Tensor b = Tensor::randn(Shape{4}, rng, 1.0f, DType::bf16);
  Tensor c = Tensor::randn(Shape{2, 2, 2}, rng, 1.0f, DType::f16);
  Tensor d = Tensor::from_vector<int32_t>({1, -2, 3}, Shape{3});
  Tensor e = Tensor::from_vector<int64_t>({1LL << 40, -5}, Shape{2});
  Tensor f = Tensor::from_vector<uint8_t>({0, 255, 7}, Shape{3});
  Tensor empty = Tensor::empty(Shape{0, 4});
  fs::path p = dir_ / "all.safetensors";
  save_safetensors(p,
                   {{"a", a}, {"b", b}, {"c", c}, {"d", d}, {"empty", empty}, {"e", e}, {"f", f}},
                   {{"format", "pt"}});
  EXPECT_FALSE(fs::exists(p.string() + ".tmp"));
  SafetensorsReader r(p);
  EXPECT_EQ(r.entries().size(), 7u);
  EXPECT_EQ(r.metadata().at("format"), "pt");
  EXPECT_TRUE(testing::bit_equal(r.read("a"), a));
  EXPECT_TRUE(testing::bit_equal(r.read("b"), b));
  EXPECT_TRUE(testing::bit_equal(r.read("c"), c));
  EXPECT_TRUE(testing::bit_equal(r.read("d"), d));
  EXPECT_TRUE(testing::bit_equal(r.read("e"), e));
  EXPECT_TRUE(testing::bit_equal(r.read("f"), f));
  EXPECT_EQ(r.read("empty").shape(), (Shape{0, 4}));
  // The data section starts 8-byte aligned.
  std::ifstream in(p, std::ios::binary);
  uint64_t n = 0;
  in.read(reinterpret_cast<char*>(&n), 8);
  EXPECT_EQ(n % 8, 0u);
}

TEST_F(SafetensorsTest, ReadsRangesAndConvertsDtype) {
  Tensor a = Tensor::from_vector<float>({0, 1, 2, 3, 4, 5, 6, 7}, Shape{2, 4});
  fs::path p = dir_ / "r.safetensors";
  save_safetensors(p, {{"a", a}, {"h", a.to(DType::bf16)}});
  SafetensorsReader r(p);
  Tensor part = Tensor::zeros(Shape{3});
  r.read_into("a", part, 3);
  EXPECT_EQ(part.to_f32_vector(), (std::vector<float>{3, 4, 5}));
  Tensor conv = Tensor::zeros(Shape{8});
  r.read_into("h", conv);  // bf16 in the file, f32 here: small integers are exact
  EXPECT_EQ(conv.to_f32_vector(), a.to_f32_vector());
  Tensor big = Tensor::zeros(Shape{4});
  EXPECT_THROW(r.read_into("a", big, 6), Error);
  Tensor ints = Tensor::zeros(Shape{8}, DType::i32);
  EXPECT_THROW(r.read_into("a", ints), Error);
  try {
    r.read("nope");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'nope'"), std::string::npos) << e.what();
  }
}

TEST_F(SafetensorsTest, StreamsPiecesInHeaderOrder) {
  fs::path p = dir_ / "s.safetensors";
  {
    SafetensorsWriter w(p, {{"x", DType::f32, Shape{2, 3}}, {"y", DType::bf16, Shape{2}}});
    w.append("x", Tensor::from_vector<float>({1, 2}, Shape{2}));
    w.append("x", Tensor::from_vector<float>({3, 4, 5, 6}, Shape{4}));
    EXPECT_THROW(w.write("x", Tensor::zeros(Shape{2, 3})), Error);      // x is complete
    w.write("y", Tensor::from_vector<float>({0.5f, -2.0f}, Shape{2}));  // converted to bf16
    w.finish();
  }
  auto m = load_safetensors(p);
  EXPECT_EQ(m.at("x").to_f32_vector(), (std::vector<float>{1, 2, 3, 4, 5, 6}));
  EXPECT_EQ(m.at("y").dtype(), DType::bf16);
  EXPECT_EQ(m.at("y").to_f32_vector(), (std::vector<float>{0.5f, -2.0f}));
}

TEST_F(SafetensorsTest, WriterRejectsWrongOrderShapeAndIncompleteFiles) {
  fs::path p = dir_ / "w.safetensors";
  {
    SafetensorsWriter w(p, {{"x", DType::f32, Shape{2}}, {"y", DType::f32, Shape{2}}});
    EXPECT_THROW(w.write("y", Tensor::zeros(Shape{2})), Error);
    EXPECT_THROW(w.write("x", Tensor::zeros(Shape{3})), Error);
    w.write("x", Tensor::zeros(Shape{2}));
    EXPECT_THROW(w.finish(), Error);
  }
  // An unfinished writer leaves neither the final file nor its temporary behind.
  EXPECT_FALSE(fs::exists(p));
  EXPECT_FALSE(fs::exists(p.string() + ".tmp"));
}

TEST_F(SafetensorsTest, ReadsFilesWrittenByThePythonTools) {
  SafetensorsReader r(fs::path(BRAID_TESTDATA_DIR) / "gpt2-tiny" / "golden.safetensors");
  const auto& ids = r.entry("input_ids");
  EXPECT_EQ(ids.dtype, DType::i32);
  EXPECT_EQ(ids.shape, (Shape{2, 8}));
  EXPECT_EQ(r.read("targets").to_f32_vector()[8 + 2], -100.0f);
  EXPECT_EQ(r.entry("loss").shape, (Shape{1}));
}

TEST_F(SafetensorsTest, CorruptFilesGiveErrorsNamingTheProblem) {
  auto expect_error = [&](const fs::path& p, const std::string& needle) {
    std::string msg = error_of(p);
    EXPECT_NE(msg.find(needle), std::string::npos) << "message: '" << msg << "'";
    EXPECT_NE(msg.find(p.filename().string()), std::string::npos) << msg;
  };
  {
    fs::path p = dir_ / "short.safetensors";
    std::ofstream(p) << "abc";
    expect_error(p, "too short");
  }
  {
    fs::path p = dir_ / "long.safetensors";
    std::ofstream f(p, std::ios::binary);
    uint64_t n = 1000;
    f.write(reinterpret_cast<const char*>(&n), 8);
    f << "{}";
    f.close();
    expect_error(p, "header length 1000");
  }
  expect_error(raw_file("{\"a\": ", 0, "json"), "not valid JSON");
  expect_error(raw_file(R"({"a":{"dtype":"F64","shape":[1],"data_offsets":[0,8]}})", 8, "dt"),
               "'F64'");
  expect_error(raw_file(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", 4, "oob"),
               "past the end");
  expect_error(raw_file(R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", 8, "cnt"),
               "needs 12");
  expect_error(raw_file(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                        R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
                        12, "ovl"),
               "overlap");
  expect_error(raw_file(R"({"a":{"dtype":"F32","shape":[-1],"data_offsets":[0,0]}})", 0, "neg"),
               "non-negative");
  expect_error(
      raw_file(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4],"x":1}})", 4, "field"),
      "unknown field 'x'");
  expect_error(raw_file(R"({"__metadata__":{"k":1}})", 0, "meta"), "__metadata__");
}

}  // namespace
}  // namespace braid::checkpoint
