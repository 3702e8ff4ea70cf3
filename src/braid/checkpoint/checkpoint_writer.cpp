#include "braid/checkpoint/checkpoint_writer.h"

#include <chrono>
#include <map>
#include <random>
#include <sstream>
#include <tuple>

#include "braid/checkpoint/checkpoint_dir.h"
#include "braid/checkpoint/file_io.h"
#include "braid/checkpoint/manifest.h"
#include "braid/core/error.h"
#include "braid/parallel/collective_guard.h"
#include "braid/parallel/gather_strings.h"

namespace braid::checkpoint {

namespace fs = std::filesystem;

namespace {

using Key = std::tuple<std::string, int64_t, int64_t>;  // name, offset, numel

// Note [One writer per range]: a range several ranks hold (DDP's replicas, hybrid's
// replicated shards) is written by one of them: ranges in name order, each to the holder with
// the fewest bytes so far (ties: the lowest rank). Every rank computes the same assignment
// from the same gathered lists.
std::map<Key, int> assign_writers(const std::vector<std::string>& held_by_rank) {
  std::map<Key, std::vector<int>> holders;
  for (size_t r = 0; r < held_by_rank.size(); ++r) {
    std::istringstream in(held_by_rank[r]);
    std::string name;
    int64_t offset = 0, numel = 0;
    while (std::getline(in, name, '\t') && in >> offset >> numel) {
      in.ignore(1);  // '\n'
      holders[{name, offset, numel}].push_back(static_cast<int>(r));
    }
  }
  std::vector<int64_t> load(held_by_rank.size(), 0);
  std::map<Key, int> writer;
  for (auto& [key, ranks] : holders) {
    int best = ranks.front();
    for (int r : ranks)
      if (load[static_cast<size_t>(r)] < load[static_cast<size_t>(best)]) best = r;
    load[static_cast<size_t>(best)] += std::get<2>(key);
    writer[key] = best;
  }
  return writer;
}

std::string new_id() {
  std::random_device rd;
  const uint64_t t =
      static_cast<uint64_t>(std::chrono::high_resolution_clock::now().time_since_epoch().count());
  const uint64_t v = (static_cast<uint64_t>(rd()) << 32 ^ rd()) ^ t;
  char buf[20];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

// One rank's pieces: "kind\tname\tdims,\toffset numel byte_offset\n".
struct WrittenPiece {
  std::string kind, name;
  Shape shape;
  PieceEntry piece;
};

std::string encode(const std::vector<WrittenPiece>& pieces, int64_t bytes, uint32_t crc) {
  std::ostringstream out;
  out << bytes << ' ' << crc << '\n';
  for (const WrittenPiece& p : pieces) {
    out << p.kind << '\t' << p.name << '\t';
    for (int64_t d : p.shape.vec()) out << d << ',';
    out << '\t' << p.piece.offset << ' ' << p.piece.numel << ' ' << p.piece.byte_offset << '\n';
  }
  return out.str();
}

void decode_into(const std::string& text, int file, Manifest& m,
                 std::map<std::pair<std::string, std::string>, size_t>& index) {
  std::istringstream in(text);
  FileEntry& f = m.files[static_cast<size_t>(file)];
  in >> f.bytes >> f.crc32c;
  in.ignore(1);
  std::string kind, name, dims;
  while (std::getline(in, kind, '\t') && std::getline(in, name, '\t') &&
         std::getline(in, dims, '\t')) {
    PieceEntry p;
    p.file = file;
    in >> p.offset >> p.numel >> p.byte_offset;
    in.ignore(1);
    auto [it, fresh] = index.try_emplace({kind, name}, m.tensors.size());
    if (fresh) {
      std::vector<int64_t> d;
      std::istringstream ds(dims);
      for (std::string x; std::getline(ds, x, ',');) d.push_back(std::stoll(x));
      m.tensors.push_back({kind, name, DType::f32, Shape(d), {}});
    }
    m.tensors[it->second].pieces.push_back(p);
  }
}

}  // namespace

// Note [Atomic save]: every rank writes its file into root/.tmp-step-N and fsyncs it; rank 0
// then writes the manifest (sizes and checksums of every file), fsyncs the directory, renames
// it to root/step-N, and only then moves `latest` and prunes. A save that dies anywhere leaves
// the previous checkpoint and `latest` as they were; the next save removes the leftovers.
SaveResult save_checkpoint(comm::ProcessGroup* group, optim::Optimizer& optimizer,
                           const SaveRequest& req) {
  const auto t0 = std::chrono::steady_clock::now();
  const int rank = group ? group->rank() : 0;
  const int world = group ? group->size() : 1;
  auto stage = [&](const char* s) {
    if (req.fault) req.fault(s);
  };
  const fs::path tmp = req.root / temp_dir_name(req.step);
  const std::string id = parallel::all_gather_strings(group, new_id())[0];

  std::ostringstream held;
  for (const optim::ParamGroup& g : optimizer.groups())
    for (const optim::ParamSlice& s : g.params)
      held << s.name() << '\t' << s.shard.offset << ' ' << s.shard.numel << '\n';
  const std::map<Key, int> writer = assign_writers(parallel::all_gather_strings(group, held.str()));

  parallel::all_ranks_or_throw(group, [&] {
    if (rank != 0) return;
    stage("create");
    fs::create_directories(req.root);
    fs::remove_all(tmp);
    fs::create_directory(tmp);
  });

  std::string mine;
  parallel::all_ranks_or_throw(group, [&] {
    stage("write");
    FileSink sink(tmp / rank_file_name(rank));
    const std::string header = encode_header({id, rank, world, req.step});
    sink.append(header.data(), header.size());
    std::vector<WrittenPiece> pieces;
    auto put = [&](const std::string& kind, const optim::ParamSlice& s, const Tensor& t) {
      BRAID_CHECK(t.dtype() == DType::f32 && t.numel() == s.shard.numel, "checkpoint: ", kind,
                  " of '", s.name(), "' is not ", s.shard.numel, " f32 elements");
      pieces.push_back({kind,
                        s.name(),
                        s.shard.global_shape,
                        {rank, s.shard.offset, s.shard.numel, sink.bytes()}});
      sink.append(t.raw_data(), static_cast<size_t>(t.numel()) * 4);
    };
    const auto& states = optimizer.state_names();
    optimizer.visit_slices(
        [&](const optim::ParamSlice& s, optim::SliceSlot& slot) {
          if (writer.at({s.name(), s.shard.offset, s.shard.numel}) != rank) return;
          put("param", s, slot.param);
          for (size_t k = 0; k < states.size(); ++k) put(states[k], s, slot.state[k]);
        },
        /*write=*/false);
    stage("sync");
    sink.finish();
    mine = encode(pieces, sink.bytes(), sink.crc32c());
  });

  const std::vector<std::string> all = parallel::all_gather_strings(group, mine);
  SaveResult result;
  result.dir = req.root / step_dir_name(req.step);
  Manifest m;
  m.id = id;
  m.step = req.step;
  m.layout = req.layout;
  m.world_size = world;
  m.dp_size = req.dp_size;
  m.optimizer = optimizer.name();
  m.counters = req.counters;
  m.config = req.config;
  std::map<std::pair<std::string, std::string>, size_t> index;
  for (int r = 0; r < world; ++r) {
    m.files.push_back({rank_file_name(r), r, 0, 0});
    decode_into(all[static_cast<size_t>(r)], r, m, index);
  }
  result.bytes = m.total_bytes();

  parallel::all_ranks_or_throw(group, [&] {
    if (rank != 0) return;
    stage("manifest");
    {
      const std::string text = to_json(m);
      FileSink sink(tmp / kManifestName);
      sink.append(text.data(), text.size());
      sink.finish();
    }
    sync_directory(tmp);
    stage("rename");
    std::error_code ec;
    fs::remove_all(result.dir, ec);  // a step saved before by a run that went on to fail
    fs::rename(tmp, result.dir, ec);
    BRAID_CHECK(!ec, "checkpoint: cannot rename ", tmp.string(), " to ", result.dir.string(), ": ",
                ec.message());
    sync_directory(req.root);
    stage("publish");
    publish(req.root, step_dir_name(req.step), req.keep_last);
  });
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return result;
}

}  // namespace braid::checkpoint
