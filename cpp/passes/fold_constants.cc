#include "passes/fold_constants.h"

#include <algorithm>
#include <stdexcept>
#include <string>
#include <unordered_map>

#include "ops/effects.h"
#include "rewrite/recorded_call.h"

namespace fxopt {
namespace {

constexpr int64_t kSmallBytes = 64 * 1024;

// The record: the call (rewrite/recorded_call.h), then the operands it reads and the attribute
// that stores its value.
constexpr RecordKey<std::vector<Node*>> kOperands{"operands"};
constexpr RecordKey<std::string> kAttribute{"attribute"};

int64_t dtype_bytes(const std::string& dtype) {
  if (dtype == "float64" || dtype == "int64" || dtype == "complex64") return 8;
  if (dtype == "float16" || dtype == "bfloat16" || dtype == "int16") return 2;
  if (dtype == "int8" || dtype == "uint8" || dtype == "bool") return 1;
  return 4;
}

int64_t bytes(const TensorInfo& t) {
  int64_t n = dtype_bytes(t.dtype);
  for (int64_t d : t.shape) n *= d;
  return n;
}

// The operands of `node` that are calls, not get_attr reads: a record names them, as captured
// get_attr reads are re-read by path (rewrite/capture.h).
std::vector<Node*> computed_operands(const Node& node) {
  std::vector<Node*> out;
  node.for_each_input([&](Node* input) {
    if (input->kind() != NodeKind::GetAttr && std::ranges::find(out, input) == out.end())
      out.push_back(input);
  });
  return out;
}

// Values of constant nodes, computed on demand and kept for the run.
class Evaluator {
 public:
  Evaluator(const Program& program, TensorOps& tensors) : program_(program), tensors_(tensors) {}

  std::optional<TensorInfo> value(const Node* node) {
    if (auto it = values_.find(node); it != values_.end()) return it->second;
    std::optional<TensorInfo> result;
    if (node->kind() == NodeKind::GetAttr) {
      if (const TensorInfo* t = program_.attribute(node->target())) {
        result = *t;
        parameter_ = parameter_ || t->is_parameter;
        requires_grad_ = requires_grad_ || t->requires_grad;
      }
    } else {
      std::vector<TensorInfo> operands;
      bool known = true;
      node->for_each_input([&](Node* input) {
        std::optional<TensorInfo> v = known ? value(input) : std::nullopt;
        known = known && v;
        if (v) operands.push_back(*v);
      });
      try {
        if (known) result = tensors_.evaluate(*node, operands);
      } catch (const std::exception& e) {
        failure_ = e.what();  // the op refused to run outside its graph: not a constant to fold
      }
    }
    values_.emplace(node, result);
    return result;
  }
  // What went wrong running an op, if anything did.
  const std::string& failure() const { return failure_; }
  // Whether a parameter / a tensor requiring grad was among the stored tensors read.
  bool read_parameter() const { return parameter_; }
  bool read_requires_grad() const { return requires_grad_; }

 private:
  const Program& program_;
  TensorOps& tensors_;
  std::unordered_map<const Node*, std::optional<TensorInfo>> values_;
  std::string failure_;
  bool parameter_ = false, requires_grad_ = false;
};

}  // namespace

void FoldConstants::begin(const Program& program) const {
  constant_.clear();
  std::unordered_set<const Node*> written = written_in_place(program);
  for (const Node* node : program.graph) {
    if (node->kind() == NodeKind::GetAttr) {
      if (program.attribute(node->target()) && !written.contains(node)) constant_.insert(node);
      continue;
    }
    if (node->kind() != NodeKind::CallFunction && node->kind() != NodeKind::CallMethod) continue;
    if (!side_effect(program, *node).empty() || written.contains(node)) continue;
    bool all = true;
    node->for_each_input([&](Node* input) { all = all && constant_.contains(input); });
    if (all) constant_.insert(node);
  }
}

void FoldConstants::rewrite(PassContext& ctx, Node* node) const {
  if (node->kind() == NodeKind::GetAttr || !constant_.contains(node)) return;
  bool frontier =
      std::ranges::any_of(node->users(), [&](Node* u) { return !constant_.contains(u); });
  if (!frontier) return;  // computed as part of the constant its users become
  std::vector<Node*> inputs = computed_operands(*node);
  std::optional<Record> record = record_call(*node, inputs);
  if (!record) return ctx.skip(*node, "reads values a reversal record cannot hold");

  // A fresh evaluator per frontier node keeps no tensor handles alive across the run's folds.
  Evaluator evaluator(ctx.rewriter.program(), ctx.tensors);
  std::optional<TensorInfo> value = evaluator.value(node);
  if (!value)
    return ctx.skip(*node, evaluator.failure().empty()
                               ? "its value is not a tensor"
                               : "computing it failed: " + evaluator.failure().substr(0, 200));
  int64_t operand_bytes = 0;
  node->for_each_input([&](Node* input) {
    std::optional<TensorInfo> v = evaluator.value(input);
    operand_bytes += v ? bytes(*v) : 0;
  });
  if (bytes(*value) > kSmallBytes && bytes(*value) > operand_bytes)
    return ctx.skip(*node, "its value (" + std::to_string(bytes(*value)) +
                               " bytes) is larger than what it is computed from");

  Rewriter& rewriter = ctx.rewriter;
  TensorInfo stored = *value;
  stored.is_parameter = evaluator.read_parameter();
  stored.requires_grad = evaluator.read_requires_grad();
  std::string path = rewriter.unique_path("_folded_" + node->name());
  rewriter.set_attribute(path, stored);
  record->set(kOperands, inputs).set(kAttribute, path);
  rewriter.set_inputs(node, {}, {});
  rewriter.set_target(node, NodeKind::GetAttr, Symbol::intern(path));
  set_reversal_record(rewriter, node, ctx.signature, *record);
  ctx.changed(node);
}

void FoldConstants::restore(PassContext& ctx, Node* node, const RecordReader& record) const {
  Rewriter& rewriter = ctx.rewriter;
  const std::string& path = record.get(kAttribute);
  if (node->kind() != NodeKind::GetAttr || node->target().str() != path)
    throw PassError(*node, "no longer reads the constant FoldConstants stored");
  restore_call(rewriter, node, record, record.get(kOperands, rewriter.graph()));
  rewriter.remove_attribute(path);
  ctx.restored(node);
}

}  // namespace fxopt
