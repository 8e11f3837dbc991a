// Op view: batch normalization with stored statistics, in every dialect fx graphs use:
//   call_module  nn.BatchNorm1d / 2d / 3d                              symbolic_trace
//   call_function torch.nn.functional.batch_norm(x, mean, var, w, b, training, momentum, eps)
//   call_function aten.batch_norm.default(x, w, b, mean, var, training, momentum, eps, cudnn)
//                                                       torch.export (.module(), eval or train)
//   call_function aten._native_batch_norm_legit_no_training.default(x, w, b, mean, var, m, eps)
//                 aten._native_batch_norm_legit.default / aten.native_batch_norm.default
//                 (..., training, momentum, eps) -> the result is getitem(bn, 0)
//                                                       decomposed export graphs
// The view accepts only a normalization that an affine map per channel can replace: eval mode
// (training False) with running statistics, every statistic a stored tensor. Without weight
// and bias (affine=False) the scale is 1 and the shift 0.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "ir/trigger.h"
#include "tensor/batch_norm_fold.h"

namespace fxopt {

struct BatchNorm {
  Node* node = nullptr;    // the batch-norm call
  Node* result = nullptr;  // the node holding the normalized tensor: `node` or getitem(node, 0)
  Node* input = nullptr;   // the tensor it normalizes (along dim 1)
  BatchNormStats stats;    // weight and bias are nullopt when affine=False
  // The input rank the module accepts: {2, 3} for BatchNorm1d, {4} for 2d, {5} for 3d; empty
  // for the functional forms, which accept any rank >= 2.
  std::vector<int> ranks;

  int64_t features() const { return stats.mean.dim(0); }
  // The nodes it occupies, in graph order: `node`, then `result` if that is a getitem.
  std::vector<Node*> nodes() const;
};

// Every (kind, target) that may be a batch norm; call_module triggers name module types, and
// with `module_dims` only BatchNorm{module_dims}d.
std::vector<Trigger> batch_norm_triggers(int module_dims = 0);
// The view of `node`, or nullopt with `why_not` saying what does not fit.
std::optional<BatchNorm> as_batch_norm(const Program& program, Node* node, std::string* why_not);

}  // namespace fxopt
