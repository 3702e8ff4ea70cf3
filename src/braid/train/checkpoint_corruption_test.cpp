// The corruption matrix (label fault; Note [File table], checkpoint/file_table.h): every way one
// file of a checkpoint can be damaged or edited. For each, on the newest of a two-rank run's
// checkpoints (steps 2 and 4):
//   - `braid checkpoint verify` fails, naming the file and what is wrong;
//   - an explicit resume from it fails the same way, on every rank, in one line;
//   - auto-resume falls back to step 2 with a line saying why, and the run then ends with the
//     straight run's bits.
// A bad block met while loading fails the load on every rank, which falls back together.
// And for each way the checkpoint root can be damaged (`latest`, a step directory without a
// manifest, a save left unfinished), auto-resume resumes from the newest valid checkpoint,
// saying what it passed over.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <mutex>

#include "braid/checkpoint/file_io.h"
#include "braid/checkpoint/manifest.h"
#include "braid/checkpoint/resume.h"
#include "braid/train/checkpoint_tools.h"
#include "testing/train/checkpoint_test_util.h"

namespace braid::train {
namespace {

namespace fs = std::filesystem;
using checkpoint::kManifestName;

const std::string f0 = checkpoint::rank_file_name(0), f1 = checkpoint::rank_file_name(1);
const std::string s2 = checkpoint::step_dir_name(2), s4 = checkpoint::step_dir_name(4);

// One damage to run/step-00000004 and the parts of the error it must give.
struct Damage {
  std::string name;
  std::function<void(const fs::path& run)> apply;
  std::vector<std::string> says;
};

void PrintTo(const Damage& d, std::ostream* os) {
  *os << d.name;
}

// The manifest edited and sealed again with a valid checksum, as a careful editor would.
void resealed(const fs::path& run, const std::function<void(checkpoint::Manifest&)>& edit) {
  const fs::path path = run / s4 / kManifestName;
  checkpoint::Manifest m =
      checkpoint::manifest_from_json(checkpoint::read_small_file(path), path.string());
  edit(m);
  std::ofstream(path, std::ios::trunc) << checkpoint::to_json(m);
}

// The first piece the manifest says file 0 holds.
checkpoint::PieceEntry& first_piece_of_file0(checkpoint::Manifest& m) {
  for (auto& t : m.tensors)
    for (auto& p : t.pieces)
      if (p.file == 0) return p;
  throw Error("no piece in file 0");
}

void replace_in(const fs::path& file, const std::string& from, const std::string& to) {
  std::string text = checkpoint::read_small_file(file);
  const size_t at = text.find(from);
  ASSERT_NE(at, std::string::npos) << from;
  text.replace(at, from.size(), to);
  std::ofstream(file, std::ios::trunc) << text;
}

std::vector<Damage> damages() {
  const std::string edited = "(manifest.json was edited)";
  return {
      {"data_byte_flipped",
       [](const fs::path& r) { flip_bit(r / s4 / f1, 5000); },
       {f1 + " has checksum", "the file is corrupt"}},
      {"header_byte_flipped",
       [](const fs::path& r) { flip_bit(r / s4 / f0, 2); },
       {f0 + ": not a braid checkpoint file (bad header)"}},
      {"table_byte_flipped",
       [](const fs::path& r) { flip_bit(r / s4 / f0, fs::file_size(r / s4 / f0) - 100); },
       {f0 + ": its table of contents has checksum", "(the file is damaged)"}},
      {"truncated",
       [](const fs::path& r) { fs::resize_file(r / s4 / f1, fs::file_size(r / s4 / f1) - 100); },
       {f1 + " is ", "(truncated"}},
      {"appended_to",
       [](const fs::path& r) { std::ofstream(r / s4 / f0, std::ios::app) << "xx"; },
       {f0 + " is ", "(appended to"}},
      {"files_swapped",
       [](const fs::path& r) {
         fs::rename(r / s4 / f0, r / s4 / "x");
         fs::rename(r / s4 / f1, r / s4 / f0);
         fs::rename(r / s4 / "x", r / s4 / f1);
       },
       {f0 + " holds rank 1's shards", "(files swapped?)"}},
      {"file_of_another_checkpoint",
       [](const fs::path& r) {
         fs::copy_file(r / s2 / f1, r / s4 / f1, fs::copy_options::overwrite_existing);
       },
       {f1 + " belongs to checkpoint", "from another save"}},
      {"file_deleted", [](const fs::path& r) { fs::remove(r / s4 / f0); }, {f0 + " is missing"}},
      {"manifest_deleted",
       [](const fs::path& r) { fs::remove(r / s4 / kManifestName); },
       {"no manifest.json"}},
      {"manifest_truncated",
       [](const fs::path& r) {
         fs::resize_file(r / s4 / kManifestName, fs::file_size(r / s4 / kManifestName) / 2);
       },
       {"manifest.json: not valid JSON"}},
      {"manifest_garbage",
       [](const fs::path& r) {
         std::ofstream(r / s4 / kManifestName, std::ios::trunc) << "\x7f\x45garbage";
       },
       {"manifest.json: not valid JSON"}},
      {"manifest_edited",
       [](const fs::path& r) { replace_in(r / s4 / kManifestName, "\"step\": 4", "\"step\": 2"); },
       {"manifest.json: its checksum says", "(the manifest was edited or damaged)"}},
      {"resealed_piece_offset",
       [](const fs::path& r) {
         resealed(r, [](checkpoint::Manifest& m) { first_piece_of_file0(m).byte_offset += 4; });
       },
       {"manifest.json says " + f0 + " holds", "the file's own table says", edited}},
      {"resealed_piece_size",
       [](const fs::path& r) {
         resealed(r, [](checkpoint::Manifest& m) { first_piece_of_file0(m).numel -= 1; });
       },
       {"manifest.json says " + f0 + " holds", "the file's own table says", edited}},
      {"resealed_names_swapped",
       [](const fs::path& r) {
         resealed(r, [](checkpoint::Manifest& m) {
           std::swap(m.tensors[0].name, m.tensors.back().name);
         });
       },
       {"manifest.json says rank-0000", "holds param", "the file's own table says", edited}},
      {"resealed_step",
       [](const fs::path& r) { resealed(r, [](checkpoint::Manifest& m) { m.step = 2; }); },
       {"manifest.json says step 2 but the directory is " + s4}},
      {"resealed_checkpoint_id",
       [](const fs::path& r) {
         resealed(r, [](checkpoint::Manifest& m) { m.id = "0123456789abcdef"; });
       },
       {f0 + " belongs to checkpoint", "the manifest is of checkpoint 0123456789abcdef"}},
      {"resealed_training_state",
       [](const fs::path& r) {
         resealed(r, [](checkpoint::Manifest& m) { m.counters["samples"] += 8; });
       },
       {f0 + " saved training state 'samples'", edited}},
      {"resealed_file_size",
       [](const fs::path& r) {
         resealed(r, [](checkpoint::Manifest& m) { m.files[1].bytes += 4; });
       },
       {f1 + " is ", "bytes, the manifest says"}},
      {"resealed_block_checksum",
       [](const fs::path& r) {
         resealed(r, [](checkpoint::Manifest& m) { m.files[1].blocks[0] ^= 1; });
       },
       {f1 + "'s own table says block 0 has checksum", edited}},
      // An older version without a checksum, edited: the files' tables still say what they hold.
      {"downgraded_and_edited",
       [](const fs::path& r) {
         resealed(r, [](checkpoint::Manifest& m) {
           first_piece_of_file0(m).byte_offset += 4;
           m.version = 2;
         });
         const fs::path p = r / s4 / kManifestName;
         std::string text = checkpoint::read_small_file(p);
         const size_t at = text.find(" \"checksum\"");
         text.erase(at, text.find('\n', at) + 1 - at);
         std::ofstream(p, std::ios::trunc) << text;
       },
       {"the file's own table says", edited}},
  };
}

// The straight run (Note [Resume setting], DDP on 2 ranks) once: its weights and its directory.
struct Straight {
  fs::path run;
  Tensor weights;
};
const Straight& straight() {
  static const Straight s = [] {
    const fs::path root = private_temp_dir("braid_corruption");
    fs::remove_all(root);
    config::TrainConfig c = resume_config((root / "straight").string());
    c.parallel.strategy = "ddp";
    Tensor w = train_ranks(2, c);
    return Straight{root / "straight", w};
  }();
  return s;
}

// A fresh copy of the straight run's checkpoints under `name`.
fs::path copy_of_straight(const std::string& name) {
  const fs::path run = straight().run.parent_path() / name;
  fs::remove_all(run);
  fs::copy(straight().run, run, fs::copy_options::recursive);
  return run;
}

// What every rank says opening `dir` as an explicit resume; rank 0's, which must be one line.
std::string explicit_resume_error(const fs::path& dir) {
  auto errors = braid::testing::run_ranks_collect(2, [&](comm::ProcessGroup& pg) {
    checkpoint::open_resume_checkpoint(dir.string(), "", &pg, [](const std::string&) {});
  });
  const std::string first = braid::testing::what(errors[0]);
  EXPECT_EQ(first.find('\n'), std::string::npos) << first;
  for (auto& e : errors) EXPECT_FALSE(braid::testing::what(e).empty());
  return first;
}

// Auto-resume under run on 2 ranks: the step it opens and rank 0's lines.
std::pair<int64_t, std::vector<std::string>> auto_resume(const fs::path& run) {
  std::vector<std::string> said;
  std::vector<int64_t> steps(2, -1);
  std::mutex mu;
  braid::testing::run_ranks(2, [&](comm::ProcessGroup& pg) {
    auto reader = checkpoint::open_resume_checkpoint("auto", run, &pg, [&](const std::string& s) {
      std::lock_guard<std::mutex> lock(mu);
      if (pg.rank() == 0) said.push_back(s);
    });
    std::lock_guard<std::mutex> lock(mu);
    steps[static_cast<size_t>(pg.rank())] = reader ? reader->manifest().step : -1;
  });
  EXPECT_EQ(steps[0], steps[1]);
  return {steps[0], said};
}

// The run continued from whatever auto-resume finds under run: its final weights.
Tensor resumed_weights(const fs::path& run) {
  config::TrainConfig c = resume_config(run.string());
  c.parallel.strategy = "ddp";
  return train_ranks(2, c);
}

class Corruption : public ::testing::TestWithParam<Damage> {};

TEST_P(Corruption, IsNamedByVerifyAndResumeAndAutoResumeFallsBackToTheStraightRunsBits) {
  const Damage& d = GetParam();
  const fs::path run = copy_of_straight(d.name);
  d.apply(run);
  std::string verify_error;
  try {
    verify_checkpoint(run / s4);
  } catch (const Error& e) {
    verify_error = e.what();
  }
  const std::string resume_error = explicit_resume_error(run / s4);
  for (const std::string& part : d.says) {
    EXPECT_NE(verify_error.find(part), std::string::npos) << verify_error << "\nwants: " << part;
    EXPECT_NE(resume_error.find(part), std::string::npos) << resume_error << "\nwants: " << part;
  }
  const auto [step, said] = auto_resume(run);
  EXPECT_EQ(step, 2);
  std::string lines;
  for (const std::string& s : said) lines += s + "\n";
  EXPECT_NE(lines.find((run / s4).string()), std::string::npos) << lines;
  EXPECT_NE(lines.find(d.says.front()), std::string::npos) << lines;
  EXPECT_TRUE(braid::testing::bit_equal(resumed_weights(run), straight().weights));
  fs::remove_all(run);
}

INSTANTIATE_TEST_SUITE_P(EveryDamage, Corruption, ::testing::ValuesIn(damages()),
                         [](const auto& info) { return info.param.name; });

// Note [Verified reads]: under zero3 each rank reads (mostly) its own file's pieces; a flipped
// byte in rank 1's is caught while loading, every rank passes the checkpoint over together, and
// what was loaded of it is dropped: the run resumes from step 2 and ends with the straight run's
// bits. An explicit resume from it fails on every rank, naming the file and the block.
TEST(CorruptionWhileLoading, ABadBlockOneRankReadsFallsBackOnEveryRank) {
  const fs::path root = private_temp_dir("braid_corrupt_load");
  fs::remove_all(root);
  config::TrainConfig c = resume_config((root / "run").string());
  c.parallel.strategy = "zero3";
  TrainerOptions o = quiet();
  o.checkpoint_block_bytes = 4096;
  const Tensor straight = train_ranks(2, c, o);
  const fs::path bad = root / "run" / s4;
  flip_bit(bad / f1, 2 * 4096 + 100);  // in block 2 of rank 1's file

  config::TrainConfig named = c;
  named.training.resume = bad.string();
  auto errors = braid::testing::run_ranks_collect(
      2, [&](comm::ProcessGroup& pg) { Trainer t(named, borrow(pg), o); });
  for (auto& e : errors) {
    const std::string what = braid::testing::what(e);
    EXPECT_NE(what.find(f1 + " has checksum"), std::string::npos) << what;
    EXPECT_NE(what.find("in block 2"), std::string::npos) << what;
  }

  std::vector<int64_t> started(2, -1);
  Tensor resumed;
  std::mutex mu;
  braid::testing::run_ranks(2, [&](comm::ProcessGroup& pg) {
    Trainer t(c, borrow(pg), o);
    const Tensor w = train_and_gather(t);
    std::lock_guard<std::mutex> lock(mu);
    started[static_cast<size_t>(pg.rank())] = t.start_step();
    if (pg.rank() == 0) resumed = w;
  });
  EXPECT_EQ(started, (std::vector<int64_t>{2, 2}));
  EXPECT_TRUE(braid::testing::bit_equal(resumed, straight));
  fs::remove_all(root);
}

// Damage to the checkpoint root rather than a checkpoint: the newest valid one is used, and
// what was passed over is said.
struct RootDamage {
  std::string name;
  std::function<void(const fs::path& run)> apply;
  std::string says;
};

void PrintTo(const RootDamage& d, std::ostream* os) {
  *os << d.name;
}

class RootCorruption : public ::testing::TestWithParam<RootDamage> {};

TEST_P(RootCorruption, AutoResumeTakesTheNewestValidCheckpointSayingWhatItPassedOver) {
  const RootDamage& d = GetParam();
  const fs::path run = copy_of_straight("root_" + d.name);
  d.apply(run);
  const std::string ok = verify_checkpoint(run);
  EXPECT_NE(ok.find("ok: " + (run / s4).string()), std::string::npos) << ok;
  const auto [step, said] = auto_resume(run);
  EXPECT_EQ(step, 4);
  std::string lines;
  for (const std::string& s : said) lines += s + "\n";
  EXPECT_NE(lines.find(d.says), std::string::npos) << lines << "wants: " << d.says;
  EXPECT_TRUE(braid::testing::bit_equal(resumed_weights(run), straight().weights));
  fs::remove_all(run);
}

INSTANTIATE_TEST_SUITE_P(
    EveryDamage, RootCorruption,
    ::testing::Values(
        RootDamage{"latest_a_directory",
                   [](const fs::path& r) {
                     fs::remove(r / checkpoint::kLatestName);
                     fs::create_directories(r / checkpoint::kLatestName);
                   },
                   "latest is not a file; taking the newest step directory instead"},
        RootDamage{"latest_garbage",
                   [](const fs::path& r) {
                     std::ofstream(r / checkpoint::kLatestName, std::ios::trunc) << "\x01\x02zz";
                   },
                   "not a step directory; taking the newest step directory instead"},
        RootDamage{"latest_dangling",
                   [](const fs::path& r) {
                     std::ofstream(r / checkpoint::kLatestName, std::ios::trunc)
                         << checkpoint::step_dir_name(8) << "\n";
                   },
                   "names " + checkpoint::step_dir_name(8) + ", which is not a saved checkpoint"},
        RootDamage{
            "step_without_manifest",
            [](const fs::path& r) { fs::create_directories(r / checkpoint::step_dir_name(6)); },
            "/" + checkpoint::step_dir_name(6) + ": no manifest.json"},
        RootDamage{"unfinished_save_left",
                   [](const fs::path& r) {
                     fs::create_directories(r / checkpoint::temp_dir_name(6));
                     std::ofstream(r / checkpoint::temp_dir_name(6) / f0) << "partial";
                   },
                   checkpoint::temp_dir_name(6) + ", a save that did not finish"}),
    [](const auto& info) { return info.param.name; });

}  // namespace
}  // namespace braid::train
