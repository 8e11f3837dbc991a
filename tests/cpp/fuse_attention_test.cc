#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "norm_fixtures.h"
#include "ops/attention.h"
#include "passes/fuse_attention_to_sdpa.h"

namespace fxopt {
namespace {

using testing::ReferenceInterpreter;
using testing::Value;

const std::string kSig = "FuseAttentionToSdpa-test";
const std::string kSdpa = "torch._C._nn.scaled_dot_product_attention";
const std::string kAtenSdpa = "aten.scaled_dot_product_attention.default";
constexpr double kInf = std::numeric_limits<double>::infinity();

// ---- reference kernels for the pieces of an attention (N-D, no batch broadcasting) ----

const TensorInfo& tensor(const Value& v) { return std::get<TensorInfo>(v); }

int64_t numel(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

TensorInfo permute(ReferenceTensorOps& ops, const TensorInfo& x, std::vector<int64_t> perm) {
  size_t rank = x.shape.size();
  std::vector<int64_t> shape(rank), in_strides(rank, 1);
  for (size_t d = rank - 1; d > 0; --d) in_strides[d - 1] = in_strides[d] * x.shape[d];
  for (size_t d = 0; d < rank; ++d) {
    if (perm[d] < 0) perm[d] += int64_t(rank);
    shape[d] = x.shape[perm[d]];
  }
  const std::vector<double>& in = ops.values(x);
  std::vector<double> out(in.size());
  std::vector<int64_t> index(rank, 0);
  for (size_t flat = 0; flat < out.size(); ++flat) {
    int64_t source = 0;
    for (size_t d = 0; d < rank; ++d) source += index[d] * in_strides[perm[d]];
    out[flat] = in[source];
    for (size_t d = rank; d-- > 0;) {
      if (++index[d] < shape[d]) break;
      index[d] = 0;
    }
  }
  return ops.make(shape, std::move(out), x.dtype);
}

TensorInfo transpose(ReferenceTensorOps& ops, const TensorInfo& x, int64_t d0, int64_t d1) {
  int64_t rank = int64_t(x.shape.size());
  std::vector<int64_t> perm(rank);
  for (int64_t d = 0; d < rank; ++d) perm[d] = d;
  std::swap(perm[d0 < 0 ? d0 + rank : d0], perm[d1 < 0 ? d1 + rank : d1]);
  return permute(ops, x, perm);
}

TensorInfo matmul(ReferenceTensorOps& ops, const TensorInfo& a, const TensorInfo& b) {
  int64_t n = a.dim(-2), k = a.dim(-1), m = b.dim(-1);
  int64_t batch = numel(a.shape) / (n * k);
  if (b.dim(-2) != k || numel(b.shape) / (k * m) != batch)
    throw std::invalid_argument("reference matmul: operand shapes do not fit");
  const auto &av = ops.values(a), &bv = ops.values(b);
  std::vector<double> out(batch * n * m, 0.0);
  for (int64_t z = 0; z < batch; ++z)
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < m; ++j)
        for (int64_t p = 0; p < k; ++p)
          out[(z * n + i) * m + j] += av[(z * n + i) * k + p] * bv[(z * k + p) * m + j];
  std::vector<int64_t> shape = a.shape;
  shape.back() = m;
  return ops.make(shape, std::move(out), a.dtype);
}

TensorInfo softmax(ReferenceTensorOps& ops, const TensorInfo& x) {
  std::vector<double> v = ops.values(x);
  int64_t n = x.shape.back();
  for (size_t row = 0; row < v.size(); row += n) {
    double top = -kInf, sum = 0;
    for (int64_t i = 0; i < n; ++i) top = std::max(top, v[row + i]);
    for (int64_t i = 0; i < n; ++i) sum += v[row + i] = std::exp(v[row + i] - top);
    for (int64_t i = 0; i < n; ++i) v[row + i] /= sum;
  }
  return ops.make(x.shape, std::move(v), x.dtype);
}

// `fill` where `mask` (a tensor whose shape ends x's) is nonzero.
TensorInfo masked_fill(ReferenceTensorOps& ops, const TensorInfo& x, const TensorInfo& mask,
                       double fill) {
  std::vector<double> v = ops.values(x);
  const std::vector<double>& m = ops.values(mask);
  for (size_t i = 0; i < v.size(); ++i)
    if (m[i % m.size()] != 0) v[i] = fill;
  return ops.make(x.shape, std::move(v), x.dtype);
}

Value sdpa_kernel(ReferenceInterpreter& in, const Node& node, const std::vector<Value>& args) {
  ReferenceTensorOps& ops = in.ops();
  const TensorInfo &q = tensor(args.at(0)), &k = tensor(args.at(1)), &v = tensor(args.at(2));
  double scale = *node.kwargs().find("scale")->number();
  TensorInfo scores = matmul(ops, q, transpose(ops, k, -2, -1));
  std::vector<double> scaled = ops.values(scores);
  for (double& s : scaled) s *= scale;
  scores = ops.make(scores.shape, std::move(scaled), q.dtype);
  if (args.size() > 3) scores = ops.add(scores, tensor(args.at(3)));
  return matmul(ops, softmax(ops, scores), v);
}

void add_attention_kernels(ReferenceInterpreter& in) {
  auto function = [&](std::initializer_list<const char*> targets, ReferenceInterpreter::Kernel k) {
    for (const char* t : targets) in.add_kernel(NodeKind::CallFunction, t, k);
  };
  auto method = [&](const char* target, ReferenceInterpreter::Kernel k) {
    in.add_kernel(NodeKind::CallMethod, target, k);
  };
  auto transpose_kernel = [](ReferenceInterpreter& in, const Node&, const std::vector<Value>& a) {
    return Value(transpose(in.ops(), tensor(a.at(0)), int64_t(std::get<double>(a.at(1))),
                           int64_t(std::get<double>(a.at(2)))));
  };
  function({"aten.transpose.int", "torch.transpose"}, transpose_kernel);
  method("transpose", transpose_kernel);
  method("permute", [](ReferenceInterpreter& in, const Node&, const std::vector<Value>& a) {
    std::vector<int64_t> perm;
    for (size_t i = 1; i < a.size(); ++i) perm.push_back(int64_t(std::get<double>(a[i])));
    return Value(permute(in.ops(), tensor(a.at(0)), perm));
  });
  auto matmul_kernel = [](ReferenceInterpreter& in, const Node&, const std::vector<Value>& a) {
    return Value(matmul(in.ops(), tensor(a.at(0)), tensor(a.at(1))));
  };
  function({"_operator.matmul", "torch.matmul", "aten.matmul.default"}, matmul_kernel);
  method("matmul", matmul_kernel);
  auto softmax_kernel = [](ReferenceInterpreter& in, const Node&, const std::vector<Value>& a) {
    return Value(softmax(in.ops(), tensor(a.at(0))));  // the tests normalize the last dim
  };
  function({"torch.nn.functional.softmax", "aten.softmax.int", "aten._softmax.default"},
           softmax_kernel);
  method("softmax", softmax_kernel);
  in.add_kernel(NodeKind::CallModule, "torch.nn.modules.activation.Softmax", softmax_kernel);
  auto identity = [](ReferenceInterpreter&, const Node&, const std::vector<Value>& a) {
    return a.at(0);
  };
  function({"torch.nn.functional.dropout", "aten.dropout.default"}, identity);
  in.add_kernel(NodeKind::CallModule, "torch.nn.modules.dropout.Dropout", identity);
  auto nothing = [](ReferenceInterpreter&, const Node&, const std::vector<Value>&) {
    return Value(std::monostate{});
  };
  function({"aten._assert_tensor_metadata.default", "getattr"}, nothing);
  auto fill_kernel = [](ReferenceInterpreter& in, const Node&, const std::vector<Value>& a) {
    return Value(masked_fill(in.ops(), tensor(a.at(0)), tensor(a.at(1)), std::get<double>(a[2])));
  };
  function({"aten.masked_fill.Scalar"}, fill_kernel);
  method("masked_fill", fill_kernel);
  function({"torch.where", "aten.where.Scalar"},
           [](ReferenceInterpreter& in, const Node&, const std::vector<Value>& a) {
             const TensorInfo& cond = tensor(a.at(0));
             std::vector<double> v = in.ops().values(cond);
             for (double& x : v) x = x != 0 ? std::get<double>(a[1]) : std::get<double>(a[2]);
             return Value(in.ops().make(cond.shape, std::move(v)));
           });
  function({"_operator.eq"},
           [](ReferenceInterpreter& in, const Node&, const std::vector<Value>& a) {
             const TensorInfo& x = tensor(a.at(0));
             std::vector<double> v = in.ops().values(x);
             for (double& e : v) e = e == std::get<double>(a.at(1)) ? 1.0 : 0.0;
             return Value(in.ops().make(x.shape, std::move(v), "bool"));
           });
  function({kSdpa.c_str(), kAtenSdpa.c_str()}, sdpa_kernel);
}

class FuseAttentionTest : public ::testing::Test, protected testing::NormFixture {
 protected:
  PassResult apply(bool reverse = false) {
    return run_pass(FuseAttentionToSdpa(), program, edits, ops, kSig, reverse);
  }
  std::vector<TensorInfo> run_graph() {
    ReferenceInterpreter in(program, ops);
    add_attention_kernels(in);
    return in.run(inputs_);
  }
  void module(const std::string& path, const std::string& type, Dict attributes) {
    program.modules[path] = ModuleInfo{Symbol::intern(type), std::move(attributes), {}};
    program.taken_paths.insert(path);
  }
  // Placeholders q [2, 4, 3], k and v [2, 5, 3] (batch x heads folded, 4 queries, 5 keys) and a
  // 0/1 mask [4, 5] that masks some keys of every query but never all of them.
  Node* q() { return input_node("q", {2, 4, 3}); }
  Node* k() { return input_node("k", {2, 5, 3}); }
  Node* v() { return input_node("v", {2, 5, 3}); }
  Node* mask(const std::string& dtype) {
    inputs_["mask"] =
        ops.make({4, 5}, {0, 1, 0, 0, 1, 1, 0, 0, 0, 0, 0, 0, 1, 1, 0, 0, 0, 0, 0, 1}, dtype);
    return b.input("mask");
  }
  Node* input_node(const std::string& name, std::vector<int64_t> shape) {
    inputs_[name] = input(std::move(shape));
    return b.input(name);
  }
  // Records what torch.export would: rank, dtype and sizes of the node's value.
  void known(Node* node, std::vector<int64_t> shape, std::string dtype = "float32") {
    program.graph.set_value_info(node, std::move(dtype), std::move(shape));
  }
  void expect_unchanged(const PassResult& result, const std::string& reason) {
    EXPECT_TRUE(result.changed.empty());
    bool found = false;
    for (const Skip& s : result.skipped) found |= s.reason.find(reason) != std::string::npos;
    if (!found)
      for (const Skip& s : result.skipped) ADD_FAILURE() << s.node << ": " << s.reason;
    EXPECT_TRUE(found) << "no skip says: " << reason;
    EXPECT_EQ(count(NodeKind::CallFunction, kSdpa) + count(NodeKind::CallFunction, kAtenSdpa), 0u);
  }

