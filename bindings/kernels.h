// The module's functions that run fxopt's compute kernels (cpp/kernels/).
#pragma once

#include <nanobind/nanobind.h>

namespace fxopt::bindings {

void bind_kernels(nanobind::module_& m);

}  // namespace fxopt::bindings
