#include "passes/fuse_attention_to_sdpa.h"

#include <algorithm>
#include <functional>
#include <unordered_set>

#include "ops/attention.h"
#include "ops/cast.h"
#include "ops/matmul.h"
#include "rewrite/capture.h"
#include "rewrite/recorded_call.h"

namespace fxopt {
namespace {

// A mask fill this negative (or -inf) is a mask: exp(fill - max) is 0 in every float dtype.
constexpr double kMaskFillBound = -1e4;

// How the SDPA operand at attn_mask relates to the model's mask (what reverse undoes).
constexpr std::string_view kMaskNone = "none";    // no mask
constexpr std::string_view kMaskGiven = "given";  // the model's additive mask itself
constexpr std::string_view kMaskCast = "cast";    // a new type_as(mask, q)
constexpr std::string_view kMaskFill = "fill";    // a new where(condition, fill, 0.0)
// How the SDPA key relates to the matmul's second operand.
constexpr std::string_view kKeyGiven = "given";            // the model transposed k
constexpr std::string_view kKeyTransposed = "transposed";  // a new transpose of that operand

// The record: the SDPA call's original call (rewrite/recorded_call.h), the interior nodes it
// absorbed (capture_runs), and the key's and the mask's forms above.
constexpr RecordKey<Arg> kRuns{"runs"};
constexpr RecordKey<std::string> kKey{"key"};
constexpr RecordKey<std::string> kMask{"mask"};

struct Match {
  Node* out = nullptr;            // the product with v; becomes the SDPA call
  Node* query = nullptr;          // SDPA's q
  Node* key_t = nullptr;          // the first product's second operand
  Node* key = nullptr;            // the untransposed key, when the model's transpose is absorbed
  bool key_t_transposes = false;  // key_t swaps the last two dims of some value
  Node* value = nullptr;          // SDPA's v
  Node* scores = nullptr;         // q @ k^T
  Node* masked = nullptr;         // the node applying the mask
  Node* mask = nullptr;           // the additive mask, or the fill's condition
  std::string_view mask_form = kMaskNone;
  MaskFill fill;
  double scale = 1.0;
  std::vector<Node*> interior;  // the nodes the rewrite removes
  std::unordered_set<const Node*> inside;

