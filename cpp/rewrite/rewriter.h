// The only way passes change a Program: every edit is applied to the core graph and appended to
// the edit log that the bridge later replays onto the fx.GraphModule.
#pragma once

#include <functional>
#include <string>
#include <string_view>

#include "ir/program.h"
#include "rewrite/edit_log.h"

namespace fxopt {

class Rewriter {
 public:
  Rewriter(Program& program, EditLog& log) : program_(program), log_(log) {}

  const Program& program() const { return program_; }
  const Graph& graph() const { return program_.graph; }

  Node* insert_before(Node* anchor, NodeKind kind, Symbol target, std::string_view name_hint,
                      Args args, Kwargs kwargs = {});
  void set_inputs(Node* node, Args args, Kwargs kwargs);
  void set_args(Node* node, Args args) { set_inputs(node, std::move(args), node->kwargs()); }
  void set_target(Node* node, NodeKind kind, Symbol target);
  void set_meta(Node* node, std::string_view key, Arg value);
  void erase_meta(Node* node, std::string_view key);
  // Points every user of `old_node` (but `except`) at `replacement`.
  void replace_all_uses(Node* old_node, Node* replacement, Node* except = nullptr);
  void erase(Node* node);
  // Gives a node the pass created the dtype, sizes and device fx recorded for `same`, whose
  // value it computes, so later passes of the same run can read them (kernel choices, ranks);
  // the bridge gives its fx node the value fx recorded for `same` (Node::value_twin), so later
  // runs and the kernel chooser know it too.
  void share_value_info(const Node& same, Node* node) {
    if (same.rank()) program_.graph.share_value_info(node, same);
  }
  // Moves `node` right before `anchor`; the caller keeps every input before its users.
  void move_before(Node* node, Node* anchor);
  // The absorbed-node helper: moves all uses of `old_node` to `replacement`, then erases it.
  void replace_and_erase(Node* old_node, Node* replacement);
  // Erases `node` if it is a get_attr that nothing reads any more (a weight read left behind
  // when its user was rewired or erased); any other node is left alone.
  void erase_if_unused_read(Node* node);
  // A get_attr node reading `path` that `user` may read: an existing one before it, else a new
  // one created right before it, named `name` (default: after the path) so that a restored
  // read gets back the name its tracer gave it (Dynamo lower-cases the first letter).
  Node* read_attribute(Node* user, const std::string& path, std::string_view name = {});

  // Registers `module` at `path`, as a copy of the module at `like` with the given attributes
  // and tensors (copy-on-write: the module at `like` itself is never changed).
  void set_module(const std::string& path, const std::string& like, ModuleInfo module);
  void remove_module(const std::string& path);
  void set_attribute(const std::string& path, TensorInfo tensor);
  void remove_attribute(const std::string& path);
  // A module or attribute path not taken yet, derived from `base`.
  std::string unique_path(const std::string& base) { return program_.unique_path(base); }

  // Called with each node right before it is erased, while set (the driver remembers where
  // get_attr reads were, rewrite/placement.h).
  std::function<void(const Node&)> before_erase;

 private:
  Edit& record(Edit::Kind kind, uint64_t node = 0);

  Program& program_;
  EditLog& log_;
};

}  // namespace fxopt
