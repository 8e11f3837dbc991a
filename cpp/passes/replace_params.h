// The one way passes give a weighted op (ops/stored_params.h) new stored tensors, reversibly.
//
// Replacing is copy-on-write: the originals are never changed or unregistered. The module form
// calls a copy of the module, registered at a new path; the functional forms read new
// attributes through new get_attr nodes. So the record `replace_params` returns holds only
// paths, and `restore_params` works after a deep copy or in a later bridge session, where tensor
// handles of this session mean nothing. The record is one of
//   ("module", original path, created path)
//   ("operands", ((name, index, original path or None, passed, created path,
//                  original read's name or None), ...))
#pragma once

#include <map>
#include <string>
#include <string_view>

#include "ops/stored_params.h"
#include "rewrite/record_reader.h"
#include "rewrite/rewriter.h"

namespace fxopt {

// The field of a pass's record that holds what `replace_params` returned.
inline constexpr RecordKey<Arg> kReplacedParams{"params"};

// Makes `params.node` compute with `tensors` (by param name) instead; the new module or
// attributes are named after the old ones plus `suffix`. Every new tensor takes the parameter
// flags (is_parameter, requires_grad) of the one it replaces, or of the weight when it replaces
// an absent one. Returns the value to store in the pass's record.
Arg replace_params(Rewriter& rewriter, const StoredParams& params,
                   const std::map<std::string, TensorInfo>& tensors, std::string_view suffix);
// Undoes `replace_params` on `node` from that value; drops the module or attributes it created.
void restore_params(Rewriter& rewriter, Node* node, const RecordField& record);

}  // namespace fxopt
