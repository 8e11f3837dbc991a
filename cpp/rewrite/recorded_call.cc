#include "rewrite/recorded_call.h"

#include "rewrite/capture.h"

namespace fxopt {
namespace {

constexpr RecordKey<NodeKind> kKind{"kind"};
constexpr RecordKey<Symbol> kTarget{"target"};
constexpr RecordKey<Arg> kArgs{"args"};
constexpr RecordKey<Arg> kKwargs{"kwargs"};

}  // namespace

std::optional<Record> record_call(const Node& node, std::span<Node* const> inputs) {
  std::optional<Arg> args = capture_value(Tuple{node.args()}, inputs);
  std::optional<Arg> kwargs = capture_value(node.kwargs(), inputs);
  if (!args || !kwargs) return std::nullopt;
  Record record;
  record.set(kKind, node.kind())
      .set(kTarget, node.target())
      .set(kArgs, std::move(*args))
      .set(kKwargs, std::move(*kwargs));
  return record;
}

void restore_call(Rewriter& rewriter, Node* node, const RecordReader& record,
                  std::span<Node* const> inputs) {
  NodeKind kind = record.get(kKind);
  Symbol target = record.get(kTarget);
  auto [args, kwargs] =
      rebuild_inputs(rewriter, node, record.get(kArgs), record.get(kKwargs), inputs);
  rewriter.set_target(node, kind, target);
  rewriter.set_inputs(node, std::move(args), std::move(kwargs));
}

}  // namespace fxopt
