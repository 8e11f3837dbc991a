"""Tracing: a model becomes a `torch.fx.GraphModule` the passes can edit (`fxopt.trace`).

* `trace`: `fxopt.trace` and its four tracers (symbolic, sized, Dynamo, torch.export), `auto`
  fallback, `TraceInfo` / `TraceError` / `TraceWarning`.
* `sized`: the sized tracer (symbolic tracing on fake tensors of the example's sizes).
* `dummy_inputs`: example inputs, normalised or built from a transformers config; which
  dimensions vary.
* `model_names`: the model's qualified names and module tree on a Dynamo graph.
* `input_guard`: input checks at the top of a Dynamo or sized graph (torch drops Dynamo's guards).
"""
