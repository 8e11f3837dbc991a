// Where erased nodes stood, so that reverse puts the nodes it recreates back in place.
//
// A pass's restore recreates what its forward erased right before the node that needs it:
// torch.export hoists every get_attr read to the top of the graph, so a fused bias or merged
// weight read (Rewriter::read_attribute, ops/linear_rewrite) comes back far from where it was,
// and a fused Linear + activation (rewrite/capture) comes back where the fused node stood, after
// nodes that were after the Linear: same values, different order and code. And an erased node
// may carry another transformation's marks and records (ChangePrecision's on a lowered weight
// read) that its reverse needs to find. So the driver (rewrite/pass.cc) remembers every node a
// forward run erases, whatever erased it (but PassContext::remove, whose removal record puts
// the node back in place itself), as a plain value:
//   (name, kind, target, anchor, meta)
//   anchor  the name of the first node after it that existed before the run (what the run
//           created is gone again once it is reversed), or None
//   meta    its fxopt metadata, as (key, value) pairs
// After the run's reverse it handles these last erased first, so each anchor is back in place
// when its turn comes: the node recreated under its old name (same kind and target) gets its
// metadata back, less the reversed transformation's own marks and records, and moves before
// its anchor. A node reverse did not recreate is left alone. If, after all the moves, a moved
// node comes before one of its inputs or after one of its users (reverse rebuilt something
// differently), the moves are undone: the order is then as restore left it, never invalid.
#pragma once

#include <cstdint>
#include <string_view>

#include "rewrite/record_reader.h"
#include "rewrite/rewriter.h"

namespace fxopt {

// The placement of `node`, just before it is erased; nodes with ids >= `first_new_id` were
// created by the running pass and are never anchors.
Arg capture_placement(const Node& node, uint64_t first_new_id);
// Puts back the nodes one forward run erased (`placements`, in the order they were erased),
// after the reverse of transformation `signature` recreated them.
void restore_placements(Rewriter& rewriter, const RecordField& placements,
                        std::string_view signature);

}  // namespace fxopt
