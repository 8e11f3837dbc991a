// The engine alone, without Python: how the core's graph building, lint and passes scale from
// about 1k to 130k nodes. Complements bench/pass_speed.py, which times the whole Python path.
// Weights are tiny (4x4) so the reference TensorOps arithmetic does not hide the graph work.
#include <benchmark/benchmark.h>

#include <memory>
#include <string>

#include "passes/registry.h"
#include "tensor/reference_tensor_ops.h"

namespace fxopt {
namespace {

constexpr int64_t kWidth = 4;
const Symbol kLinearType = Symbol::intern("torch.nn.modules.linear.Linear");

// One transformer-like layer per 8 nodes: q, k, v Linears on one input, a division by a
// constant, two products and an output projection.
struct Stack {
  ReferenceTensorOps ops;
  Program program;

  explicit Stack(int64_t layers) {
    Graph& g = program.graph;
    Node* x = g.append(NodeKind::Placeholder, Symbol::intern("x"), "x");
    for (int64_t l = 0; l < layers; ++l) {
      std::string scope = "layers." + std::to_string(l) + ".";
      Node* q = call_linear(scope + "q", x);
      Node* k = call_linear(scope + "k", x);
      Node* v = call_linear(scope + "v", x);
      Node* scaled = g.append(NodeKind::CallFunction, Symbol::intern("_operator.truediv"),
                              g.unique_name("truediv"), {q, 8.0});
      Node* scores = g.append(NodeKind::CallFunction, Symbol::intern("_operator.mul"),
                              g.unique_name("mul"), {scaled, k});
      Node* context = g.append(NodeKind::CallFunction, Symbol::intern("_operator.mul"),
                               g.unique_name("mul"), {scores, v});
      x = call_linear(scope + "o", context);
    }
    g.append(NodeKind::Output, Symbol::intern("output"), "output", {x});
  }

  Node* call_linear(const std::string& path, Node* input) {
    ModuleInfo module{
        kLinearType,
        Dict{{{"in_features", kWidth}, {"out_features", kWidth}, {"training", false}}},
        {}};
    module.tensors["weight"] = parameter({kWidth, kWidth});
    module.tensors["bias"] = parameter({kWidth});
    program.modules[path] = module;
    program.taken_paths.insert({path, path + ".weight", path + ".bias"});
    Graph& g = program.graph;
    return g.append(NodeKind::CallModule, Symbol::intern(path), g.unique_name(path), {input});
  }

  TensorInfo parameter(std::vector<int64_t> shape) {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    TensorInfo t = ops.make(std::move(shape), std::vector<double>(n, 0.5));
    t.is_parameter = true;
    return t;
  }
};

int64_t layers_for(const benchmark::State& state) { return state.range(0) / 8; }

void BM_Build(benchmark::State& state) {
  for (auto _ : state) {
    Stack stack(layers_for(state));
    benchmark::DoNotOptimize(stack.program.graph.size());
  }
  state.SetComplexityN(state.range(0));
}

void BM_Lint(benchmark::State& state) {
  Stack stack(layers_for(state));
  for (auto _ : state) benchmark::DoNotOptimize(stack.program.graph.lint());
  state.SetComplexityN(state.range(0));
}

// The preserving pipeline the Python benchmark composes, in one core session.
void BM_Pipeline(benchmark::State& state) {
  const char* names[] = {"ChangeTrueDivToMulByInverse", "MergeLinears", "FuseBiasInLinear"};
  for (auto _ : state) {
    state.PauseTiming();
    auto stack = std::make_unique<Stack>(layers_for(state));
    EditLog log;
    state.ResumeTiming();
    for (const char* name : names) {
      const PassInfo* info = find_pass(name);
      run_pass(*info->make({}), stack->program, log, stack->ops, std::string(name) + "()", false);
    }
    benchmark::DoNotOptimize(log.size());
    state.PauseTiming();
    stack.reset();  // tearing the graph down is not the passes' work
    state.ResumeTiming();
  }
  state.SetComplexityN(state.range(0));
}

BENCHMARK(BM_Build)
    ->RangeMultiplier(4)
    ->Range(1 << 10, 1 << 17)
    ->Unit(benchmark::kMillisecond)
    ->Complexity();
BENCHMARK(BM_Lint)
    ->RangeMultiplier(4)
    ->Range(1 << 10, 1 << 17)
    ->Unit(benchmark::kMillisecond)
    ->Complexity();
BENCHMARK(BM_Pipeline)
    ->RangeMultiplier(4)
    ->Range(1 << 10, 1 << 17)
    ->Unit(benchmark::kMillisecond)
    ->Complexity();

}  // namespace
}  // namespace fxopt

BENCHMARK_MAIN();