  void absorb(Node* n) {
    interior.push_back(n);
    inside.insert(n);
  }
  // SDPA's operands as reverse finds them again: q, k (or the operand it transposes), v, mask.
  std::vector<Node*> operands() const {
    std::vector<Node*> out_operands = {query, key ? key : key_t, value};
    if (mask) out_operands.push_back(mask);
    return out_operands;
  }
};

std::string quoted(const Node& n) { return "'" + n.name() + "'"; }

// Walks producers from the final product `out`; returns why it is no attention, or nullopt.
std::optional<std::string> match_chain(const Program& program, Node* out, Match& m) {
  std::string why_not;
  std::optional<MatMul> product = as_matmul(*out, &why_not);
  if (!product) return why_not;
  m.out = out;
  m.value = product->b;
  Node* n = product->a;
  // Inactive dropout and casts between the softmax and the product, in any order.
  for (;;) {
    if (std::optional<Dropout> dropout = as_dropout(program, *n)) {
      if (!dropout->identity)
        return "the dropout " + quoted(*n) +
               " is active (training mode, p > 0); SDPA without dropout would change the result";
      m.absorb(n);
      n = dropout->input;
    } else if (Node* source = cast_input(*n)) {
      m.absorb(n);
      n = source;
    } else {
      break;
    }
  }
  std::optional<Node*> softmax = as_last_dim_softmax(program, *n, &why_not);
  if (!softmax) {
    if (!why_not.empty()) return why_not;
    return "not the end of an attention: its first operand " + quoted(*n) + " is not a softmax";
  }
  m.absorb(n);
  n = *softmax;

  auto scores_like = [](const Node& x) {
    std::string unused;
    return as_scale(x) || as_matmul(x, &unused);
  };
  if (std::optional<TensorPair> add = as_tensor_add(*n)) {
    bool first = scores_like(*add->a);
    if (!first && !scores_like(*add->b))
      return "the softmax input " + quoted(*n) + " adds no scaled q @ k^T";
    m.masked = n;
    m.mask = first ? add->b : add->a;
    m.mask_form = kMaskGiven;
    n = first ? add->a : add->b;
  } else if (why_not.clear(); std::optional<MaskFill> fill = as_mask_fill(*n, &why_not)) {
    if (!(fill->fill <= kMaskFillBound))
      return "the fill " + quoted(*n) + " writes " + to_string(Arg(fill->fill)) +
             ", not a mask value (-inf or <= -1e4)";
    m.masked = n;
    m.mask = fill->condition;
    m.mask_form = kMaskFill;
    m.fill = *fill;
    n = fill->scores;
  } else if (!why_not.empty()) {
    return why_not;
  }
  if (m.masked) m.absorb(m.masked);
  while (std::optional<Scale> scale = as_scale(*n)) {
    m.scale *= scale->factor;
    m.absorb(n);
    n = scale->input;
  }
  std::optional<MatMul> scores = as_matmul(*n, &why_not);
  if (!scores)
    return "the softmax input is not q @ k^T (optionally scaled by constants and masked): " +
           quoted(*n) + " is " + why_not;
  m.scores = n;
  m.absorb(n);
  m.query = scores->a;
  // A scale on q that only this product reads.
  while (m.query->users().size() == 1) {
    std::optional<Scale> scale = as_scale(*m.query);
    if (!scale) break;
    m.scale *= scale->factor;
    m.absorb(m.query);
    m.query = scale->input;
  }
  m.key_t = scores->b;
  Node* key = last_two_transposed(*m.key_t);
  m.key_t_transposes = key != nullptr;
  if (key && m.key_t->users().size() == 1) {  // else transposed back by a new node
    m.key = key;
    m.absorb(m.key_t);
  }
  return std::nullopt;
}

// Shape facts fx recorded (export, ShapeProp); unknown ones pass.
std::optional<std::string> check_shapes(const Match& m) {
  std::vector<int> ranks;
  for (const Node* n : {m.query, m.key ? m.key : m.key_t, m.value, m.scores})
    if (n->rank()) ranks.push_back(*n->rank());
  bool equal = std::adjacent_find(ranks.begin(), ranks.end(), std::not_equal_to<>()) == ranks.end();
  if (!equal || (!ranks.empty() && ranks.front() != 3 && ranks.front() != 4))
    return std::string("q, k, v and the scores are not all 3-D or all 4-D");
  if (!m.key_t_transposes && !m.key_t->rank())
    return "the key operand " + quoted(*m.key_t) +
           " is not a transpose of the last two dims and its rank is unknown";
  if (m.masked) {
    std::optional<int> before = m.scores->rank(), after = m.masked->rank();
    const std::vector<int64_t>&bs = m.scores->shape(), &as = m.masked->shape();
    bool wider = before && after && *before != *after;
    for (size_t i = 0; !wider && i < bs.size() && bs.size() == as.size(); ++i)
      wider = bs[i] >= 0 && as[i] >= 0 && bs[i] != as[i];
    if (wider) return "the mask broadcasts the scores to a larger shape";
  }
  return std::nullopt;
}

bool integral_dtype(const std::string& dtype) {
  return dtype == "bool" || dtype.starts_with("int") || dtype.starts_with("uint");
}

// Every user of an interior value is inside the match (the runtime checks of those values come
// along); every value the interior reads is an SDPA operand, a get_attr or a node that only the
// interior reads (`getattr(q, "dtype")` for a cast), which comes along too.
std::optional<std::string> contain(Match& m) {
  m.inside.insert(m.out);
  std::vector<Node*> operands = m.operands();
  auto allowed = [&](Node* r) {
    return m.inside.contains(r) || r->kind() == NodeKind::GetAttr ||
           std::find(operands.begin(), operands.end(), r) != operands.end();
  };
  for (size_t i = 0; i < m.interior.size(); ++i) {
    Node* n = m.interior[i];
    for (Node* user : n->users()) {
      if (m.inside.contains(user)) continue;
      if (!is_value_check(*user) || !user->users().empty())
        return "the intermediate value " + quoted(*n) + " is also read by " + quoted(*user) +
               " outside the attention";
      m.absorb(user);
    }
  }
  for (size_t i = 0; i < m.interior.size(); ++i) {
    std::optional<std::string> problem;
    auto visit = [&](Node* r) {
      if (problem || allowed(r)) return;
      bool private_to_match =
          (r->kind() == NodeKind::CallFunction || r->kind() == NodeKind::CallMethod) &&
          std::ranges::all_of(r->users(), [&](Node* u) { return m.inside.contains(u); });
      bool reads_allowed = true;
      for (const Arg& a : r->args()) a.for_each_node([&](Node* x) { reads_allowed &= allowed(x); });
      for (const auto& [key, a] : r->kwargs().items)
        a.for_each_node([&](Node* x) { reads_allowed &= allowed(x); });
      if (private_to_match && reads_allowed)
        m.absorb(r);
      else
        problem = quoted(*m.interior[i]) + " reads " + quoted(*r) +
                  ", which is neither an input of the attention nor used only by it";
    };
    Node* n = m.interior[i];
    n->for_each_input(visit);
    if (problem) return problem;
  }
  m.inside.erase(m.out);
  return std::nullopt;
}

// The interior in graph order, cut into runs of consecutive nodes. Each run is recorded with
// the name of the node that followed it (reverse rebuilds it there, if that node still comes
// after everything the run reads), the positions in `known` of what it reads, and its nodes.
std::optional<Arg> capture_runs(const Graph& graph, std::vector<Node*> interior,
                                std::vector<Node*>& known) {
  std::sort(interior.begin(), interior.end(), [&](Node* a, Node* b) { return graph.before(a, b); });
  std::unordered_set<const Node*> removed(interior.begin(), interior.end());
  Tuple runs;
  for (size_t begin = 0; begin < interior.size();) {
    size_t end = begin + 1;
    while (end < interior.size() && interior[end - 1]->next() == interior[end]) ++end;
    std::span<Node* const> run(interior.data() + begin, end - begin);
    Tuple reads;
    auto note = [&](Node* r) {
      auto it = std::find(known.begin(), known.end(), r);
      Arg index(int64_t(it - known.begin()));
      if (it != known.end() && std::ranges::find(reads.items, index) == reads.items.end())
        reads.items.push_back(std::move(index));
    };
    for (Node* n : run) {
      n->for_each_input(note);
    }
    std::optional<Arg> nodes = capture_nodes(run, known);
    if (!nodes) return std::nullopt;
    runs.items.push_back(Tuple{{run.back()->next()->name(), std::move(reads), std::move(*nodes)}});
    known.insert(known.end(), run.begin(), run.end());
    begin = end;
  }
  return runs;
}

}  // namespace

std::vector<Trigger> FuseAttentionToSdpa::triggers() const { return matmul_triggers(); }

void FuseAttentionToSdpa::rewrite(PassContext& ctx, Node* node) const {
  const Program& program = ctx.rewriter.program();
  Match m;
  if (std::optional<std::string> why_not = match_chain(program, node, m))
    return ctx.skip(*node, *why_not);
  if (std::optional<std::string> why_not = check_shapes(m)) return ctx.skip(*node, *why_not);
  if (m.mask_form == kMaskGiven && integral_dtype(m.mask->dtype())) m.mask_form = kMaskCast;
  if (std::optional<std::string> why_not = contain(m)) return ctx.skip(*node, *why_not);

  std::vector<Node*> known = m.operands();
  std::optional<Arg> runs = capture_runs(program.graph, m.interior, known);
  std::optional<Record> record = record_call(*node, known);
  if (!runs || !record) return ctx.skip(*node, "reads values a reversal record cannot hold");

  Rewriter& rewriter = ctx.rewriter;
  bool aten = is_aten_call(*node);
  Node* key = m.key ? m.key : insert_last_two_transpose(rewriter, node, m.key_t, aten);
  Node* mask = m.mask;
  if (m.mask_form == kMaskCast) mask = insert_type_as(rewriter, node, m.mask, m.query, aten);
  if (m.mask_form == kMaskFill) mask = insert_additive_mask(rewriter, node, m.fill, aten);
  record->set(kRuns, std::move(*runs))
      .set(kKey, std::string(m.key ? kKeyGiven : kKeyTransposed))
      .set(kMask, std::string(m.mask_form));

  Call call = sdpa_call(m.query, key, m.value, mask, m.scale, aten);
  rewriter.set_target(node, call.kind, call.target);
  rewriter.set_inputs(node, std::move(call.args), std::move(call.kwargs));
  std::sort(m.interior.begin(), m.interior.end(),
            [&](Node* a, Node* b) { return program.graph.before(b, a); });
  for (Node* n : m.interior) rewriter.erase(n);
  set_reversal_record(rewriter, node, ctx.signature, *record);
  ctx.changed(node);
}

void FuseAttentionToSdpa::restore(PassContext& ctx, Node* node, const RecordReader& record) const {
  auto cannot = [&](const std::string& why) {
    return PassError(*node, "cannot restore the attention: " + why);
  };
  RecordField key_field = record.at(kKey), mask_field = record.at(kMask);
  const std::string &key_form = key_field.text(), &mask_form = mask_field.text();
  if (key_form != kKeyGiven && key_form != kKeyTransposed)
    key_field.fail("is not a form of the key");
  if (mask_form != kMaskNone && mask_form != kMaskGiven && mask_form != kMaskCast &&
      mask_form != kMaskFill)
    mask_field.fail("is not a form of the mask");
  if (!is_sdpa_call(*node) || node->args().size() != 3)
    throw cannot("it is no longer the scaled_dot_product_attention call this pass made");
  std::vector<Node*> known;
  for (const Arg& a : node->args()) {
    if (!a.node()) throw cannot("an operand is not a graph value");
    known.push_back(a.node());
  }
  const Arg* attn_mask = node->kwargs().find("attn_mask");
  Node* mask = attn_mask ? attn_mask->node() : nullptr;
  if ((mask == nullptr) != (mask_form == kMaskNone))
    throw cannot("its attn_mask does not match the record");
  // The helper nodes forward made, read through to the model's own values.
  std::vector<Node*> made;
  auto read_through = [&](Node*& operand) {
    if (operand->args().empty() || !operand->args()[0].node())
      throw cannot(quoted(*operand) + " is not the helper this pass made");
    made.push_back(operand);
    operand = operand->args()[0].node();
  };
  if (key_form == kKeyTransposed) read_through(known[1]);
  if (mask_form == kMaskCast || mask_form == kMaskFill) read_through(mask);
  if (mask) known.push_back(mask);

  Rewriter& rewriter = ctx.rewriter;
  const Graph& graph = rewriter.graph();
  for (const RecordField& run : record.get(kRuns).items()) {
    std::vector<RecordField> fields = run.items(3);  // (anchor name, reads, nodes)
    Node* anchor = graph.find_by_name(fields[0].text());
    bool in_place = anchor && !anchor->erased() && (anchor == node || graph.before(anchor, node));
    for (const RecordField& read : fields[1].items())
      in_place = in_place && graph.before(known[read.index(known.size())], anchor);
    std::vector<Node*> rebuilt =
        rebuild_nodes(rewriter, in_place ? anchor : node, fields[2], known);
    known.insert(known.end(), rebuilt.begin(), rebuilt.end());
  }
  restore_call(rewriter, node, record, known);
  for (Node* helper : made)
    if (helper->users().empty()) rewriter.erase(helper);
  ctx.restored(node);
}

}  // namespace fxopt
