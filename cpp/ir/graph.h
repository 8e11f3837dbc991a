// The core graph: an ordered list of nodes with use lists, unique names and an index from
// (kind, target) to nodes, so passes find candidates without scanning the whole graph.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "ir/name_index.h"
#include "ir/node.h"

namespace fxopt {

struct LintError {
  std::string node;  // name of the offending node
  std::string problem;
};

class Graph {
 public:
  Graph() = default;
  Graph(const Graph&) = delete;
  Graph& operator=(const Graph&) = delete;

  // Adds a node at the end. `name` must be unused (import keeps fx's names verbatim).
  Node* append(NodeKind kind, Symbol target, std::string name, Args args = {}, Kwargs kwargs = {},
               int64_t origin = -1);
  // Adds a node right before `anchor`, named after `name_hint` made unique.
  Node* insert_before(Node* anchor, NodeKind kind, Symbol target, std::string_view name_hint,
                      Args args = {}, Kwargs kwargs = {});
  // Room for `count` more nodes, for an import that knows its size: no rehashing on the way.
  void reserve(size_t count);
  void set_inputs(Node* node, Args args, Kwargs kwargs);
  void set_target(Node* node, NodeKind kind, Symbol target);
  void set_meta(Node* node, std::string_view key, Arg value);
  void erase_meta(Node* node, std::string_view key);
  // Records the rank of the node's value (a fact imported from fx, see Node::rank).
  void set_rank(Node* node, int rank);
  // Records the dtype, sizes and device ("" if unknown) of the node's value (facts imported from
  // fx); sets the rank too.
  void set_value_info(Node* node, std::string dtype, std::vector<int64_t> shape,
                      std::string device = {});
  // Gives `node` the value facts of `same`, whose value it computes (see Node::value_twin).
  void share_value_info(Node* node, const Node& same);
  // Makes every user of `old_node` except `except` read `replacement`; returns the users changed.
  std::vector<Node*> replace_all_uses(Node* old_node, Node* replacement, Node* except = nullptr);
  // Removes a node that has no users left.
  void erase(Node* node);
  // Moves `node` right before `anchor` (the caller keeps inputs before users).
  void move_before(Node* node, Node* anchor);

  // A name not used yet, derived from `hint` the way fx derives node names.
  std::string unique_name(std::string_view hint);
  // Names fx never gives a node (Python keywords and builtins, the names its generated code
  // uses): unique_name avoids them as fx does, so a created node keeps its name in fx and
  // records naming it stay valid.
  void reserve_names(std::vector<std::string> names);

  Node* first() const { return head_; }
  Node* last() const { return tail_; }
  size_t size() const { return size_; }
  Node* find_by_id(uint64_t id) const;
  // Ids are handed out in increasing order: every node created from now on has an id >= this.
  uint64_t next_id() const { return next_id_; }
  Node* find_by_name(std::string_view name) const;
  // Live nodes with this kind and target, in graph order.
  std::vector<Node*> find(NodeKind kind, Symbol target) const;
  // True if `a` comes before `b` in the node list. O(1).
  bool before(const Node* a, const Node* b) const { return a->position_ < b->position_; }

  // Structural checks; every error names its node.
  std::vector<LintError> lint() const;

  class Iterator {
   public:
    explicit Iterator(Node* n) : n_(n) {}
    Node* operator*() const { return n_; }
    Iterator& operator++() {
      n_ = n_->next();
      return *this;
    }
    bool operator!=(const Iterator& o) const { return n_ != o.n_; }

   private:
    Node* n_;
  };
  Iterator begin() const { return Iterator(head_); }
  Iterator end() const { return Iterator(nullptr); }

 private:
  struct IndexKey {
    NodeKind kind;
    Symbol target;
    bool operator==(const IndexKey&) const = default;
  };
  struct IndexKeyHash {
    size_t operator()(const IndexKey& k) const {
      return std::hash<Symbol>()(k.target) * 8 + static_cast<size_t>(k.kind);
    }
  };

  Node* create(NodeKind kind, Symbol target, std::string name, Args args, Kwargs kwargs);
  void link_before(Node* node, Node* anchor);
  void unlink(Node* node);
  void renumber();
  void add_uses(Node* node);
  void drop_uses(Node* node);
  void index_add(Node* node);

  // Nodes in id order, in blocks: one allocation per block instead of per node (import and
  // teardown of large graphs), addresses never move, and an id finds its node without a table.
  // Erased nodes stay allocated: ids stay valid.
  static constexpr size_t kBlockNodes = 256;
  std::vector<std::unique_ptr<Node[]>> blocks_;
  NameIndex by_name_;
  std::unordered_map<std::string, uint64_t> name_counters_;
  std::unordered_set<std::string> reserved_names_;
  // Erased nodes are dropped lazily by find(), so erase stays O(1).
  mutable std::unordered_map<IndexKey, std::vector<Node*>, IndexKeyHash> index_;
  Node* head_ = nullptr;
  Node* tail_ = nullptr;
  size_t size_ = 0;
  uint64_t next_id_ = 1;
};

}  // namespace fxopt
