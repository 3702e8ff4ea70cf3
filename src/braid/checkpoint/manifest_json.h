// The JSON form of a piece's tp placement, shared by the manifest and the rank files' tables
// (Note [File table], file_table.h).
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "braid/core/dtype.h"
#include "braid/core/shape.h"
#include "braid/core/shard_record.h"

namespace braid::checkpoint {

nlohmann::json placement_to_json(const TpSlice& s);
// A dtype as the manifest and the tables write it (dtype_name: only the canonical names);
// `where` names the file in errors.
DType stored_dtype(const std::string& name, const std::string& where);
// Checked against the whole shape (the slice must cut it); `what` names the piece in errors.
TpSlice placement_from_json(const nlohmann::json& tp, const Shape& shape, const std::string& what);

}  // namespace braid::checkpoint
