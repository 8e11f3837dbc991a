"""Storage: graphs on disk that load again (`fxopt.save` / `fxopt.load`).

* `graph_file`: the file format (graph, module tree, tensors, fxopt's records) and save / load.
* `values`: node arguments and metadata written as plain data; callables by qualified name.
"""
