#include "passes/merge_linears.h"

#include <algorithm>
#include <tuple>
#include <unordered_set>

#include "passes/linear_rewrite.h"

namespace fxopt {
namespace {

// The record of each member: the Linear it was (passes/linear_rewrite.h) and its rows
// [start, end) of the merged one.
constexpr RecordKey<int64_t> kStart{"start"};
constexpr RecordKey<int64_t> kEnd{"end"};

// What members of one merged Linear must share, besides input and spelling.
auto group_key(const LinearView& v) {
  const TensorInfo& bias = v.has_bias() ? v.bias : v.weight;  // a zero bias is stored like W
  return std::tuple(v.in_features, v.dtype(), v.device(), v.requires_grad(), v.weight.is_parameter,
                    bias.requires_grad, bias.is_parameter);
}

// The Linears reading `lead`'s input that may join its group (`lead` first, then graph order).
std::vector<LinearView> readers_like(const PassContext& ctx, const LinearView& lead) {
  const Program& program = ctx.rewriter.program();
  std::vector<LinearView> readers;
  for (Node* user : lead.input->users()) {
    if (user == lead.node || ctx.marked(*user)) continue;
    std::optional<LinearView> view = as_linear(program, *user);
    if (view && view->input == lead.input && same_kind(lead, *view) &&
        group_key(*view) == group_key(lead))
      readers.push_back(*view);
  }
  std::sort(readers.begin(), readers.end(), [&](const LinearView& a, const LinearView& b) {
    return program.graph.before(a.node, b.node);
  });
  return readers;
}

// The call site among `sites` that reads `input` and is neither merged nor `taken` yet.
const LinearView* site_reading(const PassContext& ctx, const std::vector<LinearView>& sites,
                               const Node* input, const std::unordered_set<const Node*>& taken) {
  for (const LinearView& site : sites)
    if (site.input == input && !taken.contains(site.node) && !ctx.marked(*site.node)) return &site;
  return nullptr;
}

// The groups to merge, one per call site of the lead's tensors: groups[j][i] is member i at the
// lead's j-th site. A Linear that owns its tensors has one site. Tensors shared by several
// sites (ALBERT: one layer's weights serve every layer) merge only with members whose every
// site reads the input of one of the lead's sites, so one merged weight serves all of them and
// no site is left reading a tensor the merge removes. Members keep one order at every site.
std::vector<std::vector<LinearView>> merge_groups(PassContext& ctx, const LinearView& lead,
                                                  std::string* why_not) {
  const Program& program = ctx.rewriter.program();
  std::optional<std::vector<LinearView>> lead_sites = call_sites(program, lead, why_not);
  if (!lead_sites) return {};
  std::vector<std::vector<LinearView>> groups;
  std::unordered_set<const Node*> taken;  // every site in a group: each joins one group once
  for (const LinearView& site : *lead_sites) {
    if (ctx.marked(*site.node)) {
      *why_not = "it shares its tensors with '" + site.node->name() + "', which is merged already";
      return {};
    }
    groups.push_back({site});
    taken.insert(site.node);
  }
  for (const LinearView& reader : readers_like(ctx, lead)) {
    if (taken.contains(reader.node)) continue;
    std::optional<std::vector<LinearView>> sites = call_sites(program, reader, nullptr);
    if (!sites || sites->size() != lead_sites->size()) continue;
    std::unordered_set<const Node*> joined = taken;
    std::vector<const LinearView*> aligned;
    for (const LinearView& lead_site : *lead_sites) {
      const LinearView* site = site_reading(ctx, *sites, lead_site.input, joined);
      if (!site) break;
      aligned.push_back(site);
      joined.insert(site->node);
    }
    if (aligned.size() != groups.size()) continue;
    for (size_t j = 0; j < groups.size(); ++j) groups[j].push_back(*aligned[j]);
    taken = std::move(joined);
  }
  if (groups.front().size() < 2) {
    *why_not = lead_sites->size() == 1
                   ? "no other Linear with the same dtype, device and requires_grad reads its input"
                   : "its tensors are shared by " + std::to_string(lead_sites->size()) +
                         " Linears, and no other Linear's tensors are read at every one of "
                         "their inputs";
    return {};
  }
  return groups;
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

}  // namespace

std::vector<Trigger> MergeLinears::triggers() const { return linear_triggers(); }

void MergeLinears::begin(const Program& program) const { tied_.emplace(program); }

void MergeLinears::rewrite(PassContext& ctx, Node* node) const {
  std::string why_not;
  std::optional<LinearView> lead = as_linear(ctx.rewriter.program(), *node, &why_not);
  if (!lead) return ctx.skip(*node, why_not);
  std::vector<std::vector<LinearView>> groups = merge_groups(ctx, *lead, &why_not);
  if (groups.empty()) return ctx.skip(*node, why_not);

  const std::vector<LinearView>& members = groups.front();
  auto [weight, bias] = merged_tensors(ctx.tensors, members);
  std::string name = merged_name(members);
  StoredLinear stored = store_linear(ctx.rewriter, members.front(), name, weight, bias);
  for (const std::vector<LinearView>& group : groups) {
    const LinearView& first = group.front();
    Node* merged = call_linear(ctx.rewriter, first, stored, first.node, first.input, name);
    ctx.changed(merged);
    int64_t start = 0;
    for (const LinearView& member : group) {
      int64_t end = start + member.out_features;
      Record record;
      describe(member, *tied_, record);
      record.set(kStart, start).set(kEnd, end);
      make_slice(ctx.rewriter, first, member.node, merged, start, end);
      set_reversal_record(ctx.rewriter, member.node, ctx.signature, record);
      ctx.changed(member.node);
      start = end;
    }
  }
  // Once no site reads them any more.
  for (const std::vector<LinearView>& group : groups)
    for (const LinearView& member : group) remove_tensors(ctx.rewriter, member);
}

void MergeLinears::restore(PassContext& ctx, Node* node, const RecordReader& record) const {
  Node* source = slice_source(*node);
  std::optional<LinearView> merged =
      source ? as_linear(ctx.rewriter.program(), *source) : std::nullopt;
  if (!merged) throw PassError(*node, "is no longer a slice of a merged Linear");
  int64_t start = record.get(kStart), end = record.get(kEnd);
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
