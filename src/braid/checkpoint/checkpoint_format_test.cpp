// The checkpoint format's pieces on their own: CRC-32C, the manifest's JSON, its checksum and
// its errors, the rank-file header and table, step directory names, `latest`, publishing.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <vector>

#include "braid/checkpoint/checkpoint_dir.h"
#include "braid/checkpoint/crc32c.h"
#include "braid/checkpoint/file_io.h"
#include "braid/checkpoint/file_table.h"
#include "braid/checkpoint/manifest.h"
#include "braid/checkpoint/verified_file.h"
#include "braid/core/error.h"
#include "braid/core/rng.h"

namespace braid::checkpoint {
namespace {

namespace fs = std::filesystem;

uint32_t crc_bytewise(const std::vector<uint8_t>& v) {
  uint32_t c = 0;
  for (uint8_t b : v) c = crc32c(c, &b, 1);
  return c;
}

TEST(Crc32c, KnownValuesAndEverySplitAgree) {
  EXPECT_EQ(crc32c(0, "123456789", 9), 0xE3069283u);  // the standard check value
  EXPECT_EQ(crc32c(0, "", 0), 0u);
  Rng rng(3);
  for (size_t n : {size_t{1}, size_t{7}, size_t{8}, size_t{100}, size_t{3 * 8192 - 1},
                   size_t{3 * 8192}, size_t{3 * 8192 + 5}, size_t{100000}}) {
    std::vector<uint8_t> v(n);
    for (auto& b : v) b = static_cast<uint8_t>(rng.below(256));
    const uint32_t whole = crc32c(0, v.data(), n);
    EXPECT_EQ(whole, crc_bytewise(v)) << n;  // the wide path against byte at a time
    const size_t half = n / 3;
    EXPECT_EQ(crc32c(crc32c(0, v.data(), half), v.data() + half, n - half), whole) << n;
  }
  EXPECT_EQ(format_crc32c(0xE3069283u), "crc32c:e3069283");
}

// A version 3 manifest (one checksum per file); version 4's blocks: Manifest.CarriesBlocks.
Manifest sample() {
  Manifest m;
  m.version = 3;
  m.id = "0123456789abcdef";
  m.step = 7;
  m.layout = "zero3 (FULL_SHARD) over dp=2";
  m.world_size = 2;
  m.dp_size = 2;
  m.optimizer = "adamw";
  m.counters = {{"samples", 28}, {"optimizer_steps", 7}};
  m.config = "training:\n  max_steps: 9\n";
  m.files = {{"rank-00000.bin", 0, kHeaderBytes + 32, 0xdeadbeef, {}},
             {"rank-00001.bin", 1, kHeaderBytes + 32, 0x01020304, {}}};
  m.tensors = {{"param",
                "w",
                DType::f32,
                Shape{2, 3},
                {{0, 0, 3, kHeaderBytes, {}}, {1, 3, 3, kHeaderBytes, {}}}},
               {"exp_avg",
                "w",
                DType::f32,
                Shape{2, 3},
                {{0, 0, 3, kHeaderBytes + 12, {}}, {1, 3, 3, kHeaderBytes + 12, {}}}},
               // A tensor-parallel tensor: each rank's half of the rows (Note [Placements]).
               {"param",
                "v",
                DType::f32,
                Shape{2, 2},
                {{0, 0, 2, kHeaderBytes + 24, {.dim = 0, .parts = 2, .part = 0}},
                 {1, 0, 2, kHeaderBytes + 24, {.dim = 0, .parts = 2, .part = 1}}}}};
  return m;
}

TEST(Manifest, RoundTripsThroughJson) {
  const Manifest m = sample();
  const Manifest back = manifest_from_json(to_json(m), "test");
  EXPECT_EQ(to_json(back), to_json(m));
  ASSERT_NE(back.find("exp_avg", "w"), nullptr);
  EXPECT_EQ(back.find("exp_avg", "w")->pieces[1].offset, 3);
  EXPECT_EQ(back.find("exp_avg", "v"), nullptr);
  EXPECT_EQ(back.counter("samples"), 28);
  EXPECT_THROW(back.counter("nope"), Error);
  ASSERT_NE(back.find("param", "v"), nullptr);
  EXPECT_TRUE(back.find("param", "v")->pieces[1].tp.same_cut({.dim = 0, .parts = 2, .part = 1}));
  EXPECT_FALSE(back.find("param", "w")->pieces[0].tp.is_split());
}

// The manifest as an older braid wrote it: version `v`, no checksum.
std::string as_version(std::string text, int v) {
  text.replace(text.find("\"version\": 3"), 12, "\"version\": " + std::to_string(v));
  const size_t at = text.find(" \"checksum\"");
  text.erase(at, text.find('\n', at) + 1 - at);
  return text;
}

// A version 1 manifest (before placements) reads as whole-tensor pieces.
TEST(Manifest, ReadsVersionOne) {
  Manifest m = sample();
  m.tensors.pop_back();
  const std::string v1 = as_version(to_json(m), 1);
  const Manifest back = manifest_from_json(v1, "v1.json");
  EXPECT_EQ(back.version, 1);
  EXPECT_EQ(back.find("param", "w")->pieces.size(), 2u);
  EXPECT_FALSE(back.find("param", "w")->pieces[1].tp.is_split());
}

std::string error_of(const std::string& text) {
  try {
    manifest_from_json(text, "m.json");
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// Note [File table]: the manifest's checksum covers its content, not its whitespace.
TEST(Manifest, CarriesAChecksumOfItsContent) {
  const std::string good = to_json(sample());
  ASSERT_NE(good.find("\"checksum\": \"crc32c:"), std::string::npos);
  std::string spaced = good;
  spaced.replace(spaced.find("\"step\": 7"), 9, "\"step\":     7");
  EXPECT_EQ(manifest_from_json(spaced, "m.json").step, 7);
  std::string edited = good;
  edited.replace(edited.find("\"step\": 7"), 9, "\"step\": 9");
  EXPECT_NE(error_of(edited).find("m.json: its checksum says crc32c:"), std::string::npos)
      << error_of(edited);
  EXPECT_NE(error_of(edited).find("(the manifest was edited or damaged)"), std::string::npos);
  std::string unsealed = good;  // version 3 without its checksum
  const size_t at = unsealed.find(" \"checksum\"");
  unsealed.erase(at, unsealed.find('\n', at) + 1 - at);
  EXPECT_NE(error_of(unsealed).find("checksum"), std::string::npos) << error_of(unsealed);
}

TEST(Manifest, BadManifestsNameTheFileAndTheProblem) {
  std::string good = as_version(to_json(sample()), 2);  // unsealed: edits reach the checks
  EXPECT_NE(error_of("{").find("m.json: not valid JSON"), std::string::npos);
  EXPECT_NE(error_of("{}").find("not a braid checkpoint manifest"), std::string::npos);
  std::string v9 = good;
  v9.replace(v9.find("\"version\": 2"), 12, "\"version\": 9");
  EXPECT_NE(error_of(v9).find("manifest version 9"), std::string::npos);
  std::string past = good;
  past.replace(past.find("4108"), 4, "9108");  // a piece's byte offset past the file's end
  EXPECT_NE(error_of(past).find("past the end of rank-0000"), std::string::npos) << error_of(past);
  std::string escape = good;
  escape.replace(escape.find("rank-00001.bin"), 14, "../../etc/x");
  EXPECT_NE(error_of(escape).find("not a plain name"), std::string::npos);
  // A placement that does not cut the tensor's shape (3 parts of 2 rows).
  std::string cut = good;
  cut.replace(cut.find("\"parts\": 2"), 10, "\"parts\": 3");
  EXPECT_NE(error_of(cut).find("has placement shard(dim=0, part 0 of 3), which does not cut its "
                               "shape [2, 2]"),
            std::string::npos)
      << error_of(cut);
}

TEST(FileHeader, EncodesToOneBlockAndRejectsOtherBytes) {
  const std::string h = encode_header({"00ff00ff00ff00ff", 3, 4, 12});
  EXPECT_EQ(h.size(), static_cast<size_t>(kHeaderBytes));
  const FileHeader back = decode_header(h, "f");
  EXPECT_EQ(back.id, "00ff00ff00ff00ff");
  EXPECT_EQ(back.rank, 3);
  EXPECT_EQ(back.world_size, 4);
  EXPECT_EQ(back.step, 12);
  std::string other(static_cast<size_t>(kHeaderBytes), 'x');
  EXPECT_THROW(decode_header(other, "f"), Error);
}

// A rank file as the writer lays it out: header, pieces, table (Note [File table]).
fs::path write_rank_file(const fs::path& path, const FileTable& t, int64_t piece_bytes) {
  FileSink sink(path);
  const std::string header = encode_header({t.id, t.rank, t.world_size, t.step});
  sink.append(header.data(), header.size());
  const std::string pieces(static_cast<size_t>(piece_bytes), '\x01');
  sink.append(pieces.data(), pieces.size());
  FileTable framed = t;
  framed.data_bytes = kHeaderBytes + piece_bytes;
  const std::string table = encode_table(framed);
  sink.append(table.data(), table.size());
  sink.finish();
  return path;
}

// Rank 0's table of sample(): what the manifest says file 0 holds.
FileTable table_of_rank0(const Manifest& m) {
  FileTable t{m.id, 0, m.world_size, m.step, m.optimizer, m.counters, {}, 0, {}, 0};
  for (const TensorEntry& e : m.tensors)
    for (const PieceEntry& p : e.pieces)
      if (p.file == 0) t.pieces.push_back({e.kind, e.name, e.dtype, e.shape, p});
  return t;
}

std::string table_error(const FileTable& t, const Manifest& m) {
  try {
    check_table(t, m, 0, "ck");
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(FileTable, RoundTripsAndAgreesWithTheManifestOrSaysWhereNot) {
  const fs::path dir = fs::temp_directory_path() / ("braid_table_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const Manifest m = sample();
  const FileTable t = table_of_rank0(m);
  const fs::path file = write_rank_file(dir / "rank-00000.bin", t, 32);
  {
    const FileSource src(file);
    const std::optional<FileTable> back = read_table(src, "f");
    ASSERT_TRUE(back.has_value());
    EXPECT_EQ(back->pieces.size(), 3u);
    EXPECT_TRUE(back->pieces[2].piece.tp.same_cut({.dim = 0, .parts = 2, .part = 0}));
    EXPECT_EQ(table_error(*back, m), "");
  }
  // What the manifest could be edited to say, each named against the file's own table.
  Manifest moved = m;
  moved.tensors[0].pieces[0].byte_offset += 4;
  EXPECT_NE(table_error(t, moved).find("ck: manifest.json says rank-00000.bin holds param 'w' "
                                       "[2, 3] elements [0, 3) of replicate at byte 4100; the "
                                       "file's own table says param 'w' [2, 3] elements [0, 3) "
                                       "of replicate at byte 4096 (manifest.json was edited)"),
            std::string::npos)
      << table_error(t, moved);
  Manifest renamed = m;
  renamed.tensors[0].name = "v";
  EXPECT_NE(table_error(t, renamed).find("says rank-00000.bin holds param 'v'"), std::string::npos);
  Manifest later = m;
  later.step = 9;
  EXPECT_NE(table_error(t, later).find("rank-00000.bin was saved at step 7, manifest.json says "
                                       "step 9"),
            std::string::npos)
      << table_error(t, later);
  Manifest state = m;
  state.counters["samples"] = 40;
  EXPECT_NE(table_error(t, state).find("saved training state 'samples' = 28"), std::string::npos);
  Manifest other = m;
  other.id = "ffffffffffffffff";
  EXPECT_NE(table_error(t, other).find("another save"), std::string::npos);
  Manifest fewer = m;
  fewer.tensors.pop_back();
  EXPECT_NE(table_error(t, fewer).find("lists 2 pieces in rank-00000.bin, the file's own table 3"),
            std::string::npos)
      << table_error(t, fewer);

  // A damaged table or footer is refused; a file without one (before version 3) has none.
  const int64_t size = static_cast<int64_t>(fs::file_size(file));
  auto flipped_at = [&](int64_t at) {
    std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(at);
    f.put('#');
    f.close();
    try {
      read_table(FileSource(file), "f");
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_NE(flipped_at(kHeaderBytes + 32 + 5).find("f: its table of contents has checksum"),
            std::string::npos);
  write_rank_file(file, t, 32);
  EXPECT_NE(flipped_at(size - 30).find("f: its table footer is damaged"), std::string::npos);
  fs::resize_file(file, kHeaderBytes + 32);
  EXPECT_FALSE(read_table(FileSource(file), "f").has_value());
  fs::remove_all(dir);
}

// Version 4: a CRC-32C per block of each file, in the manifest and in the file's table, which
// must agree (Note [Verified reads]).
TEST(Manifest, CarriesBlockChecksumsThatTheTableMustAgreeWith) {
  Manifest m = sample();
  m.version = 4;
  m.block_bytes = 4096;
  m.files[0].blocks = {0x11111111, 0xabcdef01};
  m.files[1].blocks = {0x22222222, 0x33333333};
  const std::string text = to_json(m);
  EXPECT_EQ(text.find("\"checksum\": \"crc32c:deadbeef"), std::string::npos);
  const Manifest back = manifest_from_json(text, "m.json");
  EXPECT_EQ(back.version, 4);
  EXPECT_EQ(back.block_bytes, 4096);
  EXPECT_EQ(back.files[0].blocks, m.files[0].blocks);
  FileTable t = table_of_rank0(m);
  t.block_bytes = 4096;
  t.blocks = m.files[0].blocks;
  EXPECT_EQ(table_error(t, back), "");
  Manifest edited = back;
  edited.files[0].blocks[1] ^= 1;
  EXPECT_NE(table_error(t, edited).find("ck: rank-00000.bin's own table says block 1 has checksum "
                                        "crc32c:abcdef01, manifest.json says crc32c:abcdef00 "
                                        "(manifest.json was edited)"),
            std::string::npos)
      << table_error(t, edited);
  Manifest fewer = back;
  fewer.files[0].blocks.pop_back();
  EXPECT_NE(table_error(t, fewer).find("own table has 2 block checksums"), std::string::npos);
}

void flip_bit_at(const fs::path& file, int64_t at) {
  std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(at);
  char c = 0;
  f.read(&c, 1);
  c = static_cast<char>(c ^ 0x10);
  f.seekp(at);
  f.write(&c, 1);
}

std::vector<char> random_bytes(size_t n, uint64_t seed) {
  Rng rng(seed);
  std::vector<char> v(n);
  for (char& c : v) c = static_cast<char>(rng.below(256));
  return v;
}

// FileSink's block checksums: block k's over bytes [k B, (k + 1) B), whatever the appends.
TEST(FileSink, KeepsACrcPerBlockWhateverTheAppends) {
  const fs::path file = fs::temp_directory_path() / ("braid_sink_" + std::to_string(::getpid()));
  const std::vector<char> v = random_bytes(5 * 4096 + 100, 1);
  FileSink sink(file, /*direct=*/false, /*block_bytes=*/8192);
  for (size_t at = 0, n = 1; at < v.size(); at += n, n = n * 3 + 1)
    sink.append(v.data() + at, std::min(n, v.size() - at));
  sink.finish();
  const std::vector<uint32_t> blocks = sink.block_crcs();
  ASSERT_EQ(blocks.size(), 3u);
  for (size_t k = 0; k < 3; ++k)
    EXPECT_EQ(blocks[k],
              crc32c(0, v.data() + k * 8192, std::min<size_t>(8192, v.size() - k * 8192)));
  EXPECT_EQ(sink.crc32c(), crc32c(0, v.data(), v.size()));
  fs::remove(file);
}

// Note [Verified reads]: a range is read with the blocks that cover it, each checked once; a
// block checked before is not read again beyond what is asked; a bad block throws naming the
// file and the block, or (deferred) is remembered while the reads go on.
TEST(VerifiedFile, ReadsOnlyTheCoveringBlocksAndChecksEachOnce) {
  const fs::path file = fs::temp_directory_path() / ("braid_vf_" + std::to_string(::getpid()));
  const int64_t B = 8192, data = 6 * B + 1000;
  std::vector<char> v = random_bytes(static_cast<size_t>(data) + 300, 2);  // 300: "the table"
  FileSink sink(file, false, B);
  sink.append(v.data(), static_cast<size_t>(data));
  const std::vector<uint32_t> blocks = sink.block_crcs();
  sink.append(v.data() + data, 300);
  sink.finish();
  auto open = [&] {
    return VerifiedFile(std::make_unique<FileSource>(file), B, blocks, data, "ck: f");
  };
  {
    VerifiedFile f = open();
    std::vector<char> out(static_cast<size_t>(B + 10));
    f.read(B + B / 2, out.data(), out.size());  // inside blocks 1 and 2: both read whole
    EXPECT_EQ(std::memcmp(out.data(), v.data() + B + B / 2, out.size()), 0);
    EXPECT_EQ(f.source().bytes_read(), 2 * B);
    f.read(B + 8, out.data(), 100);  // checked already: just the 100 bytes
    EXPECT_EQ(std::memcmp(out.data(), v.data() + B + 8, 100), 0);
    EXPECT_EQ(f.source().bytes_read(), 2 * B + 100);
    f.read(data - 50, out.data(), 50);  // the short last block
    EXPECT_EQ(std::memcmp(out.data(), v.data() + data - 50, 50), 0);
    EXPECT_EQ(f.source().bytes_read(), 2 * B + 100 + 1000);
    EXPECT_THROW(f.read(data - 10, out.data(), 20), Error);  // past the checked bytes
    std::vector<char> all(static_cast<size_t>(data));
    f.read(0, all.data(), all.size());
    EXPECT_EQ(std::memcmp(all.data(), v.data(), all.size()), 0);
  }
  flip_bit_at(file, 3 * B + 7);
  {
    VerifiedFile f = open();
    std::vector<char> out(100);
    f.read(0, out.data(), 100);  // block 0 is good
    try {
      f.read(3 * B + 4000, out.data(), 100);
      ADD_FAILURE() << "a flipped byte was not caught";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("ck: f has checksum crc32c:"), std::string::npos);
      EXPECT_NE(std::string(e.what()).find("in block 3 (bytes [24576, 32768)), its table and the "
                                           "manifest say " +
                                           format_crc32c(blocks[3]) + " (the file is corrupt)"),
                std::string::npos)
          << e.what();
    }
    EXPECT_THROW(f.verify_all(), Error);
  }
  {
    VerifiedFile f = open();
    f.defer();
    std::vector<char> all(static_cast<size_t>(data));
    f.read(0, all.data(), all.size());  // goes on
    EXPECT_NE(f.first_error().find("in block 3"), std::string::npos) << f.first_error();
  }
  fs::remove(file);
}

TEST(CheckpointDir, NamesListingAndPruning) {
  EXPECT_EQ(step_dir_name(100), "step-00000100");
  EXPECT_EQ(step_of("step-00000100"), 100);
  EXPECT_EQ(step_of("step-"), -1);
  EXPECT_EQ(step_of("step-12x"), -1);
  EXPECT_EQ(step_of(".tmp-step-00000100"), -1);
  const fs::path root = fs::temp_directory_path() / ("braid_ckdir_" + std::to_string(::getpid()));
  fs::remove_all(root);
  for (int s : {2, 4, 6}) {
    fs::create_directories(root / step_dir_name(s));
    std::ofstream(root / step_dir_name(s) / kManifestName) << "{}";
  }
  fs::create_directories(root / step_dir_name(8));  // no manifest: not a checkpoint
  fs::create_directories(root / temp_dir_name(10));
  auto list = checkpoints_newest_first(root);
  ASSERT_EQ(list.size(), 3u);
  EXPECT_EQ(list[0].filename(), step_dir_name(6));
  publish(root, step_dir_name(4), /*keep_last=*/1);
  list = checkpoints_newest_first(root);
  ASSERT_EQ(list.size(), 2u);  // step 2 pruned; 6 is newer than what was published: kept
  EXPECT_EQ(list[0].filename(), step_dir_name(4));  // `latest` first
  EXPECT_EQ(list[1].filename(), step_dir_name(6));
  EXPECT_FALSE(fs::exists(root / temp_dir_name(10)));
  EXPECT_EQ(read_small_file(root / kLatestName), step_dir_name(4) + "\n");
  fs::remove_all(root);
}

// Whatever `latest` is, the step directories are listed; what was passed over is said.
TEST(CheckpointDir, AnUnusableLatestOrAStepWithoutManifestIsPassedOverWithALine) {
  const fs::path root = fs::temp_directory_path() / ("braid_latest_" + std::to_string(::getpid()));
  fs::remove_all(root);
  for (int s : {2, 4}) {
    fs::create_directories(root / step_dir_name(s));
    std::ofstream(root / step_dir_name(s) / kManifestName) << "{}";
  }
  fs::create_directories(root / step_dir_name(6));  // no manifest
  auto listed = [&](std::vector<std::string>& notes) {
    notes.clear();
    const auto list = checkpoints_newest_first(root, &notes);
    std::string names;
    for (const auto& p : list) names += p.filename().string() + " ";
    return names;
  };
  const std::string both = step_dir_name(4) + " " + step_dir_name(2) + " ";
  std::vector<std::string> notes;
  EXPECT_EQ(listed(notes), both);
  ASSERT_EQ(notes.size(), 1u);
  EXPECT_EQ(notes[0], "skipping " + (root / step_dir_name(6)).string() +
                          ": no manifest.json (not a checkpoint, or a save that did not finish)");
  const std::string latest = (root / kLatestName).string();
  fs::create_directories(root / kLatestName);  // a directory
  EXPECT_EQ(listed(notes), both);
  EXPECT_EQ(notes[0], latest + " is not a file; taking the newest step directory instead");
  fs::remove_all(root / kLatestName);
  std::ofstream(root / kLatestName) << "\x7f\x01garbage";
  EXPECT_EQ(listed(notes), both);
  EXPECT_NE(notes[0].find("not a step directory; taking the newest"), std::string::npos);
  std::ofstream(root / kLatestName) << step_dir_name(8) << "\n";  // dangling
  EXPECT_EQ(listed(notes), both);
  EXPECT_EQ(notes[0], latest + " names " + step_dir_name(8) +
                          ", which is not a saved checkpoint; taking the newest step directory "
                          "instead");
  fs::remove(root / kLatestName);
  fs::create_symlink(root / "nowhere", root / kLatestName);
  EXPECT_EQ(listed(notes), both);
  EXPECT_EQ(notes[0], latest + " is a dangling link; taking the newest step directory instead");
  // Publishing replaces whatever `latest` was.
  fs::remove(root / kLatestName);
  fs::create_directories(root / kLatestName / "x");
  publish(root, step_dir_name(2), 0);
  EXPECT_EQ(read_small_file(root / kLatestName), step_dir_name(2) + "\n");
  fs::remove_all(root);
}

TEST(CheckpointDir, UnfinishedSavesAreRemovedSayingSo) {
  const fs::path root = fs::temp_directory_path() / ("braid_tmp_" + std::to_string(::getpid()));
  fs::remove_all(root);
  fs::create_directories(root / temp_dir_name(6) / "sub");
  std::ofstream(root / temp_dir_name(6) / "rank-00000.bin") << "partial";
  fs::create_directories(root / step_dir_name(4));
  std::vector<std::string> notes;
  remove_unfinished_saves(root, &notes);
  EXPECT_FALSE(fs::exists(root / temp_dir_name(6)));
  EXPECT_TRUE(fs::exists(root / step_dir_name(4)));
  ASSERT_EQ(notes.size(), 1u);
  EXPECT_EQ(notes[0],
            "removed " + (root / temp_dir_name(6)).string() + ", a save that did not finish");
  remove_unfinished_saves(root / "absent", &notes);  // never throws
  fs::remove_all(root);
}

}  // namespace
}  // namespace braid::checkpoint
