// Tied tensors: one tensor object stored at several paths (two Linears sharing one weight, in
// symbolic graphs where each module holds its own reference).
//
// A pass that recomputes a tensor on reverse (MergeLinears and FuseBiasInLinear slice it back
// out, ops/linear_rewrite.h) would bring back an equal but separate tensor: the tie is gone,
// and training the restored model would update the two copies apart. So forward records, as
// plain paths, where else the tensor was stored (`TiedTensors::others`), and reverse stores the
// tensor found at such a path instead of its own recomputed copy (`tied_tensor`) when it is
// there again and looks the same (shape, dtype, device, parameter flags): a partner untouched
// by the passes, or restored earlier in this reverse. The partner restored later finds this one
// in turn. Both then hold one handle, which the bridge turns into one Parameter object.
// Caveat: if the merged weights were trained apart, the tie comes back with the first
// restored partner's values.
#pragma once

#include <string>
#include <unordered_map>
#include <vector>

#include "ir/program.h"

namespace fxopt {

class TiedTensors {
 public:
  // Indexes every module tensor ("<module>.<name>") and attribute of `program` by handle: O(n)
  // once per pass run, so each lookup is O(ties).
  explicit TiedTensors(const Program& program);
  // The other paths holding the tensor stored at `path`, sorted.
  std::vector<std::string> others(const TensorInfo& tensor, const std::string& path) const;

 private:
  std::unordered_map<uint64_t, std::vector<std::string>> paths_;
};

// The tensor stored at `path` (an attribute, or "<module>.<name>"), or nullptr.
const TensorInfo* stored_tensor(const Program& program, const std::string& path);
// `computed`, or the tensor stored at one of `tied_paths` that can stand in for it.
TensorInfo tied_tensor(const Program& program, const std::vector<std::string>& tied_paths,
                       const TensorInfo& computed);

}  // namespace fxopt
