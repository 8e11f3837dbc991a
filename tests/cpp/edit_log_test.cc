// effective_edits: what a replay applies of an edit log.
#include <gtest/gtest.h>

#include "rewrite/edit_log.h"

namespace fxopt {
namespace {

Edit edit(Edit::Kind kind, uint64_t node, std::string name = {}) {
  Edit e{kind};
  e.node = node;
  e.name = std::move(name);
  return e;
}

TEST(EffectiveEdits, LaterEditsOfTheSameSlotOverwriteEarlierOnes) {
  using K = Edit::Kind;
  EditLog log = {
      edit(K::CreateNode, 7),           // 0: kept, creations never overwrite
      edit(K::SetMeta, 1, "marks"),     // 1: overwritten by 5
      edit(K::SetInputs, 1),            // 2: overwritten by 6
      edit(K::SetMeta, 1, "reversal"),  // 3: kept, another key
      edit(K::SetTarget, 2),            // 4: kept, another node
      edit(K::EraseMeta, 1, "marks"),   // 5: kept, erasing overwrites setting
      edit(K::SetInputs, 1),            // 6: kept
      edit(K::EraseNode, 2),            // 7: kept
  };
  EXPECT_EQ(effective_edits(log), (std::vector<size_t>{0, 3, 4, 5, 6, 7}));
}

TEST(EffectiveEdits, AnEmptyLogHasNothingToApply) { EXPECT_TRUE(effective_edits({}).empty()); }

}  // namespace
}  // namespace fxopt
