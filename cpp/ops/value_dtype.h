// The dtype each value has when the graph runs.
//
// fx records dtypes when a graph is traced, and a pass that changes dtypes (ChangePrecision)
// leaves those facts as they were: in a lowered graph an attention's q, k and v still say
// float32. This follows the graph from what fixes a dtype (stored tensors, graph inputs,
// non-float facts, ops that name their result's dtype: casts, softmax(dtype=), x.type_as(y))
// through every other op, which computes in the dtype of its floating operands, promoting a mix
// as torch does. Unknown where the graph's inputs have no recorded dtype.
#pragma once

#include <string>
#include <string_view>
#include <unordered_map>

#include "ir/program.h"

namespace fxopt {

class ValueDtypes {
 public:
  // One pass over the graph, in order.
  explicit ValueDtypes(const Program& program);
  // The dtype of `node`'s value ("bfloat16", "int64", ...); empty if unknown.
  std::string_view of(const Node* node) const;

 private:
  std::string follow(const Program& program, const Node& node) const;
  std::unordered_map<const Node*, std::string> dtypes_;
};

}  // namespace fxopt
