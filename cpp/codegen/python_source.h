// The Python source torch.fx's plain CodeGen generates for a graph (`Graph.python_code`), built
// from the core graph instead of by fx's per-node Python loop.
//
// The output must be byte-identical to torch's, so the generator reproduces fx's rules exactly:
// one namespace shared by node names and globals, allocated in emission order (`_Namespace`),
// `_format_target`, the operator spellings, the `getattr` shorthand, the `;  a = b = None`
// deletions after last uses and the `# COUNTER` line map. Whatever it does not reproduce itself
// (opaque values, how a call_function target is spelled) comes from a `SourcePrinter`; anything
// else it cannot print exactly makes it decline (std::nullopt), and the caller uses torch.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "ir/graph.h"

namespace fxopt {

// How fx spells a call_function target.
struct CallTarget {
  enum class Style {
    Operator,   // `_operator` magic method: `text` is its template ("{} + {}")
    Inplace,    // `_operator` inplace method: `text` is its template ("{} += {}")
    Qualified,  // a torch callable: `text` is its qualified name, printed as is
    Global,     // any other callable: `text` is the name hint of a new global
  };
  Style style = Style::Global;
  std::string text;
  // The callable is the builtin its name hint names (`getattr`): fx keeps that name.
  bool builtin_object = false;
};

struct TypeAnnotation {
  CallTarget spelling;  // Qualified or Global only
  uint64_t key = 0;
};

class SourcePrinter {
 public:
  virtual ~SourcePrinter() = default;
  // Source of an opaque value, or nullopt to decline. `plain`: printed by Python's repr (inside a
  // dict) rather than by fx's `_get_repr`, which spells some types differently.
  virtual std::optional<std::string> opaque(Opaque value, bool plain) = 0;
  // How a call_function target is spelled, or nullopt to decline.
  virtual std::optional<CallTarget> call_target(Symbol target) = 0;
  // How `node`'s fx type annotation is spelled (Qualified: "torch.Tensor"; Global: a new global
  // named after its repr), an empty text for none, nullopt to decline. Equal annotations have
  // equal `key`s: fx names each distinct object once.
  virtual std::optional<TypeAnnotation> type_annotation(const Node& node) = 0;
  // The codegen's `gen_fn_def(free_vars, return_annotation)`, or nullopt to decline.
  virtual std::optional<std::string> prologue(const std::vector<std::string>& free_vars,
                                              const std::string& return_annotation) = 0;
};

struct SourceOptions {
  std::string root_module = "self";
  // Around the returned value: `return {prefix}value{suffix}` (pytree codegens unflatten it).
  std::string output_prefix;
  std::string output_suffix;
  // Names fx's namespace never gives an object other than their own (keywords, builtins).
  std::vector<std::string> illegal_names;
  // fx's custom builtins (torch, device, inf...), added to the namespace first, in order; each
  // is the object its illegal name stands for, so it keeps that name.
  std::vector<std::string> custom_builtins;
};

struct PythonSource {
  std::string src;
  // New globals for call_function targets, in the order fx adds them.
  std::vector<std::pair<std::string, Symbol>> globals;
  // New globals for type annotations, by `TypeAnnotation::key`.
  std::vector<std::pair<std::string, uint64_t>> type_globals;
  // The names the custom builtins received (fx: their own names).
  std::vector<std::string> custom_builtin_names;
  // fx's `_lineno_map`: line `lineno_start + i` comes from node index `node_index[i]` (-1: None).
  int64_t lineno_start = 0;
  std::vector<int64_t> node_index;
  int64_t prologue_start = 0;
};

std::optional<PythonSource> python_source(const Graph& graph, const SourceOptions& options,
                                          SourcePrinter& printer);

// Python's repr of a float and of an ASCII string (nullopt for other strings).
std::string python_float_repr(double value);
std::optional<std::string> python_str_repr(std::string_view text);

}  // namespace fxopt
