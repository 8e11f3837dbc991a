#include "passes/conv_weights_channels_last.h"

#include "ops/conv.h"
#include "passes/replace_params.h"

namespace fxopt {

std::vector<Trigger> ConvWeightsChannelsLast::triggers() const { return conv_triggers(); }

void ConvWeightsChannelsLast::rewrite(PassContext& ctx, Node* node) const {
  std::string why_not;
  std::optional<Conv> conv = as_conv(ctx.rewriter.program(), node, &why_not);
  if (!conv) return ctx.skip(*node, why_not);
  if (conv->spatial_dims != 2)
    return ctx.skip(*node, "a " + std::to_string(conv->spatial_dims) +
                               "-d convolution has no channels-last layout");

  std::map<std::string, TensorInfo> laid_out{{"weight", ctx.tensors.channels_last(conv->weight())}};
  Arg record = replace_params(ctx.rewriter, conv->params, laid_out, "channels_last");
  set_reversal_record(ctx.rewriter, node, ctx.signature, Record().set(kReplacedParams, record));
  ctx.changed(node);
}

void ConvWeightsChannelsLast::restore(PassContext& ctx, Node* node,
                                      const RecordReader& record) const {
  restore_params(ctx.rewriter, node, record.get(kReplacedParams));
  ctx.restored(node);
}

}  // namespace fxopt
