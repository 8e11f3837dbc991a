"""The bridge between torch.fx and the C++ engine (the native module is `fxopt._core`).

* `bridge`: a GraphModule imported into a core session once and kept attached to its graph;
  the edit log replayed onto the GraphModule, transactionally.
* `tensor_ops`: `TorchTensorOps`, the engine's TensorOps interface executed with torch.
"""
