#include "ir/graph.h"

#include <algorithm>
#include <cctype>
#include <stdexcept>

namespace fxopt {
namespace {

constexpr uint64_t kPositionGap = uint64_t{1} << 20;

// Distinct nodes referenced by args and kwargs, in first-reference order.
std::vector<Node*> distinct_inputs(const Args& args, const Kwargs& kwargs) {
  std::vector<Node*> inputs;
  auto add = [&](Node* n) {
    if (std::find(inputs.begin(), inputs.end(), n) == inputs.end()) inputs.push_back(n);
  };
  for (const Arg& a : args) a.for_each_node(add);
  for (const auto& [key, a] : kwargs.items) a.for_each_node(add);
  return inputs;
}

// fx names nodes with identifier-safe names; a trailing "_<n>" counts as a dedup suffix.
std::string sanitize(std::string_view hint) {
  std::string name;
  for (char c : hint) name += std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
  if (name.empty() || std::isdigit(static_cast<unsigned char>(name[0]))) name = "_" + name;
  return name;
}

}  // namespace

Node* Graph::create(NodeKind kind, Symbol target, std::string name, Args args, Kwargs kwargs) {
  size_t index = next_id_ - 1;
  if (index / kBlockNodes == blocks_.size()) blocks_.emplace_back(new Node[kBlockNodes]);
  Node* node = &blocks_[index / kBlockNodes][index % kBlockNodes];
  node->name_ = std::move(name);
  // One lookup checks and records the name. A duplicate leaves the slot to the next node.
  if (!by_name_.insert(node))
    throw std::invalid_argument("duplicate node name '" + node->name_ + "'");
  node->kind_ = kind;
  node->target_ = target;
  node->args_ = std::move(args);
  node->kwargs_ = std::move(kwargs);
  node->id_ = next_id_++;
  add_uses(node);
  index_add(node);
  ++size_;
  return node;
}

Node* Graph::append(NodeKind kind, Symbol target, std::string name, Args args, Kwargs kwargs,
                    int64_t origin) {
  Node* node = create(kind, target, std::move(name), std::move(args), std::move(kwargs));
  node->origin_ = origin;
  node->prev_ = tail_;
  node->position_ = tail_ ? tail_->position_ + kPositionGap : kPositionGap;
  (tail_ ? tail_->next_ : head_) = node;
  tail_ = node;
  return node;
}

Node* Graph::insert_before(Node* anchor, NodeKind kind, Symbol target, std::string_view name_hint,
                           Args args, Kwargs kwargs) {
  Node* node = create(kind, target, unique_name(name_hint), std::move(args), std::move(kwargs));
  link_before(node, anchor);
  return node;
}

void Graph::reserve(size_t count) {
  by_name_.reserve(count);
  blocks_.reserve(blocks_.size() + count / kBlockNodes + 1);
}

void Graph::link_before(Node* node, Node* anchor) {
  Node* prev = anchor->prev_;
  node->prev_ = prev;
  node->next_ = anchor;
  anchor->prev_ = node;
  (prev ? prev->next_ : head_) = node;
  uint64_t low = prev ? prev->position_ : 0;
  if (anchor->position_ - low < 2)
    renumber();  // amortised: gaps of 2^20 rarely run out
  else
    node->position_ = low + (anchor->position_ - low) / 2;
}

void Graph::unlink(Node* node) {
  (node->prev_ ? node->prev_->next_ : head_) = node->next_;
  (node->next_ ? node->next_->prev_ : tail_) = node->prev_;
  node->prev_ = node->next_ = nullptr;
}

void Graph::move_before(Node* node, Node* anchor) {
  if (node == anchor || node->next_ == anchor) return;
  unlink(node);
  link_before(node, anchor);
}

void Graph::renumber() {
  uint64_t position = 0;
  for (Node* n = head_; n; n = n->next_) n->position_ = (position += kPositionGap);
}

void Graph::add_uses(Node* node) {
  node->for_each_input([&](Node* input) {
    // Users are appended as they start reading, so a repeated input has `node` last already:
    // no list of distinct inputs to build for every node imported.
    if (!input->users_.empty() && input->users_.back() == node) return;
    if (input->erased_)
      throw std::invalid_argument(node->name_ + " reads erased node " + input->name_);
    input->users_.push_back(node);
  });
}

void Graph::drop_uses(Node* node) {
  for (Node* input : distinct_inputs(node->args_, node->kwargs_)) std::erase(input->users_, node);
}

void Graph::index_add(Node* node) { index_[{node->kind_, node->target_}].push_back(node); }

void Graph::set_inputs(Node* node, Args args, Kwargs kwargs) {
  drop_uses(node);
  node->args_ = std::move(args);
  node->kwargs_ = std::move(kwargs);
  add_uses(node);
}

void Graph::set_target(Node* node, NodeKind kind, Symbol target) {
  if (node->kind_ == kind && node->target_ == target) return;
  // The stale index entry is skipped by find(), which checks kind and target again.
  node->kind_ = kind;
  node->target_ = target;
  index_add(node);
}

void Graph::set_meta(Node* node, std::string_view key, Arg value) {
  node->meta_.set(key, std::move(value));
}

void Graph::erase_meta(Node* node, std::string_view key) { node->meta_.erase(key); }

void Graph::set_rank(Node* node, int rank) { node->rank_ = rank; }

void Graph::set_value_info(Node* node, std::string dtype, std::vector<int64_t> shape,
                           std::string device) {
  node->rank_ = static_cast<int>(shape.size());
  node->dtype_ = std::move(dtype);
  node->shape_ = std::move(shape);
  node->device_ = std::move(device);
}

void Graph::share_value_info(Node* node, const Node& same) {
  set_value_info(node, same.dtype_, same.shape_, same.device_);
  node->value_twin_ = same.value_twin_ ? same.value_twin_ : same.id_;
}

std::vector<Node*> Graph::replace_all_uses(Node* old_node, Node* replacement, Node* except) {
  std::vector<Node*> changed;
  std::vector<Node*> kept;
  for (Node* user : old_node->users_) (user == except ? kept : changed).push_back(user);
  old_node->users_ = std::move(kept);
  auto swap = [&](Node* n) { return n == old_node ? replacement : n; };
  for (Node* user : changed) {
    for (Arg& a : user->args_) a = a.map_nodes(swap);
    for (auto& [key, a] : user->kwargs_.items) a = a.map_nodes(swap);
    if (std::find(replacement->users_.begin(), replacement->users_.end(), user) ==
        replacement->users_.end())
      replacement->users_.push_back(user);
  }
  return changed;
}

void Graph::erase(Node* node) {
  if (!node->users_.empty())
    throw std::invalid_argument("cannot erase " + node->name_ + ": still used by " +
                                node->users_.front()->name_);
  drop_uses(node);
  unlink(node);
  node->erased_ = true;
  by_name_.erase(node);
  --size_;
}

std::string Graph::unique_name(std::string_view hint) {
  std::string base = sanitize(hint);
  auto taken = [&](const std::string& name) {
    return by_name_.contains(name) || reserved_names_.contains(name);
  };
  // A free hint is taken as is, even if a node of that name existed before and was erased (fx
  // frees erased names too, bindings/replay): the name must depend on the graph as it is, not
  // on its history, or a session that erased and recreates a node (reverse in the session
  // that made the forward edits) names it differently from one that imported the graph fresh,
  // and the records naming it go stale.
  if (!taken(base)) return base;
  uint64_t& counter = name_counters_[base];
  std::string candidate;
  do candidate = base + "_" + std::to_string(++counter);
  while (taken(candidate));
  return candidate;
}

void Graph::reserve_names(std::vector<std::string> names) {
  reserved_names_.insert(std::make_move_iterator(names.begin()),
                         std::make_move_iterator(names.end()));
}

Node* Graph::find_by_id(uint64_t id) const {
  if (id == 0 || id >= next_id_) return nullptr;
  return &blocks_[(id - 1) / kBlockNodes][(id - 1) % kBlockNodes];
}

Node* Graph::find_by_name(std::string_view name) const { return by_name_.find(name); }

std::vector<Node*> Graph::find(NodeKind kind, Symbol target) const {
  auto it = index_.find({kind, target});
  if (it == index_.end()) return {};
  std::vector<Node*>& bucket = it->second;
  std::erase_if(bucket, [&](Node* n) { return n->erased_ || !n->is(kind, target); });
  std::vector<Node*> result = bucket;
  std::sort(result.begin(), result.end(),
            [](Node* a, Node* b) { return a->position_ < b->position_; });
  result.erase(std::unique(result.begin(), result.end()), result.end());
  return result;
}

std::vector<LintError> Graph::lint() const {
  std::vector<LintError> errors;
  std::unordered_set<const Node*> seen;
  const Node* output = nullptr;
  for (const Node* n : *this) {
    if (output) errors.push_back({n->name_, "comes after the output node " + output->name_});
    for (Node* input : distinct_inputs(n->args_, n->kwargs_)) {
      if (input->erased_)
        errors.push_back({n->name_, "reads erased node " + input->name_});
      else if (!seen.contains(input))
        errors.push_back({n->name_, "reads " + input->name_ + " before it is defined"});
      if (std::find(input->users_.begin(), input->users_.end(), n) == input->users_.end())
        errors.push_back({input->name_, "use list misses its user " + n->name_});
    }
    for (const Node* user : n->users_) {
      bool reads = false;
      for (Node* input : distinct_inputs(user->args_, user->kwargs_)) reads |= input == n;
      if (user->erased_ || !reads)
        errors.push_back({n->name_, "use list names " + user->name_ + ", which does not read it"});
    }
    if (n->kind_ == NodeKind::Output) output = n;
    seen.insert(n);
  }
  if (!output && head_) errors.push_back({tail_->name_, "graph has no output node"});
  return errors;
}

}  // namespace fxopt
