// A node of the core graph: one torch.fx Node.
//
// Nodes are owned by their Graph and only change through it (or a Rewriter on top of it), which
// keeps use lists, the per-target index and the order in step with every edit.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "ir/arg.h"
#include "ir/symbol.h"

namespace fxopt {

enum class NodeKind : uint8_t {
  Placeholder,
  GetAttr,
  CallFunction,
  CallModule,
  CallMethod,
  Output
};

// The torch.fx spelling of a kind ("call_function", ...).
std::string_view kind_name(NodeKind kind);
std::optional<NodeKind> parse_kind(std::string_view name);

class Node {
 public:
  NodeKind kind() const { return kind_; }
  Symbol target() const { return target_; }
  const std::string& name() const { return name_; }
  const Args& args() const { return args_; }
  const Kwargs& kwargs() const { return kwargs_; }
  // Distinct nodes that reference this one, in the order they started to.
  const std::vector<Node*>& users() const { return users_; }
  // Metadata the core reads or writes (marks, reversal records); other fx meta stays in Python.
  const Dict& meta() const { return meta_; }
  // Index of the fx node this one was imported from, or -1 for nodes the core created.
  int64_t origin() const { return origin_; }
  // Number of dimensions of the node's tensor value, when fx recorded its shape
  // (node.meta["val"] or ["tensor_meta"]); unknown for nodes the core created.
  std::optional<int> rank() const { return rank_ < 0 ? std::nullopt : std::optional<int>(rank_); }
  // The dtype of the node's tensor value ("float32", "int64", "bool", ...) and its sizes, when
  // fx recorded them; empty otherwise (no tensor value, or unknown). A symbolic size is
  // negative: below -1 one number per symbolic expression, so equal negative sizes of two
  // values are equal whatever the inputs (a batch traced as one symbol); -1 says nothing.
  const std::string& dtype() const { return dtype_; }
  const std::vector<int64_t>& shape() const { return shape_; }
  // The device of the node's tensor value ("cpu", "cuda:0", ...) when fx recorded it (export's
  // meta["val"]; ShapeProp's tensor_meta has none); empty otherwise.
  const std::string& device() const { return device_; }
  // For a node a pass created: the id of the imported node whose value it computes, whose
  // dtype, sizes and device it took (Graph::share_value_info), so that the bridge gives the fx
  // node that node's recorded value too; 0 for none.
  uint64_t value_twin() const { return value_twin_; }
  // Unique and never reused within a graph; the edit log refers to nodes by id.
  uint64_t id() const { return id_; }
  Node* prev() const { return prev_; }
  Node* next() const { return next_; }
  bool erased() const { return erased_; }

  bool is(NodeKind kind, Symbol target) const { return kind_ == kind && target_ == target; }
  // Positional argument `index`, else keyword `keyword`, else nullptr: fx allows both spellings.
  const Arg* input(size_t index, std::string_view keyword) const;
  // Calls fn(Node*) for every node reference in args, then kwargs (duplicates included).
  template <class F>
  void for_each_input(F&& fn) const {
    for (const Arg& arg : args_) arg.for_each_node(fn);
    for (const auto& [key, value] : kwargs_.items) value.for_each_node(fn);
  }
  // Render like fx's `%name : kind[target=...](args = ..., kwargs = ...)`.
  std::string describe() const;

 private:
  friend class Graph;
  Node() = default;

  NodeKind kind_ = NodeKind::Placeholder;
  Symbol target_;
  std::string name_;
  Args args_;
  Kwargs kwargs_;
  std::vector<Node*> users_;
  Dict meta_;
  int64_t origin_ = -1;
  int rank_ = -1;
  std::string dtype_;
  std::vector<int64_t> shape_;
  std::string device_;
  uint64_t value_twin_ = 0;
  uint64_t id_ = 0;
  uint64_t position_ = 0;  // strictly increasing along the list; gaps leave room for inserts
  Node* prev_ = nullptr;
  Node* next_ = nullptr;
  bool erased_ = false;
};

}  // namespace fxopt
