"""The bounded fuzz run (tests/python/fuzzing.py): random graphs through every built-in pass
alone and random compositions in random order (in place or not; chains of Linear passes with a
precision change between them), in both trace modes. `scripts/fuzz.py --graphs
10000` is the long run.

Reverse must restore outputs, parameters and the code (node order included) exactly in both
trace modes. A failure prints its minimal reproducer.
"""

import warnings

import pytest

import fuzzing

GRAPHS = 32


@pytest.mark.parametrize("start", range(0, GRAPHS, 8))
def test_random_graphs_transform_and_reverse_exactly(start: int) -> None:
    warnings.filterwarnings("ignore")
    failures = []
    for seed in range(start, start + 8):
        failure = fuzzing.run_case(seed)
        if failure is not None:
            failures.append(fuzzing.report(failure))
    assert not failures, "\n\n".join(failures)
