"""Verification: did a transformation keep the computation, and what did it change?

* `verify`: `fxopt.verify`, outputs compared leaf by leaf with dtype-aware tolerances
  (`VerifyReport`).
* `stats`: graph statistics before and after (nodes, calls, parameters).
"""
