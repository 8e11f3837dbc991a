// The fxopt._core extension: core types, the bridge session and the pass table.
#include <nanobind/nanobind.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include "bindings/session.h"
#include "passes/registry.h"

namespace nb = nanobind;
using namespace fxopt;
using fxopt::bindings::Session;

NB_MODULE(_core, m) {
  m.doc() = "fxopt's C++ engine";

  nb::exception<PassError>(m, "PassError", PyExc_RuntimeError);

  nb::class_<TensorInfo>(m, "TensorInfo")
      .def(nb::init<>())
      .def(
          "__init__",
          [](TensorInfo* t, std::vector<int64_t> shape, std::string dtype, std::string device,
             bool requires_grad, bool is_parameter, uint64_t handle) {
            new (t) TensorInfo{std::move(shape), std::move(dtype), std::move(device),
                               requires_grad,    is_parameter,     handle};
          },
          nb::arg("shape"), nb::arg("dtype"), nb::arg("device"), nb::arg("requires_grad"),
          nb::arg("is_parameter"), nb::arg("handle"))
      .def_rw("shape", &TensorInfo::shape)
      .def_rw("dtype", &TensorInfo::dtype)
      .def_rw("device", &TensorInfo::device)
      .def_rw("requires_grad", &TensorInfo::requires_grad)
      .def_rw("is_parameter", &TensorInfo::is_parameter)
      .def_rw("handle", &TensorInfo::handle);

  nb::class_<Skip>(m, "Skip")
      .def_ro("node", &Skip::node)
      .def_ro("reason", &Skip::reason)
      .def("__repr__", [](const Skip& s) { return "Skip(" + s.node + ": " + s.reason + ")"; });

  nb::class_<PassResult>(m, "PassResult")
      .def_ro("changed", &PassResult::changed)
      .def_ro("skipped", &PassResult::skipped);

  nb::class_<Session>(m, "Session")
      .def(nb::init<nb::handle, nb::object, nb::object>(), nb::arg("node_type"),
           nb::arg("qualname"), nb::arg("resolve"))
      .def("import_graph", &Session::import_graph)
      .def("add_module", &Session::add_module)
      .def("add_attribute", &Session::add_attribute)
      .def("add_taken_paths", &Session::add_taken_paths)
      .def("reserve_names", &Session::reserve_names)
      .def("set_values", &Session::set_values, nb::arg("values"))
      .def("run", &Session::run, nb::arg("name"), nb::arg("options"), nb::arg("signature"),
           nb::arg("reverse"), nb::arg("tensor_ops"))
      .def("edit_count", &Session::edit_count)
      .def("edit", &Session::edit)
      .def("clear_edits", &Session::clear_edits)
      .def("bind", &Session::bind)
      .def("py_node", &Session::py_node)
      .def("node_ids", &Session::node_ids)
      .def("node", &Session::node)
      .def("lint", &Session::lint)
      .def("__len__", &Session::size);

  m.def("passes", [] {
    nb::list out;
    for (const PassInfo& p : all_passes()) {
      nb::dict d;
      d["name"] = p.name;
      d["summary"] = p.summary;
      d["reversible"] = p.reversible;
      d["preserves_computation"] = p.preserves_computation;
      out.append(d);
    }
    return out;
  });
}
