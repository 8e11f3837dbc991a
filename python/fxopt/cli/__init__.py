"""The `fxopt` command (`python -m fxopt`) and the models it can name.

* `main`: entry point, argument parser, one-line errors; the `passes` and `models` listings.
* `optimize`: `fxopt optimize MODEL`, the user's path step by step (load, trace, transform,
  verify, time, save) and its report.
* `timing`: interleaved latency rounds and speedups (also used by `bench/latency.py`).
* `save`: `--save`, a `.pt2` ExportedProgram or a pickled GraphModule.
* `errors`: `CliError`, and every failure rendered as one line.
* `models`: bundled models, config files, model directories, `file.py:factory`, and their inputs.
"""
