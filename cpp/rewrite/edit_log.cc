#include "rewrite/edit_log.h"

#include <algorithm>
#include <set>
#include <tuple>

namespace fxopt {

std::vector<size_t> effective_edits(const EditLog& log) {
  // Walking backwards, the first edit seen of each (node, what it overwrites) is the last one.
  using Slot = std::tuple<uint64_t, Edit::Kind, std::string>;
  std::set<Slot> written;
  std::vector<size_t> kept;
  kept.reserve(log.size());
  for (size_t i = log.size(); i-- > 0;) {
    const Edit& e = log[i];
    bool overwritable = false;
    Slot slot{e.node, e.kind, {}};
    switch (e.kind) {
      case Edit::Kind::SetInputs:
      case Edit::Kind::SetTarget:
        overwritable = true;
        break;
      case Edit::Kind::SetMeta:
      case Edit::Kind::EraseMeta:
        overwritable = true;
        slot = {e.node, Edit::Kind::SetMeta, e.name};  // setting and erasing a key overwrite
        break;
      default:
        break;
    }
    if (!overwritable || written.insert(std::move(slot)).second) kept.push_back(i);
  }
  std::reverse(kept.begin(), kept.end());
  return kept;
}

}  // namespace fxopt
