// The generated forward on hand-built graphs; the expected text is what torch.fx 2.13 prints for
// the same graphs (tests/python/test_codegen.py checks the generator against torch itself).
#include "codegen/python_source.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <map>

#include "graph_builder.h"

namespace fxopt {
namespace {

using testing::GraphBuilder;

// Spells targets as fx does for the few callables these graphs call; "torch.Size" opaque values
// print as tuples; the prologue is CodeGen.gen_fn_def's.
class FakePrinter : public SourcePrinter {
 public:
  std::map<std::string, CallTarget> targets = {
      {"_operator.add", {CallTarget::Style::Operator, "{} + {}", false}},
      {"_operator.iadd", {CallTarget::Style::Inplace, "{} += {}", false}},
      {"torch.relu", {CallTarget::Style::Qualified, "torch.relu", false}},
      {"getattr", {CallTarget::Style::Global, "getattr", true}},
      {"mylib.gelu", {CallTarget::Style::Global, "mylib.gelu", false}},
  };
  std::optional<std::string> opaque(Opaque, bool) override { return "(2, -1)"; }
  std::optional<CallTarget> call_target(Symbol target) override {
    auto it = targets.find(target.str());
    if (it == targets.end()) return std::nullopt;
    return it->second;
  }
  std::optional<TypeAnnotation> type_annotation(const Node&) override { return TypeAnnotation{}; }
  std::optional<std::string> prologue(const std::vector<std::string>& free_vars,
                                      const std::string& return_annotation) override {
    std::string out = "def forward(self";
    for (const std::string& var : free_vars) out += ", " + var;
    return out + ")" + return_annotation + ":";
  }
};

SourceOptions options() {
  return {"self", "", "", {"getattr", "max", "inf", "torch", "class"}, {"inf", "torch"}};
}

TEST(PythonSource, FreesValuesAfterTheirLastUseAndMapsLines) {
  Graph graph;
  GraphBuilder b(graph);
  Node* x = b.input("x");
  Node* y = b.call("add", "_operator.add", {x, 1.5});
  Node* z = b.module("layers_0", "layers.0", {y});
  Node* w = b.method("view", "view", {z, Opaque{1}}, Dict{{{"dim", Arg(-1)}}});
  b.output(Tuple{{w, y}});
  FakePrinter printer;
  std::optional<PythonSource> source = python_source(graph, options(), printer);
  ASSERT_TRUE(source);
  EXPECT_EQ(source->src,
            "\n\n\ndef forward(self, x):\n"
            "    add = x + 1.5;  x = None\n"
            "    layers_0 = getattr(self.layers, \"0\")(add)\n"
            "    view = layers_0.view((2, -1), dim = -1);  layers_0 = None\n"
            "    return (view, add)\n"
            "    ");
  EXPECT_EQ(source->lineno_start, 1);
  EXPECT_EQ(source->node_index, (std::vector<int64_t>{1, 2, 3, 4, 4}));
  EXPECT_EQ(source->prologue_start, 4);
  EXPECT_EQ(source->custom_builtin_names, (std::vector<std::string>{"inf", "torch"}));
}

TEST(PythonSource, SharesOneNamespaceBetweenNodesAndGlobals) {
  Graph graph;
  GraphBuilder b(graph);
  Node* x = b.input("x");
  Node* clash = b.call("mylib_gelu", "torch.relu", {x});
  Node* gelu = b.call("gelu", "mylib.gelu", {clash});
  Node* shape = b.call("getattr_1", "getattr", {gelu, "shape"});
  Node* other = b.call("getattr_2", "getattr", {gelu, "not identifier"});
  Node* torch_name = b.call("max_1", "_operator.iadd", {gelu, 1});
  b.output(List{{shape, other, torch_name}});
  FakePrinter printer;
  std::optional<PythonSource> source = python_source(graph, options(), printer);
  ASSERT_TRUE(source);
  EXPECT_EQ(source->src,
            "\n\n\ndef forward(self, x):\n"
            "    mylib_gelu = torch.relu(x);  x = None\n"
            "    gelu = mylib_gelu_1(mylib_gelu);  mylib_gelu = None\n"
            "    getattr_1 = gelu.shape\n"
            "    getattr_2 = getattr(gelu, 'not identifier')\n"
            "    gelu += 1;  max_1 = gelu;  gelu = None\n"
            "    return [getattr_1, getattr_2, max_1]\n"
            "    ");
  ASSERT_EQ(source->globals.size(), 2u);
  EXPECT_EQ(source->globals[0].first, "mylib_gelu_1");
  EXPECT_EQ(source->globals[1].first, "getattr");
}

TEST(PythonSource, DeclinesWhatItCannotPrint) {
  Graph graph;
  GraphBuilder b(graph);
  Node* x = b.input("x");
  Node* y = b.call("y", "unknown.callable", {x});
  b.output(y);
  FakePrinter printer;
  EXPECT_FALSE(python_source(graph, options(), printer));

  Graph text;
  GraphBuilder t(text);
  Node* input = t.input("x");
  Node* add = t.call("add", "_operator.add", {input, "caf\xc3\xa9"});
  t.output(add);
  EXPECT_FALSE(python_source(text, options(), printer));  // non-ASCII text: repr keeps it
}

// Values whose source spans lines: fx splits its body into lines after generating it, so
// each line is indented, a line holding `# COUNTER: n` is dropped and maps the lines after it
// to node n, and leading blank lines go.
class MultilinePrinter : public FakePrinter {
 public:
  std::optional<std::string> opaque(Opaque value, bool) override {
    return value.id == 1 ? "(1,\n# COUNTER: 9\n2)" : "\n\n3";
  }
};

TEST(PythonSource, ReadsMultilineTextAsFxDoes) {
  Graph graph;
  GraphBuilder b(graph);
  Node* x = b.input("x");
  Node* y = b.call("add", "_operator.add", {x, Opaque{1}});
  b.output(Tuple{{y, Opaque{2}}});
  MultilinePrinter printer;
  std::optional<PythonSource> source = python_source(graph, options(), printer);
  ASSERT_TRUE(source);
  EXPECT_EQ(source->src,
            "\n\n\ndef forward(self, x):\n"
            "    add = x + (1,\n"
            "    2);  x = None\n"
            "    return (add, \n"
            "    \n"
            "    3)\n"
            "    ");
  EXPECT_EQ(source->node_index, (std::vector<int64_t>{1, 9, 2, 2, 2, 2}));

  Graph blank;
  GraphBuilder first(blank);
  Node* input = first.input("x");
  printer.targets["mylib.blank"] = {CallTarget::Style::Inplace, "\n\n{}", false};
  first.output(first.call("iadd", "mylib.blank", {input}));
  source = python_source(blank, options(), printer);
  ASSERT_TRUE(source);
  EXPECT_EQ(source->src,
            "\n\n\ndef forward(self, x):\n    x;  iadd = x;  x = None\n"
            "    return iadd\n    ");
  EXPECT_EQ(source->node_index, (std::vector<int64_t>{1, 1, 1, 2, 2}));

  Graph empty;
  source = python_source(empty, options(), printer);
  ASSERT_TRUE(source);
  EXPECT_EQ(source->src, "\n\n\ndef forward(self):\n    pass\n    ");
  EXPECT_EQ(source->node_index, (std::vector<int64_t>{-1, -1}));
}

TEST(PythonSource, FloatsAndStringsPrintAsPythonRepr) {
  EXPECT_EQ(python_float_repr(1e-05), "1e-05");
  EXPECT_EQ(python_float_repr(0.0001), "0.0001");
  EXPECT_EQ(python_float_repr(100000.0), "100000.0");
  EXPECT_EQ(python_float_repr(1e16), "1e+16");
  EXPECT_EQ(python_float_repr(1e15), "1000000000000000.0");
  EXPECT_EQ(python_float_repr(-0.0), "-0.0");
  EXPECT_EQ(python_float_repr(0.1), "0.1");
  EXPECT_EQ(python_float_repr(1.5e300), "1.5e+300");
  EXPECT_EQ(python_float_repr(std::numeric_limits<double>::infinity()), "inf");
  EXPECT_EQ(python_float_repr(-std::numeric_limits<double>::infinity()), "-inf");
  EXPECT_EQ(python_float_repr(std::nan("")), "nan");
  EXPECT_EQ(python_str_repr("a'b"), "\"a'b\"");
  EXPECT_EQ(python_str_repr("a'b\""), "'a\\'b\"'");
  EXPECT_EQ(python_str_repr("\\\n\t\x01"), "'\\\\\\n\\t\\x01'");
  EXPECT_FALSE(python_str_repr("caf\xc3\xa9"));
}

}  // namespace
}  // namespace fxopt
