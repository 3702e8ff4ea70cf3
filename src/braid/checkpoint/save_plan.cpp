#include "braid/checkpoint/save_plan.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <random>
#include <sstream>

#include "braid/checkpoint/checkpoint_dir.h"
#include "braid/checkpoint/file_io.h"
#include "braid/checkpoint/file_table.h"
#include "braid/comm/chunking.h"
#include "braid/comm/collective_guard.h"
#include "braid/comm/gather_strings.h"
#include "braid/core/error.h"

namespace braid::checkpoint {

namespace fs = std::filesystem;

namespace {

using Key = std::tuple<std::string, std::string, int64_t, int64_t>;

// The tp placement as text: "-" for the whole tensor, else "dim,sections,parts,part,padded".
std::string encode_tp(const TpSlice& s) {
  if (!s.is_split()) return "-";
  std::ostringstream os;
  os << s.dim << ',' << s.sections << ',' << s.parts << ',' << s.part << ',' << s.padded;
  return os.str();
}

TpSlice decode_tp(const std::string& text) {
  TpSlice s;
  if (text == "-") return s;
  char c = 0;
  std::istringstream in(text);
  in >> s.dim >> c >> s.sections >> c >> s.parts >> c >> s.part >> c >> s.padded;
  return s;
}

Key key_of(const optim::ParamSlice& s) {
  return {s.name(), encode_tp(s.shard.tp), s.shard.offset, s.shard.numel};
}

// Note [One writer per range]: a range several ranks hold (DDP's replicas, hybrid's
// replicated shards) is written by one of them: ranges largest first (ties in name order), each
// to the holder with the fewest bytes so far (ties: the lowest rank; comm::LeastLoaded). Every rank
// computes the same assignment from the same gathered lists. A copy that does not count (Note
// [Placements]) is held by no one here: the counted copy of the same elements is written instead.
std::map<Key, int> assign_writers(const std::vector<std::string>& held_by_rank) {
  std::map<Key, std::vector<int>> holders;
  for (size_t r = 0; r < held_by_rank.size(); ++r) {
    std::istringstream in(held_by_rank[r]);
    std::string name, tp;
    int64_t offset = 0, numel = 0;
    while (std::getline(in, name, '\t') && std::getline(in, tp, '\t') && in >> offset >> numel) {
      in.ignore(1);  // '\n'
      holders[{name, tp, offset, numel}].push_back(static_cast<int>(r));
    }
  }
  std::vector<const std::pair<const Key, std::vector<int>>*> ranges;
  std::vector<int64_t> sizes;
  for (const auto& h : holders) {
    ranges.push_back(&h);
    sizes.push_back(std::get<3>(h.first));
  }
  comm::LeastLoaded writers(static_cast<int>(held_by_rank.size()));
  std::map<Key, int> writer;
  // In key order among equal sizes: ranges is sorted by key already.
  for (size_t i : comm::largest_first(sizes, std::less<size_t>()))
    writer[ranges[i]->first] = writers.take(sizes[i], ranges[i]->second);
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

// A rank's file as the finish gathers it: "bytes crc blocks\n" (blocks: blocks_to_hex, or "-"
// for none), then a line per piece,
// "kind\tname\tdims,\ttp\toffset numel byte_offset\n" (tp: encode_tp).
void decode_into(const std::string& text, int file, Manifest& m,
                 std::map<std::pair<std::string, std::string>, size_t>& index) {
  std::istringstream in(text);
  FileEntry& f = m.files[static_cast<size_t>(file)];
  std::string blocks;
  in >> f.bytes >> f.crc32c >> blocks;
  in.ignore(1);
  if (blocks != "-") f.blocks = blocks_from_hex(blocks, "checkpoint save");
  std::string kind, name, dims, tp;
  while (std::getline(in, kind, '\t') && std::getline(in, name, '\t') &&
         std::getline(in, dims, '\t') && std::getline(in, tp, '\t')) {
    PieceEntry p;
    p.file = file;
    p.tp = decode_tp(tp);
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

SavePlan::SavePlan(comm::ProcessGroup* group, const optim::Optimizer& optimizer,
                   SaveRequest request)
    : req_(std::move(request)),
      rank_(group ? group->rank() : 0),
      world_(group ? group->size() : 1),
      optimizer_name_(optimizer.name()),
      tmp_(req_.root / temp_dir_name(req_.step)) {
  // The checkpoint id is rank 0's; the training state must be the same on every rank (each
  // rank's file table carries it).
  std::ostringstream state;
  for (const auto& [k, v] : req_.counters) state << k << '=' << v << ' ';
  const std::vector<std::string> ids = comm::all_gather_strings(group, new_id() + state.str());
  id_ = ids[0].substr(0, 16);
  for (size_t r = 1; r < ids.size(); ++r)
    BRAID_CHECK(ids[r].substr(16) == ids[0].substr(16), "checkpoint of step ", req_.step,
                ": the training state to save differs between ranks: rank 0 has '",
                ids[0].substr(16), "', rank ", r, " has '", ids[r].substr(16), "'");
  std::ostringstream held;
  for (const optim::ParamGroup& g : optimizer.groups())
    for (const optim::ParamSlice& s : g.params)
      if (s.shard.tp.counts_in_norm)
        held << s.name() << '\t' << encode_tp(s.shard.tp) << '\t' << s.shard.offset << ' '
             << s.shard.numel << '\n';
  writer_ = assign_writers(comm::all_gather_strings(group, held.str()));
  comm::all_ranks_or_throw(group, [&] {
    if (rank_ != 0) return;
    stage("create");
    fs::create_directories(req_.root);
    fs::remove_all(tmp_);
    fs::create_directory(tmp_);
  });
}

fs::path SavePlan::file_path() const {
  return tmp_ / rank_file_name(rank_);
}

bool SavePlan::writes(const optim::ParamSlice& s) const {
  return s.shard.tp.counts_in_norm && writer_.at(key_of(s)) == rank_;
}

int64_t SavePlan::file_bytes(optim::Optimizer& optimizer) const {
  int64_t bytes = kHeaderBytes;
  const int64_t per_element = 4 * static_cast<int64_t>(1 + optimizer.state_names().size());
  for (const optim::ParamGroup& g : optimizer.groups())
    for (const optim::ParamSlice& s : g.params)
      if (writes(s)) bytes += s.shard.numel * per_element;
  return bytes;
}

void SavePlan::serialize(optim::Optimizer& optimizer,
                         const std::function<void(const void*, size_t)>& out) {
  pieces_.clear();
  const std::string header = encode_header({id_, rank_, world_, req_.step});
  out(header.data(), header.size());
  int64_t at = static_cast<int64_t>(header.size());
  auto put = [&](const std::string& kind, const optim::ParamSlice& s, const Tensor& t) {
    BRAID_CHECK(t.dtype() == DType::f32 && t.numel() == s.shard.numel, "checkpoint: ", kind,
                " of '", s.name(), "' is not ", s.shard.numel, " f32 elements");
    pieces_.emplace_back(kind, s.name(), s.shard.global_shape,
                         PieceEntry{rank_, s.shard.offset, s.shard.numel, at, s.shard.tp});
    const size_t n = static_cast<size_t>(t.numel()) * 4;
    // Note [Checkpoints from a device]: a shard on a device is copied to the host to be written;
    // the reader copies what it reads back (CheckpointReader::read), so the files are the same
    // whatever device the run trained on.
    const Tensor host = t.device().is_cpu() ? t : t.to(Device::cpu());
    out(host.raw_data(), n);
    at += static_cast<int64_t>(n);
  };
  // Note [Piece order] (manifest.h): kind by kind where the store keeps its slots in memory, so
  // one visit per kind costs nothing; slice by slice where each visit would read them in again.
  const auto& states = optimizer.state_names();
  const int kinds = 1 + static_cast<int>(states.size());  // the masters, then each state
  // One visit writing kinds [from, to) of every slice this rank writes.
  auto put_kinds = [&](int from, int to) {
    optimizer.visit_slices(
        [&](const optim::ParamSlice& s, optim::SliceSlot& slot) {
          if (!writes(s)) return;
          for (int k = from; k < to; ++k)
            if (k == 0)
              put("param", s, slot.param);
            else
              put(states[static_cast<size_t>(k - 1)], s, slot.state[static_cast<size_t>(k - 1)]);
        },
        /*write=*/false);
  };
  if (optimizer.state_store().slots_stay_resident())
    for (int k = 0; k < kinds; ++k) put_kinds(k, k + 1);
  else
    put_kinds(0, kinds);
}

std::string SavePlan::table(const std::vector<uint32_t>& blocks) const {
  FileTable t{id_, rank_, world_, req_.step, optimizer_name_, req_.counters, {}, 0, {}, 0};
  int64_t end = kHeaderBytes;
  for (const auto& [kind, name, shape, piece] : pieces_) {
    t.pieces.push_back({kind, name, DType::f32, shape, piece});
    end = std::max(end, piece.byte_offset + piece.numel * 4);
  }
  t.data_bytes = end;
  t.block_bytes = block_bytes();
  if (t.block_bytes > 0) {
    BRAID_CHECK(static_cast<int64_t>(blocks.size()) == (end + t.block_bytes - 1) / t.block_bytes,
                "checkpoint: ", blocks.size(), " block checksums for ", end, " bytes of pieces");
    t.blocks = blocks;
  }
  return encode_table(t);
}

void SavePlan::abandon() const {
  if (rank_ != 0) return;
  std::error_code ec;
  fs::remove_all(tmp_, ec);
}

void SavePlan::file_written(int64_t bytes, uint32_t crc32c, std::vector<uint32_t> blocks) {
  bytes_ = bytes;
  crc_ = crc32c;
  blocks_ = std::move(blocks);
}

SaveResult SavePlan::finish(comm::ProcessGroup* group) {
  BRAID_CHECK(bytes_ >= 0, "checkpoint: finishing a save whose file was not written");
  std::ostringstream mine;
  mine << bytes_ << ' ' << crc_ << ' ' << (blocks_.empty() ? "-" : blocks_to_hex(blocks_)) << '\n';
  for (const auto& [kind, name, shape, piece] : pieces_) {
    mine << kind << '\t' << name << '\t';
    for (int64_t d : shape.vec()) mine << d << ',';
    mine << '\t' << encode_tp(piece.tp) << '\t' << piece.offset << ' ' << piece.numel << ' '
         << piece.byte_offset << '\n';
  }
  const std::vector<std::string> all = comm::all_gather_strings(group, mine.str());
  SaveResult result;
  result.dir = req_.root / step_dir_name(req_.step);
  result.step = req_.step;
  Manifest m;
  m.version = req_.version;
  m.block_bytes = block_bytes();
  m.id = id_;
  m.step = req_.step;
  m.layout = req_.layout;
  m.world_size = world_;
  m.dp_size = req_.dp_size;
  m.optimizer = optimizer_name_;
  m.counters = req_.counters;
  m.config = req_.config;
  m.model_config = req_.model_config;
  std::map<std::pair<std::string, std::string>, size_t> index;
  for (int r = 0; r < world_; ++r) {
    m.files.push_back({rank_file_name(r), r, 0, 0, {}});
    decode_into(all[static_cast<size_t>(r)], r, m, index);
  }
  result.bytes = m.total_bytes();

  comm::all_ranks_or_throw(group, [&] {
    if (rank_ != 0) return;
    stage("manifest");
    {
      const std::string text = to_json(m);
      FileSink sink(tmp_ / kManifestName);
      sink.append(text.data(), text.size());
      sink.finish();
    }
    sync_directory(tmp_);
    stage("rename");
    std::error_code ec;
    fs::remove_all(result.dir, ec);  // a step saved before by a run that went on to fail
    fs::rename(tmp_, result.dir, ec);
    BRAID_CHECK(!ec, "checkpoint: cannot rename ", tmp_.string(), " to ", result.dir.string(), ": ",
                ec.message());
    sync_directory(req_.root);
    stage("publish");
    publish(req_.root, step_dir_name(req_.step), req_.keep_last);
  });
  return result;
}

}  // namespace braid::checkpoint
