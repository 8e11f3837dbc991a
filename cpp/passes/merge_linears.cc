#include "passes/merge_linears.h"

#include <algorithm>
#include <tuple>

#include "passes/linear_rewrite.h"

namespace fxopt {
namespace {

// What members of one merged Linear must share, besides input and spelling.
auto group_key(const LinearView& v) {
  const TensorInfo& bias = v.has_bias() ? v.bias : v.weight;  // a zero bias is stored like W
  return std::tuple(v.in_features, v.dtype(), v.device(), v.requires_grad(), v.weight.is_parameter,
                    bias.requires_grad, bias.is_parameter);
}

// `lead` and the other Linears reading its input that can merge with it, in graph order.
std::vector<LinearView> group_of(PassContext& ctx, const LinearView& lead) {
  const Program& program = ctx.rewriter.program();
  std::vector<LinearView> group = {lead};
  for (Node* user : lead.input->users()) {
    if (user == lead.node || is_marked(*user, ctx.signature)) continue;
    std::optional<LinearView> view = as_linear(program, *user);
    if (view && view->input == lead.input && same_kind(lead, *view) &&
        group_key(*view) == group_key(lead) && owns_tensors(program, *view, nullptr))
      group.push_back(*view);
  }
  std::sort(group.begin(), group.end(), [&](const LinearView& a, const LinearView& b) {
    return program.graph.before(a.node, b.node);
  });
  return group;
}

// The members' weights stacked, and their biases (zeros where absent) if any member has one.
std::pair<TensorInfo, TensorInfo> merged_tensors(TensorOps& ops,
                                                 const std::vector<LinearView>& group) {
  std::vector<TensorInfo> weights, biases;
  const TensorInfo* bias_like = nullptr;
  for (const LinearView& v : group) {
    weights.push_back(v.weight);
    biases.push_back(v.has_bias() ? v.bias : ops.full({v.out_features}, 0.0, v.weight));
    if (v.has_bias() && !bias_like) bias_like = &v.bias;
  }
  TensorInfo weight = stored_like(ops.cat(weights, 0), group[0].weight);
  if (!bias_like) return {weight, TensorInfo{}};
  return {weight, stored_like(ops.cat(biases, 0), *bias_like)};
}

std::string merged_name(const std::vector<LinearView>& group) {
  std::string name;
  for (const LinearView& v : group) name += v.short_name() + "_";
  return name + "merged";
}

int64_t record_int(const Node& node, const Record& record, std::string_view key) {
  std::optional<int64_t> value = record.at(key).integer();
  if (!value) throw PassError(node, "reversal record has a malformed '" + std::string(key) + "'");
  return *value;
}

}  // namespace

std::vector<Trigger> MergeLinears::triggers() const { return linear_triggers(); }

void MergeLinears::rewrite(PassContext& ctx, Node* node) const {
  std::string why_not;
  std::optional<LinearView> lead = as_linear(ctx.rewriter.program(), *node, &why_not);
  if (!lead) return ctx.skip(*node, why_not);
  if (!owns_tensors(ctx.rewriter.program(), *lead, &why_not)) return ctx.skip(*node, why_not);
  std::vector<LinearView> group = group_of(ctx, *lead);
  if (group.size() < 2)
    return ctx.skip(*node,
                    "no other Linear with the same dtype, device and requires_grad "
                    "reads its input");

  auto [weight, bias] = merged_tensors(ctx.tensors, group);
  const LinearView& first = group.front();
  Node* merged =
      create_linear(ctx.rewriter, first, first.node, first.input, merged_name(group), weight, bias);
  ctx.changed(merged);
  int64_t start = 0;
  for (const LinearView& member : group) {
    int64_t end = start + member.out_features;
    Record record;
    describe(member, record);
    record.set("start", start).set("end", end);
    make_slice(ctx.rewriter, first, member.node, merged, start, end);
    remove_tensors(ctx.rewriter, member);
    set_reversal_record(ctx.rewriter, member.node, ctx.signature, record);
    ctx.changed(member.node);
    start = end;
  }
}

void MergeLinears::restore(PassContext& ctx, Node* node, const Record& record) const {
  Node* source = slice_source(*node);
  std::optional<LinearView> merged =
      source ? as_linear(ctx.rewriter.program(), *source) : std::nullopt;
  if (!merged) throw PassError(*node, "is no longer a slice of a merged Linear");
  int64_t start = record_int(*node, record, "start"), end = record_int(*node, record, "end");
  if (start < 0 || end <= start || end > merged->out_features)
    throw PassError(*node, "its rows do not fit the merged Linear '" + source->name() + "'");
  if (recorded_bias(record) && !merged->has_bias())
    throw PassError(*node, "the merged Linear '" + source->name() + "' lost its bias");

  TensorOps& ops = ctx.tensors;
  TensorInfo weight = stored_like(ops.slice(merged->weight, 0, start, end), merged->weight);
  TensorInfo bias = recorded_bias(record)
                        ? stored_like(ops.slice(merged->bias, 0, start, end), merged->bias)
                        : TensorInfo{};
  restore_linear(ctx.rewriter, node, record, merged->input, weight, bias, *merged);
  ctx.restored(node);
  if (!source->users().empty()) return;
  ctx.rewriter.erase(source);
  remove_tensors(ctx.rewriter, *merged);
}

}  // namespace fxopt
