#include <gtest/gtest.h>

#include "norm_fixtures.h"
#include "passes/conv_weights_channels_last.h"

namespace fxopt {
namespace {

const std::string kSig = "ConvWeightsChannelsLast-test";

class ChannelsLastTest : public ::testing::Test, protected testing::NormFixture {
 protected:
  PassResult apply(bool reverse = false) {
    return run_pass(ConvWeightsChannelsLast(), program, edits, ops, kSig, reverse);
  }
};

TEST_F(ChannelsLastTest, TwoDimensionalConvolutionsGetACopiedWeight) {
  conv_module("conv", 2, 3, 4, 1, true);
  conv_module("conv1d", 1, 4, 4, 1, false);
  ModuleInfo before_module = program.modules.at("conv");
  Node* x = b.input("x");
  Node* y = b.input("y");
  Node* conv = b.module("conv", "conv", {x});
  Node* conv1d = b.module("conv1d", "conv1d", {y});
  b.output(Tuple{{conv, conv1d}});
  std::map<std::string, TensorInfo> inputs{{"x", input({1, 3, 5, 5})}, {"y", input({1, 4, 5})}};
  auto before = run(inputs);
  auto graph_before = structure();

  PassResult forward = apply();
  EXPECT_EQ(forward.changed, (std::vector<std::string>{"conv"}));
  ASSERT_EQ(forward.skipped.size(), 1u);
  EXPECT_EQ(forward.skipped[0].reason, "a 1-d convolution has no channels-last layout");
  EXPECT_EQ(conv->target().str(), "conv_channels_last");
  EXPECT_NE(program.modules.at("conv_channels_last").tensor("weight")->handle,
            before_module.tensor("weight")->handle);
  EXPECT_EQ(program.modules.at("conv").tensors, before_module.tensors);  // copy-on-write
  EXPECT_EQ(max_diff(before, run(inputs)), 0.0);

  apply(/*reverse=*/true);
  EXPECT_EQ(structure(), graph_before);
  EXPECT_FALSE(program.modules.contains("conv_channels_last"));
}

}  // namespace
}  // namespace fxopt
