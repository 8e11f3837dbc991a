"""Tracing: a model becomes a `torch.fx.GraphModule` the passes can edit (`fxopt.trace`).

* `trace`: `fxopt.trace` and its three tracers (symbolic, Dynamo, torch.export), `auto`
  fallback, `TraceInfo` / `TraceError` / `TraceWarning`.
* `dummy_inputs`: example inputs, normalised or built from a transformers config; which
  dimensions vary.
* `model_names`: the model's qualified names and module tree on a Dynamo graph.
* `input_guard`: input checks at the top of a Dynamo graph (torch drops Dynamo's guards).
"""
