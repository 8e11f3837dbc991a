// The graph's nodes by name, in one open-addressing array of (hash, node) slots.
//
// A node-based hash map allocated an entry per node and missed the cache a few times per lookup;
// on a 100k-node import, and when the graph is dropped, those were a sizeable share of the time.
// Names are read from the nodes themselves, which never rename a node once it is indexed.
#pragma once

#include <cstddef>
#include <string_view>
#include <vector>

namespace fxopt {

class Node;

class NameIndex {
 public:
  Node* find(std::string_view name) const;
  bool contains(std::string_view name) const { return find(name) != nullptr; }
  // Indexes `node` under its name unless the name is taken; returns whether it did.
  bool insert(Node* node);
  // Removes `node`, if it is the node indexed under its name.
  void erase(const Node* node);
  // Room for `count` more names without growing.
  void reserve(size_t count);

 private:
  struct Slot {
    size_t hash = 0;
    Node* node = nullptr;  // nullptr: free
  };
  size_t mask() const { return slots_.size() - 1; }
  // The slot holding `name`, or the free slot that ends its probe sequence.
  size_t probe(std::string_view name, size_t hash) const;
  void rehash(size_t capacity);

  std::vector<Slot> slots_;  // a power of two in size (or empty), at most half full
  size_t size_ = 0;
};

}  // namespace fxopt
