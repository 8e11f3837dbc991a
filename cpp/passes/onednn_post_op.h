// What oneDNN's fused ops (linear, convolution) can apply to their result in the same call: an
// activation, named the way torch.ops.mkldnn's pointwise ops name it.
//   ops/activation.h name   attr        scalars   algorithm
//   relu / sigmoid / tanh / hardswish   (same)   []   None
//   gelu                    gelu        []        "none"
//   gelu_tanh               gelu        []        "tanh"
//   silu                    swish       []        None
//   relu6                   hardtanh    [0, 6]    None
// mish has no oneDNN post-op here.
#pragma once

#include <optional>
#include <string>

#include "ir/program.h"

namespace fxopt {

struct PostOp {
  std::string attr;
  List scalars;
  Arg algorithm;
};

// The post-op computing activation `name`, if oneDNN has one.
std::optional<PostOp> post_op(const std::string& activation);
// What a fused op applies when nothing is fused.
PostOp no_post_op();

// The activation reading only `producer`'s output, if oneDNN can fuse it.
struct FusableActivation {
  Node* node;
  std::string name;  // as ops/activation.h names it
  PostOp op;
};
std::optional<FusableActivation> fusable_activation(const Program& program, Node* producer);

}  // namespace fxopt
