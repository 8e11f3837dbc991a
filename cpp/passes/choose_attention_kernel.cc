#include "passes/choose_attention_kernel.h"

#include "ops/targets.h"

namespace fxopt {
namespace {

constexpr RecordKey<Symbol> kTarget{"target"};  // the call's target before

const Symbol kTorchSdpa = Symbol::intern("torch._C._nn.scaled_dot_product_attention");
const Symbol kAtenSdpa = Symbol::intern("aten.scaled_dot_product_attention.default");

// fxopt's kernel for each dtype it has one for.
struct Kernel {
  std::string_view dtype;
  std::string_view candidate;  // the chooser's name for it
  Symbol target;
  int64_t d_multiple, d_max;
  size_t fallback;  // the static choice: 1 the kernel, 0 the call as it is
};

const Kernel* kernel_for(std::string_view dtype) {
  // bfloat16 is `fast`'s lowering, measured faster wherever its instructions exist; float32 is
  // every graph's, where the static fallback keeps ATen's call (nothing measured, nothing changed).
  static const Kernel kKernels[] = {
      {"bfloat16", "fxopt_bf16", targets::kPrefillAttentionBf16, 16, 128, 1},
      {"float32", "fxopt_f32", targets::kPrefillAttentionF32, 8, 256, 0}};
  for (const Kernel& k : kKernels)
    if (k.dtype == dtype) return &k;
  return nullptr;
}

// Why no kernel can take this call; empty if `kernel` can.
std::string refusal(const ValueDtypes& dtypes, const Node& node, const Node* q, const Node* k,
                    const Node* v, const Kernel*& kernel) {
  if (!q || !k || !v) return "its query, key or value is not a graph value";
  std::string_view dtype = dtypes.of(q);
  kernel = dtypes.of(k) == dtype && dtypes.of(v) == dtype ? kernel_for(dtype) : nullptr;
  if (!kernel)
    return "its operands are " +
           (dtype.empty() ? std::string("of unknown dtype") : std::string(dtype)) +
           ", not all bfloat16 or all float32 (the kernels' dtypes)";
  if (!q->device().empty() && q->device().rfind("cpu", 0) != 0) return "it does not run on the CPU";
  if (q->shape().size() != 4 || k->shape().size() != 4) return "its operands are not of rank 4";
  int64_t d = q->shape()[3];
  if (d <= 0 || d % kernel->d_multiple != 0 || d > kernel->d_max)
    return "its head size is not a known multiple of " + std::to_string(kernel->d_multiple) +
           " up to " + std::to_string(kernel->d_max) + " (the " + std::string(dtype) + " kernel's)";
  if (const Arg* dropout = node.input(4, "dropout_p");
      dropout && dropout->number().value_or(1.0) != 0.0)
    return "it applies dropout";
  return {};
}

}  // namespace

std::vector<Trigger> ChooseAttentionKernel::triggers() const {
  return {{NodeKind::CallFunction, kTorchSdpa}, {NodeKind::CallFunction, kAtenSdpa}};
}

void ChooseAttentionKernel::begin(const Program& program) const { dtypes_.emplace(program); }

void ChooseAttentionKernel::rewrite(PassContext& ctx, Node* node) const {
  if (node->target() == kAtenSdpa)
    return ctx.skip(*node, "an ATen graph (torch.export's) holds ATen ops only");
  const Arg* q = node->input(0, "query");
  const Arg* k = node->input(1, "key");
  const Arg* v = node->input(2, "value");
  Node* query = q ? q->node() : nullptr;
  Node* key = k ? k->node() : nullptr;
  const Kernel* kernel = nullptr;
  if (std::string why_not = refusal(*dtypes_, *node, query, key, v ? v->node() : nullptr, kernel);
      !why_not.empty())
    return ctx.skip(*node, why_not);
  const Arg* mask = node->input(3, "attn_mask");
  const Arg* causal = node->input(5, "is_causal");
  std::string variant = mask && !mask->is_none()                             ? "mask"
                        : causal && causal->is<bool>() && causal->as<bool>() ? "causal"
                                                                             : "none";
  const std::vector<int64_t>& qs = query->shape();
  const std::vector<int64_t>& ks = key->shape();
  ChoiceQuery choice{"attention",
                     {qs[0], qs[1], ks[1], qs[2], ks[2], qs[3]},
                     std::string(kernel->dtype),
                     variant,
                     query->name(),
                     {"sdpa", std::string(kernel->candidate)},
                     kernel->fallback};
  if (ctx.choose(*node, choice) == "sdpa")
    return ctx.skip(*node,
                    "the kernel choice kept ATen's scaled_dot_product_attention here (see the "
                    "pass's choices: measured faster, pinned, or the only kernel this CPU runs)");
  set_reversal_record(ctx.rewriter, node, ctx.signature, Record().set(kTarget, node->target()));
  ctx.rewriter.set_target(node, NodeKind::CallFunction, kernel->target);
  ctx.changed(node);
}

void ChooseAttentionKernel::restore(PassContext& ctx, Node* node,
                                    const RecordReader& record) const {
  if (node->target() != targets::kPrefillAttentionBf16 &&
      node->target() != targets::kPrefillAttentionF32)
    throw PassError(*node, "is no longer the attention call this transformation made");
  ctx.rewriter.set_target(node, NodeKind::CallFunction, record.get(kTarget));
  ctx.restored(node);
}

}  // namespace fxopt
