#!/usr/bin/env bash
# The C++ tests under AddressSanitizer and UndefinedBehaviorSanitizer, in build/asan (apart from
# build/python, which the Python extension uses). Any report fails the run.
set -euo pipefail
cd "$(dirname "$0")/.."
cmake -S . -B build/asan -DFXOPT_SANITIZE=ON -DFXOPT_BUILD_TESTS=ON -DCMAKE_BUILD_TYPE=Debug >/dev/null
cmake --build build/asan -j "${JOBS:-2}" --target fxopt_tests
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
build/asan/fxopt_tests --gtest_brief=1
