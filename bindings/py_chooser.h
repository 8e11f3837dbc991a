// Chooser whose answers come from a Python object (fxopt.tuning's chooser, which times kernels
// with torch). Passes run with the GIL released; each question takes it back.
#pragma once

#include <nanobind/nanobind.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <stdexcept>
#include <string>

#include "tuning/chooser.h"

namespace fxopt::bindings {

namespace nb = nanobind;

class PyChooser final : public Chooser {
 public:
  explicit PyChooser(nb::object impl) : impl_(std::move(impl)) {}

  KernelChoice choose(const ChoiceQuery& q) override {
    nb::gil_scoped_acquire gil;
    // A Python error must not leave this scope: reading or freeing it needs the GIL, which the
    // pass driver (running with it released) does not hold.
    try {
      nb::object answer = impl_.attr("choose")(q.op, q.shape, q.dtype, q.variant, q.value,
                                               q.candidates, q.fallback);
      auto [index, ratio, how] = nb::cast<std::tuple<size_t, double, std::string>>(answer);
      return {index, ratio, std::move(how)};
    } catch (const nb::python_error& e) {
      // One line (the exception's type and message), not the whole traceback what() gives.
      std::string kind = nb::cast<std::string>(e.type().attr("__name__"));
      throw std::runtime_error("the kernel chooser failed: " + kind + ": " +
                               nb::cast<std::string>(nb::str(e.value())));
    } catch (const nb::cast_error&) {
      throw std::runtime_error(
          "the kernel chooser answered something other than "
          "(index, ratio, how)");
    }
  }

 private:
  nb::object impl_;
};

}  // namespace fxopt::bindings
