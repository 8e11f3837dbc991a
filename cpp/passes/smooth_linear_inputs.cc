#include "passes/smooth_linear_inputs.h"

#include <cmath>
#include <stdexcept>

#include "passes/linear_rewrite.h"
#include "passes/replace_params.h"

namespace fxopt {
namespace {

const Symbol kMul = Symbol::intern("aten.mul.Tensor");
constexpr RecordKey<std::string> kInverse{"inverse"};  // the path of the stored 1 / s

bool positive_and_finite(const std::vector<double>& factors) {
  for (double s : factors)
    if (!(s > 0) || !std::isfinite(s)) return false;
  return true;
}

}  // namespace

SmoothLinearInputs::SmoothLinearInputs(std::map<std::string, std::vector<double>> factors)
    : factors_(std::move(factors)) {}

std::unique_ptr<Pass> SmoothLinearInputs::from_options(const Dict& options) {
  const Arg* given = options.find("factors");
  if (!given || !given->is<Dict>())
    throw std::invalid_argument("option 'factors' must map Linear node names to lists of numbers");
  std::map<std::string, std::vector<double>> factors;
  for (const auto& [name, values] : given->as<Dict>().items) {
    const std::vector<Arg>* items = values.sequence();
    if (!items) throw std::invalid_argument("factors of '" + name + "' must be a list of numbers");
    std::vector<double>& out = factors[name];
    for (const Arg& item : *items) {
      std::optional<double> number = item.number();
      if (!number) throw std::invalid_argument("factors of '" + name + "' must be numbers");
      out.push_back(*number);
    }
  }
  return std::make_unique<SmoothLinearInputs>(std::move(factors));
}

std::vector<Trigger> SmoothLinearInputs::triggers() const { return linear_triggers(); }

void SmoothLinearInputs::rewrite(PassContext& ctx, Node* node) const {
  auto found = factors_.find(node->name());
  if (found == factors_.end()) return;
  const std::vector<double>& factors = found->second;
  std::string why_not;
  std::optional<LinearView> view = as_linear(ctx.rewriter.program(), *node, &why_not);
  if (!view) return ctx.skip(*node, why_not);
  if (view->dtype() != "float32")
    return ctx.skip(*node, "its weight is " + view->dtype() + ", not float32");
  if (int64_t(factors.size()) != view->in_features)
    return ctx.skip(*node, std::to_string(factors.size()) + " factors for " +
                               std::to_string(view->in_features) + " input channels");
  if (!positive_and_finite(factors))
    return ctx.skip(*node, "its factors are not all positive and finite");

  Rewriter& rewriter = ctx.rewriter;
  TensorOps& ops = ctx.tensors;
  const TensorInfo& weight = *view->params.tensor("weight");
  std::vector<double> inverse(factors.size());
  for (size_t j = 0; j < factors.size(); ++j) inverse[j] = 1.0 / factors[j];
  std::string base =
      view->weight_node ? view->weight_node->target().str() : view->module() + ".weight";
  std::string inverse_path = rewriter.unique_path(base + "_smooth_inverse");
  rewriter.set_attribute(inverse_path, ops.from_values(inverse, weight));
  TensorInfo smoothed = stored_like(ops.mul(weight, ops.from_values(factors, weight)), weight);

  Node* divided =
      rewriter.insert_before(node, NodeKind::CallFunction, kMul, "smoothed",
                             {view->input, rewriter.read_attribute(node, inverse_path)});
  rewriter.share_value_info(*view->input, divided);  // x's dtype and sizes, for later passes
  Record record;
  record.set(kReplacedParams,
             replace_params(rewriter, view->params, {{"weight", smoothed}}, "_smoothed"));
  record.set(kInverse, inverse_path);
  set_linear_input(rewriter, *view, divided);
  set_reversal_record(rewriter, node, ctx.signature, record);
  ctx.changed(node);
}

void SmoothLinearInputs::restore(PassContext& ctx, Node* node, const RecordReader& record) const {
  Rewriter& rewriter = ctx.rewriter;
  std::string why_not;
  std::optional<LinearView> view = as_linear(rewriter.program(), *node, &why_not);
  if (!view) throw PassError(*node, "is no longer a Linear (" + why_not + ")");
  Node* divided = view->input;
  if (!divided->is(NodeKind::CallFunction, kMul) || divided->args().empty() ||
      !divided->args()[0].node())
    throw PassError(*node, "no longer reads its input divided by the smoothing factors");
  const std::string& inverse_path = record.get(kInverse);
  set_linear_input(rewriter, *view, divided->args()[0].node());
  restore_params(rewriter, node, record.at(kReplacedParams));
  if (divided->users().empty()) {
    Node* read = divided->args().size() > 1 ? divided->args()[1].node() : nullptr;
    rewriter.erase(divided);
    if (read) rewriter.erase_if_unused_read(read);
  }
  rewriter.remove_attribute(inverse_path);
  ctx.restored(node);
}

}  // namespace fxopt