  std::map<std::string, TensorInfo> inputs_;
};

// A user's module as symbolic_trace records it: torch.matmul, `/`, masked_fill with -inf (the
// mask computed in between), F.softmax, nn.Dropout in eval mode, `@`.
TEST_F(FuseAttentionTest, SymbolicAttentionWithMaskedFillBecomesSdpaAndBack) {
  module("drop", "torch.nn.modules.dropout.Dropout", Dict{{{"training", false}}});
  Node *qn = q(), *kn = k(), *vn = v(), *m = mask("float32");
  Node* kt = b.method("transpose", "transpose", {kn, -2, -1});
  Node* scores = b.call("matmul", "torch.matmul", {qn, kt});
  Node* scaled = b.call("truediv", "_operator.truediv", {scores, 2.0});
  Node* eq = b.call("eq", "_operator.eq", {m, 0.0});
  Node* masked = b.method("masked_fill", "masked_fill", {scaled, eq, -kInf});
  Node* probs = b.call("softmax", "torch.nn.functional.softmax", {masked},
                       Dict{{{"dim", -1}, {"_stacklevel", 3}, {"dtype", None{}}}});
  Node* dropped = b.module("drop", "drop", {probs});
  Node* out = b.call("matmul_1", "_operator.matmul", {dropped, vn});
  b.output(out);
  auto before = run_graph();
  auto graph_before = structure();

  PassResult forward = apply();
  EXPECT_EQ(forward.changed, std::vector<std::string>{"matmul_1"});
  ASSERT_EQ(forward.skipped.size(), 1u);  // the first product is no attention's end
  EXPECT_EQ(forward.skipped[0].node, "matmul");
  EXPECT_TRUE(out->is(NodeKind::CallFunction, Symbol::intern(kSdpa)));
  EXPECT_EQ(out->args(), (Args{qn, kn, vn}));
  EXPECT_EQ(*out->kwargs().find("scale"), Arg(0.5));
  // masked_fill(eq, -inf) became the additive mask where(eq, -inf, 0.0).
  Node* attn_mask = out->kwargs().find("attn_mask")->node();
  ASSERT_NE(attn_mask, nullptr);
  EXPECT_TRUE(attn_mask->is(NodeKind::CallFunction, Symbol::intern("torch.where")));
  EXPECT_EQ(attn_mask->args(), (Args{eq, -kInf, 0.0}));
  for (const char* gone : {"torch.matmul", "_operator.matmul", "torch.nn.functional.softmax"})
    EXPECT_EQ(count(NodeKind::CallFunction, gone), 0u) << gone;
  EXPECT_EQ(program.graph.size(), 8u);  // q, k, v, mask, eq, where, sdpa, output
  EXPECT_TRUE(program.graph.lint().empty());
  EXPECT_LT(max_diff(before, run_graph()), 1e-12);

  PassResult backward = apply(/*reverse=*/true);
  EXPECT_EQ(backward.changed, std::vector<std::string>{"matmul_1"});
  EXPECT_EQ(structure(), graph_before);  // names, operands and order, eq in between included
  EXPECT_EQ(max_diff(before, run_graph()), 0.0);
  EXPECT_TRUE(out->meta().items.empty());
}

// transformers' eager_attention_forward as torch.export records it: transpose(2, 3) of a 4-D
// key, `* scaling`, `+ attention_mask`, softmax in float32 with a runtime check and a cast back,
// dropout(p=0.0, train=False).
TEST_F(FuseAttentionTest, ExportedEagerAttentionBecomesAtenSdpaAndBack) {
  Node* qn = input_node("q", {1, 2, 4, 3});
  Node* kn = input_node("k", {1, 2, 5, 3});
  Node* vn = input_node("v", {1, 2, 5, 3});
  std::vector<double> mask_values(20, 0.0);
  mask_values[3] = mask_values[7] = mask_values[19] = -3.4028234663852886e38;
  inputs_["mask"] = ops.make({1, 1, 4, 5}, mask_values);
  Node* m = b.input("mask");
  Opaque float32{7};
  Node* kt = b.call("transpose_3", "aten.transpose.int", {kn, 2, 3});
  Node* scores = b.call("matmul", "aten.matmul.default", {qn, kt});
  Node* scaled = b.call("mul", "aten.mul.Tensor", {scores, 0.25});
  Node* masked = b.call("add", "aten.add.Tensor", {scaled, m});
  Node* probs = b.call("softmax", "aten.softmax.int", {masked, -1, float32});
  Node* check = b.call("_assert_tensor_metadata_default", "aten._assert_tensor_metadata.default",
                       {probs}, Dict{{{"dtype", float32}}});
  Node* cast = b.call("to", "aten.to.dtype", {probs, float32});
  Node* dropped = b.call("dropout", "aten.dropout.default", {cast, 0.0, false});
  Node* out = b.call("matmul_1", "aten.matmul.default", {dropped, vn});
  b.output(Tuple{{out}});
  for (Node* n : {qn, kn, vn}) known(n, {1, 2, n == qn ? 4 : 5, 3});
  known(m, {1, 1, 4, 5});
  known(kt, {1, 2, 3, 5});
  known(scores, {1, 2, 4, 5});
  known(scaled, {1, 2, 4, 5});
  known(masked, {1, 2, 4, 5});
  auto before = run_graph();
  auto graph_before = structure();

  PassResult forward = apply();
  EXPECT_EQ(forward.changed, std::vector<std::string>{"matmul_1"});
  EXPECT_TRUE(out->is(NodeKind::CallFunction, Symbol::intern(kAtenSdpa)));
  EXPECT_EQ(out->args(), (Args{qn, kn, vn}));  // k itself: the model's transpose is gone
  EXPECT_EQ(*out->kwargs().find("attn_mask"), Arg(m));
  EXPECT_EQ(*out->kwargs().find("scale"), Arg(0.25));
  EXPECT_EQ(program.graph.size(), 6u);  // q, k, v, mask, sdpa, output
  EXPECT_TRUE(check->erased());         // the runtime check went with the value it checked
  EXPECT_LT(max_diff(before, run_graph()), 1e-12);

  apply(/*reverse=*/true);
  EXPECT_EQ(structure(), graph_before);
  EXPECT_EQ(max_diff(before, run_graph()), 0.0);
}

// (q * c) @ k_t with a key the model transposed itself: the scale moves into SDPA's scale and
// a new transpose gives SDPA the key back; x.softmax(-1) and nn.Softmax(dim=-1) both count.
TEST_F(FuseAttentionTest, ScaledQueryAndPretransposedKey) {
  module("softmax", "torch.nn.modules.activation.Softmax", Dict{{{"dim", -1}}});
  Node* qn = q();
  inputs_["k_t"] = input({2, 3, 5});
  Node* kt = b.input("k_t");
  Node* vn = v();
  known(kt, {2, 3, 5});
  Node* qs = b.method("mul", "mul", {qn, 0.5});
  Node* scores = b.call("matmul", "torch.matmul", {qs, kt});
  Node* probs = b.module("softmax", "softmax", {scores});
  Node* out = b.call("matmul_1", "torch.matmul", {probs, vn});
  b.output(out);
  auto before = run_graph();
  auto graph_before = structure();

  EXPECT_EQ(apply().changed, std::vector<std::string>{"matmul_1"});
  Node* key = out->args()[1].node();
  ASSERT_NE(key, nullptr);
  EXPECT_TRUE(key->is(NodeKind::CallMethod, Symbol::intern("transpose")));
  EXPECT_EQ(key->args(), (Args{kt, -2, -1}));
  EXPECT_EQ(out->args()[0], Arg(qn));
  EXPECT_EQ(*out->kwargs().find("scale"), Arg(0.5));
  EXPECT_EQ(out->kwargs().find("attn_mask"), nullptr);
  EXPECT_LT(max_diff(before, run_graph()), 1e-12);

  apply(/*reverse=*/true);
  EXPECT_EQ(structure(), graph_before);  // the helper transpose is gone again
  EXPECT_EQ(max_diff(before, run_graph()), 0.0);
}

// `scores + bool_mask` adds 1.0 where the mask is True; SDPA would read a bool mask as "attend
// here", so the mask is cast to q's dtype first (with a known dtype; unknown ones stay as they
// are). No scale at all means scale=1.0, not SDPA's default 1/sqrt(E).
TEST_F(FuseAttentionTest, BoolAdditiveMaskIsCastAndMissingScaleIsOne) {
  Node *qn = q(), *kn = k(), *vn = v(), *m = mask("bool");
  known(m, {4, 5}, "bool");
  Node* kt = b.method("transpose", "transpose", {kn, -1, -2});
  Node* scores = b.call("matmul", "torch.matmul", {qn, kt});
  Node* masked = b.call("add", "_operator.add", {m, scores});
  Node* probs = b.method("softmax", "softmax", {masked, -1});
  Node* out = b.call("matmul_1", "torch.matmul", {probs, vn});
  b.output(out);
  auto before = run_graph();
  auto graph_before = structure();

  EXPECT_EQ(apply().changed, std::vector<std::string>{"matmul_1"});
  Node* cast = out->kwargs().find("attn_mask")->node();
  ASSERT_NE(cast, nullptr);
  EXPECT_TRUE(cast->is(NodeKind::CallMethod, Symbol::intern("type_as")));
  EXPECT_EQ(cast->args(), (Args{m, qn}));
  EXPECT_EQ(*out->kwargs().find("scale"), Arg(1.0));
  EXPECT_LT(max_diff(before, run_graph()), 1e-12);

  apply(/*reverse=*/true);
  EXPECT_EQ(structure(), graph_before);
}

// ---- where the pass must not fire ----

// A softmax over dims (..., L, S) whose result the graph also returns (attention weights).
TEST_F(FuseAttentionTest, SkipsWhenAnInteriorValueIsReadElsewhere) {
  Node *qn = q(), *kn = k(), *vn = v();
  Node* kt = b.method("transpose", "transpose", {kn, -2, -1});
  Node* scores = b.call("matmul", "torch.matmul", {qn, kt});
  Node* probs = b.call("softmax", "torch.nn.functional.softmax", {scores}, Dict{{{"dim", -1}}});
  Node* out = b.call("matmul_1", "torch.matmul", {probs, vn});
  b.output(Tuple{{out, probs}});
  auto graph_before = structure();
  expect_unchanged(apply(), "the intermediate value 'softmax' is also read by 'output'");
  EXPECT_EQ(structure(), graph_before);
}

TEST_F(FuseAttentionTest, SkipsSoftmaxOverAnotherDim) {
  Node *qn = q(), *kn = k(), *vn = v();
  Node* kt = b.method("transpose", "transpose", {kn, -2, -1});
  Node* scores = b.call("matmul", "torch.matmul", {qn, kt});
  known(scores, {2, 4, 5});
  Node* probs = b.method("softmax", "softmax", {scores, 1});
  b.output(b.call("matmul_1", "torch.matmul", {probs, vn}));
  auto graph_before = structure();
  expect_unchanged(apply(), "the softmax 'softmax' normalizes dim 1, not the last one");
  EXPECT_EQ(structure(), graph_before);
}

TEST_F(FuseAttentionTest, SkipsDropoutInTraining) {
  module("drop", "torch.nn.modules.dropout.Dropout", Dict{{{"training", true}}});
  Node *qn = q(), *kn = k(), *vn = v();
  Node* kt = b.method("transpose", "transpose", {kn, -2, -1});
  Node* scores = b.call("matmul", "torch.matmul", {qn, kt});
  Node* probs = b.method("softmax", "softmax", {scores, -1});
  Node* dropped = b.module("drop", "drop", {probs});
  Node* functional = b.call("dropout", "torch.nn.functional.dropout", {dropped},
                            Dict{{{"p", 0.1}}});  // training defaults to True
  b.output(b.call("matmul_1", "torch.matmul", {functional, vn}));
  expect_unchanged(apply(), "the dropout 'dropout' is active");
  // The module in eval mode is an identity.
  EXPECT_FALSE(as_dropout(program, *dropped)->identity);
  module("drop", "torch.nn.modules.dropout.Dropout", Dict{{{"training", false}}});
  EXPECT_TRUE(as_dropout(program, *dropped)->identity);
}

// matmul(q, w) with a second operand that is no transpose and of unknown rank: it may be a 2-D
// weight (softmax(x @ W1) @ W2 is no attention).
TEST_F(FuseAttentionTest, SkipsKeyWithoutTransposeOfUnknownRank) {
  Node *qn = q(), *kn = k(), *vn = v();
  Node* scores = b.call("matmul", "torch.matmul", {qn, kn});
  Node* probs = b.method("softmax", "softmax", {scores, -1});
  b.output(b.call("matmul_1", "torch.matmul", {probs, vn}));
  expect_unchanged(apply(), "is not a transpose of the last two dims and its rank is unknown");
}

TEST_F(FuseAttentionTest, SkipsFillsThatAreNoMask) {
  Node *qn = q(), *kn = k(), *vn = v(), *m = mask("bool");
  Node* kt = b.method("transpose", "transpose", {kn, -2, -1});
  Node* scores = b.call("matmul", "torch.matmul", {qn, kt});
  Node* filled = b.method("masked_fill", "masked_fill", {scores, m, 0.0});
  Node* probs = b.method("softmax", "softmax", {filled, -1});
  b.output(b.call("matmul_1", "torch.matmul", {probs, vn}));
  expect_unchanged(apply(), "writes 0, not a mask value");
}

TEST_F(FuseAttentionTest, TransposeViewRecognizesLastTwoDimsOnly) {
  Node* x = b.input("x");
  Node* x4 = b.input("x4");
  known(x4, {1, 2, 3, 4});
  EXPECT_EQ(last_two_transposed(*b.method("t0", "transpose", {x, -1, -2})), x);
  EXPECT_EQ(last_two_transposed(*b.method("t1", "transpose", {x, 2, 3})), nullptr);  // rank?
  EXPECT_EQ(last_two_transposed(*b.call("t2", "aten.transpose.int", {x4, 2, 3})), x4);
  EXPECT_EQ(last_two_transposed(*b.call("t3", "aten.transpose.int", {x4, 1, 2})), nullptr);
  EXPECT_EQ(last_two_transposed(*b.method("p0", "permute", {x, 0, 1, 3, 2})), x);
  EXPECT_EQ(last_two_transposed(*b.call("p1", "aten.permute.default", {x, List{{0, 2, 1}}})), x);
  EXPECT_EQ(last_two_transposed(*b.method("p2", "permute", {x, 0, 2, 3, 1})), nullptr);
}

}  // namespace
}  // namespace fxopt
