#include "ir/name_index.h"

#include <algorithm>
#include <bit>
#include <functional>
#include <utility>

#include "ir/node.h"

namespace fxopt {
namespace {

size_t hash_name(std::string_view name) { return std::hash<std::string_view>()(name); }

}  // namespace

size_t NameIndex::probe(std::string_view name, size_t hash) const {
  size_t i = hash & mask();
  while (slots_[i].node && (slots_[i].hash != hash || slots_[i].node->name() != name))
    i = (i + 1) & mask();
  return i;
}

Node* NameIndex::find(std::string_view name) const {
  return slots_.empty() ? nullptr : slots_[probe(name, hash_name(name))].node;
}

bool NameIndex::insert(Node* node) {
  reserve(1);
  size_t hash = hash_name(node->name());
  Slot& slot = slots_[probe(node->name(), hash)];
  if (slot.node) return false;
  slot = {hash, node};
  ++size_;
  return true;
}

void NameIndex::erase(const Node* node) {
  if (slots_.empty()) return;
  size_t hole = probe(node->name(), hash_name(node->name()));
  if (slots_[hole].node != node) return;
  --size_;
  // No tombstones: each later entry of the run whose probe path crosses the hole moves into it,
  // so lookups never stop early at a freed slot.
  for (size_t i = (hole + 1) & mask(); slots_[i].node; i = (i + 1) & mask()) {
    size_t home = slots_[i].hash & mask();
    if (((hole - home) & mask()) <= ((i - home) & mask())) {
      slots_[hole] = slots_[i];
      hole = i;
    }
  }
  slots_[hole] = {};
}

void NameIndex::reserve(size_t count) {
  if (2 * (size_ + count) > slots_.size())
    rehash(std::bit_ceil(std::max<size_t>(16, 2 * (size_ + count))));
}

void NameIndex::rehash(size_t capacity) {
  std::vector<Slot> old = std::exchange(slots_, std::vector<Slot>(capacity));
  for (const Slot& slot : old) {
    if (!slot.node) continue;
    size_t i = slot.hash & mask();
    while (slots_[i].node) i = (i + 1) & mask();
    slots_[i] = slot;
  }
}

}  // namespace fxopt
