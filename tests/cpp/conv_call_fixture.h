// What the tests of the passes that give a convolution one of fxopt's calls share
// (FuseDepthwiseConv, FusePointwiseConv): the pass run forward or in reverse, with a chooser or
// on its static fallbacks, the calls it made, functional convolutions to build graphs from, and
// a chooser that measured one value's convolution faster as it is.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "norm_fixtures.h"
#include "rewrite/pass.h"
#include "tuning/chooser.h"

namespace fxopt::testing {

template <class P>
class ConvCallFixture : public NormFixture {
 public:
  ConvCallFixture(std::string signature, std::string call)
      : signature_(std::move(signature)), call_(std::move(call)) {}

  PassResult apply(bool reverse = false, Chooser* chooser = nullptr) {
    if (chooser) return run_pass(P(), program, edits, ops, signature_, reverse, *chooser);
    return run_pass(P(), program, edits, ops, signature_, reverse);
  }
  std::vector<Node*> fused() {
    return program.graph.find(NodeKind::CallFunction, Symbol::intern(call_));
  }
  // torch.conv2d(x, w, bias, stride, padding, dilation, groups), its value float32 of `shape`.
  Node* conv(const std::string& name, Node* x, Node* w, Arg bias, int64_t stride, int64_t padding,
             int64_t groups, std::vector<int64_t> shape, int64_t dilation = 1) {
    return shaped(b.call(name, "torch.conv2d",
                         {x, w, bias, Tuple{{stride, stride}}, Tuple{{padding, padding}},
                          Tuple{{dilation, dilation}}, groups}),
                  std::move(shape));
  }

 private:
  std::string signature_, call_;
};

// The first candidate (the graph as it is) for the query about `value`, the second elsewhere.
struct FirstCandidateFor final : Chooser {
  explicit FirstCandidateFor(std::string value) : value(std::move(value)) {}
  KernelChoice choose(const ChoiceQuery& query) override {
    return {query.value == value ? 0u : 1u, 1.0, "fixed"};
  }
  std::string value;
};

}  // namespace fxopt::testing
