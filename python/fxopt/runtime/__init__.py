"""Functions the graphs fxopt writes call at run time, where no torch op does the whole job.

They are plain Python functions on plain tensors, named in graphs by their qualified name, so a
transformed GraphModule deep-copies, saves (``fxopt.save``) and reloads like any other.
"""
