// The fxopt._core extension: core types, the bridge session and the pass table.
#include <nanobind/nanobind.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/unordered_set.h>
#include <nanobind/stl/vector.h>

#include "bindings/fx_lint.h"
#include "bindings/kernels.h"
#include "bindings/replay.h"
#include "bindings/session.h"
#include "passes/registry.h"

namespace nb = nanobind;
using namespace fxopt;
using fxopt::bindings::Replay;
using fxopt::bindings::Session;
using fxopt::bindings::TensorTable;

namespace {

int session_traverse(PyObject* self, visitproc visit, void* arg) {
  Py_VISIT(Py_TYPE(self));
  if (!nb::inst_ready(self)) return 0;
  return nb::inst_ptr<Session>(self)->traverse(visit, arg);
}

int session_clear(PyObject* self) {
  if (nb::inst_ready(self)) nb::inst_ptr<Session>(self)->clear_references();
  return 0;
}

PyType_Slot session_slots[] = {
    {Py_tp_traverse, (void*)session_traverse}, {Py_tp_clear, (void*)session_clear}, {0, nullptr}};

}  // namespace

NB_MODULE(_core, m) {
  m.doc() = "fxopt's C++ engine";
  // fxopt's Python modules keep bound objects in globals (the pass registry) that Python frees after nanobind's leak check at exit, so the check
  // would report them every run.
  nb::set_leak_warnings(false);

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

  nb::class_<ChoiceMade>(m, "ChoiceMade")
      .def_ro("node", &ChoiceMade::node)
      .def_ro("op", &ChoiceMade::op)
      .def_ro("picked", &ChoiceMade::picked)
      .def_ro("ratio", &ChoiceMade::ratio)
      .def_ro("how", &ChoiceMade::how);

  nb::class_<PassResult>(m, "PassResult")
      .def_ro("changed", &PassResult::changed)
      .def_ro("skipped", &PassResult::skipped)
      .def_ro("choices", &PassResult::choices);

  nb::class_<TensorTable>(m, "TensorTable",
                          "The tensors a session refers to by handle (bindings/tensor_table.h).")
      .def(nb::init<nb::handle, nb::handle>(), nb::arg("tensor_type"), nb::arg("parameter_type"))
      .def("add", &TensorTable::add, nb::arg("tensor"),
           nb::sig("def add(self, tensor: torch.Tensor) -> TensorInfo"))
      .def("tensor", &TensorTable::tensor, nb::arg("handle"),
           nb::sig("def tensor(self, handle: int) -> torch.Tensor"))
      .def("rebind", &TensorTable::rebind, nb::arg("handle"), nb::arg("tensor"),
           nb::sig("def rebind(self, handle: int, tensor: torch.Tensor) -> None"))
      .def("retain", &TensorTable::retain, nb::arg("live"),
           nb::sig("def retain(self, live: typing.Iterable[object]) -> None"))
      .def("__len__", &TensorTable::size);

  nb::class_<Session>(m, "Session", nb::type_slots(session_slots))
      .def(nb::init<nb::handle, nb::handle, nb::handle, nb::handle, nb::object, nb::object>(),
           nb::arg("node_type"), nb::arg("tensor_type"), nb::arg("size_type"), nb::arg("strided"),
           nb::arg("qualname"), nb::arg("resolve"))
      .def("import_graph", &Session::import_graph, nb::arg("root"))
      .def("matches", &Session::matches, nb::arg("root"))
      .def("snapshot", &Session::snapshot, nb::arg("root"))
      .def("snapshot_modules", &Session::snapshot_modules, nb::arg("root"), nb::arg("attributes"),
           nb::arg("paths"), nb::arg("module_type"))
      .def("modules_match", &Session::modules_match, nb::arg("root"))
      .def("module_tensors", &Session::module_tensors)
      .def("import_modules", &Session::import_modules, nb::arg("root"), nb::arg("paths").none(),
           nb::arg("attributes"), nb::arg("tensors"),
           nb::sig("def import_modules(self, root: torch.nn.Module, paths: "
                   "typing.Iterable[str] | None, attributes: typing.Sequence[str], tensors: "
                   "TensorTable) -> None"))
      .def("add_attribute", &Session::add_attribute, nb::arg("path"), nb::arg("tensor"))
      .def("reserve_names", &Session::reserve_names, nb::arg("names"))
      .def("run", &Session::run, nb::arg("name"), nb::arg("options"), nb::arg("signature"),
           nb::arg("reverse"), nb::arg("tensor_ops"), nb::arg("tensor_table"),
           nb::arg("chooser").none())
      .def("edit_count", &Session::edit_count)
      .def("effective_edits", &Session::effective_edits)
      .def("write_meta", &Session::write_meta, nb::arg("indices"))
      .def("applied_marks", &Session::applied_marks)
      .def("clear_edits", &Session::clear_edits)
      .def("bind", &Session::bind, nb::arg("id"), nb::arg("fx_node"))
      .def("py_node", &Session::py_node, nb::arg("id"),
           nb::sig("def py_node(self, id: int) -> torch.fx.node.Node"))
      .def("node_ids", &Session::node_ids)
      .def("node", &Session::node, nb::arg("id"))
      .def("lint", &Session::lint)
      .def("python_source", &Session::python_source, nb::arg("root"), nb::arg("illegal_names"),
           nb::arg("custom_builtins"), nb::arg("output_prefix"), nb::arg("output_suffix"),
           nb::arg("opaque_source"), nb::arg("call_target"), nb::arg("type_source"),
           nb::arg("prologue"))
      .def("__len__", &Session::size);

  nb::class_<Replay>(m, "Replay",
                     "A session's structural edits applied to its GraphModule (bindings/replay.h).")
      .def(
          nb::init<Session&, nb::handle, TensorTable&, nb::handle, nb::handle, bool>(),
          nb::arg("session"), nb::arg("graph_module"), nb::arg("tensors"), nb::arg("module_type"),
          nb::arg("registration_hooks"), nb::arg("direct_inputs"), nb::keep_alive<1, 2>(),
          nb::keep_alive<1, 4>(),
          nb::sig("def __init__(self, session: Session, graph_module: torch.fx.GraphModule, "
                  "tensors: TensorTable, module_type: type[torch.nn.Module], "
                  "registration_hooks: dict[typing.Any, typing.Any], direct_inputs: bool) -> None"))
      .def("apply", &Replay::apply, nb::arg("indices"))
      .def("check_erasable", &Replay::check_erasable)
      .def("erase", &Replay::erase)
      .def("undo", &Replay::undo)
      .def_prop_ro("renamed", &Replay::renamed);

  nb::class_<PassInfo>(m, "PassInfo", "A built-in pass as registered in passes/registry.cc.")
      .def_ro("name", &PassInfo::name)
      .def_ro("summary", &PassInfo::summary)
      .def_ro("preserves_computation", &PassInfo::preserves_computation);

  m.def("fx_graph_lints_clean", &fxopt::bindings::fx_graph_lints_clean, nb::arg("graph"),
        nb::arg("module_type"),
        nb::sig("def fx_graph_lints_clean(graph: torch.fx.Graph, module_type: type) -> bool"),
        "True if graph.lint() would pass, proved in one native walk (bindings/fx_lint.h).");

  m.def("passes", &all_passes, nb::rv_policy::reference, "The registry, in its order.");

  fxopt::bindings::bind_kernels(m);
}
