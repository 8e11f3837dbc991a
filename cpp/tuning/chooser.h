// Chooser: which of several equivalent kernels a pass should emit for one op.
//
// Whether a rewrite pays depends on the CPU and the shape (oneDNN's fused Linear+GELU wins on
// one CPU and loses 12-17% on another at the same shape; an int8 matmul is several times faster
// than float32 with VNNI and 30-50x slower without). So a pass never hard-codes the kernel: it
// names the candidates for the op it found and asks. The engine stays torch-free: the answer
// comes from the Python side (fxopt.tuning), which times the candidates with torch on the
// graph's own shapes and caches the result per CPU; C++ tests and untuned runs get the pass's
// documented static fallback (StaticChooser).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace fxopt {

struct ChoiceQuery {
  std::string op;                       // what the candidates compute, e.g. "linear"
  std::vector<int64_t> shape;           // the op's sizes, e.g. {tokens, in, out}; -1 where symbolic
  std::string dtype;                    // of the op's operands, e.g. "float32"
  std::string variant;                  // what else changes the kernels, e.g. the fused activation
  std::string value;                    // the graph value whose sizes `shape` took (hints for -1)
  std::vector<std::string> candidates;  // the first is what the graph computes without the pass
  size_t fallback = 0;                  // the pass's static choice when nothing was measured
};

struct KernelChoice {
  size_t index = 0;    // into ChoiceQuery::candidates
  double ratio = 1.0;  // measured time of the pick over the first candidate's (1 if unmeasured)
  std::string how;     // "measured", "cached", "pinned", "static", or why the fallback applied
};

class Chooser {
 public:
  virtual ~Chooser() = default;
  virtual KernelChoice choose(const ChoiceQuery& query) = 0;
};

// The pass's own static choice, always.
class StaticChooser final : public Chooser {
 public:
  KernelChoice choose(const ChoiceQuery& query) override { return {query.fallback, 1.0, "static"}; }
};

// A process-wide StaticChooser for callers that tune nothing.
Chooser& static_chooser();

}  // namespace fxopt
