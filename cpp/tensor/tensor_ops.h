// Weight arithmetic, kept out of the core.
//
// Passes that compute new weights (merging, folding) describe the arithmetic through this
// interface; the bridge executes it with torch on each tensor's own device and dtype, and the
// reference implementation executes it in plain C++ for the tests. Every result is a new,
// contiguous tensor that shares no storage with its inputs, but transposed_view's.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "ir/program.h"

namespace fxopt {

// A 2-D tensor quantized symmetrically per row: values = round(a / scales[:, None]) as int8,
// scales[r] = max |a[r]| / 127 (at least the smallest normal float32, so a zero row stays 0).
struct QuantizedRows {
  TensorInfo values;  // int8, a's shape
  TensorInfo scales;  // float32, [rows]
};

// Which kernel a QuantizedGroups is laid out for.
enum class Int4Layout {
  kAten,   // aten._weight_int4pack_mm_for_cpu
  kFxopt,  // fxopt's own (kernels/int4_weight_mm.h)
};

// A 2-D [N, K] tensor quantized to 4 bits asymmetrically per group of `group_size` columns of a
// row: q = round((a - min) / scale) in [0, 15] with scale = (max - min) / 15, so
// a = q * scale + min, which ATen's CPU int4 kernels take as (q - 8) * scale + zero with
// zero = min + 8 * scale.
struct QuantizedGroups {
  // The q values in the layout of the kernel (torch: packed two per byte by
  // aten._convert_weight_to_int4pack_for_cpu, or int4_pack_rows for fxopt's; the reference: one
  // int32 per element, [N, K], for both).
  TensorInfo values;
  // float32; kAten: [K / group_size, N, 2] (scale, zero); kFxopt: [N, 2, K / group_size] (each
  // row's scales, then its minimums).
  TensorInfo scales_and_zeros;
};

class TensorOps {
 public:
  virtual ~TensorOps() = default;

  virtual TensorInfo cat(const std::vector<TensorInfo>& parts, int64_t dim) = 0;
  // Elements [start, end) along `dim`.
  virtual TensorInfo slice(const TensorInfo& t, int64_t dim, int64_t start, int64_t end) = 0;
  // Elementwise with broadcasting.
  virtual TensorInfo add(const TensorInfo& a, const TensorInfo& b) = 0;
  virtual TensorInfo sub(const TensorInfo& a, const TensorInfo& b) = 0;
  virtual TensorInfo mul(const TensorInfo& a, const TensorInfo& b) = 0;
  virtual TensorInfo add_scalar(const TensorInfo& a, double value) = 0;
  virtual TensorInfo rsqrt(const TensorInfo& a) = 0;
  // The sum over `dim`, which is dropped from the shape.
  virtual TensorInfo sum(const TensorInfo& a, int64_t dim) = 0;
  virtual TensorInfo reshape(const TensorInfo& a, const std::vector<int64_t>& shape) = 0;
  // `a` with dimensions `dim0` and `dim1` swapped (laid out anew, contiguous).
  virtual TensorInfo transpose(const TensorInfo& a, int64_t dim0, int64_t dim1) = 0;
  // The same values as transpose, as a view sharing a's storage where the implementation has
  // views (else transpose's copy): for a weight the graph goes on reading the other way round
  // while the tensor it came from stays in the model (GPT-2's Conv1D weights read as Linear
  // weights: a copy of each took 340 MB and 0.2 s, and a state dict loaded into the model
  // later left the copies stale).
  virtual TensorInfo transposed_view(const TensorInfo& a, int64_t dim0, int64_t dim1) {
    return transpose(a, dim0, dim1);
  }
  virtual TensorInfo cast(const TensorInfo& a, const std::string& dtype) = 0;
  // A tensor of `shape` filled with `value`, on the device and with the dtype of `like`.
  virtual TensorInfo full(const std::vector<int64_t>& shape, double value,
                          const TensorInfo& like) = 0;
  virtual TensorInfo clone(const TensorInfo& a) = 0;
  // A 1-D tensor holding `values`, on the device and with the dtype of `like`.
  virtual TensorInfo from_values(const std::vector<double>& values, const TensorInfo& like) = 0;
  // Each row r of a 2-D `a` as integers in [-max_level, max_level] (at most 127) and its scale
  // max|a[r]| / max_level: a[r] ~ values[r] * scales[r].
  virtual QuantizedRows quantize_rows_int8(const TensorInfo& a, int max_level) = 0;
  // Requires K divisible by group_size; kAten: N by 16 (the packing's tile); kFxopt: group_size
  // by 32.
  virtual QuantizedGroups quantize_groups_int4(const TensorInfo& a, int64_t group_size,
                                               Int4Layout layout) = 0;
  // Runs the call `node` (call_function or call_method) once, with `operands[i]` standing for
  // the i-th node it reads (Node::for_each_input order) and its other arguments as they are;
  // nullopt if the call does not return a tensor. How passes fold constants: the op itself is
  // the user's framework's, so only the bridge can run it.
  virtual std::optional<TensorInfo> evaluate(const Node& node,
                                             const std::vector<TensorInfo>& operands) = 0;
  // A copy of a 4-D tensor laid out channels-last (NHWC strides); the values are the same.
  virtual TensorInfo channels_last(const TensorInfo& a) = 0;
};

// A computed tensor (results come back as plain tensors) to be stored the way `like` is:
// parameter or buffer, requires_grad or not.
inline TensorInfo stored_like(TensorInfo computed, const TensorInfo& like) {
  computed.requires_grad = like.requires_grad;
  computed.is_parameter = like.is_parameter;
  return computed;
}

}  // namespace fxopt
