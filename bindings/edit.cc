#include "bindings/edit.h"

#include <nanobind/stl/string.h>

#include "bindings/session.h"

namespace fxopt::bindings {

const Edit& EditView::edit() const { return session_->log_.at(index_); }

nb::str EditView::op() const { return nb::str(kind_name(edit().node_kind).data()); }

nb::object EditView::target() const {
  const Edit& e = edit();
  return session_->target_object(e.node_kind, e.target);
}

nb::tuple EditView::args() const { return nb::borrow<nb::tuple>(session_->to_py(edit().args)); }

nb::dict EditView::kwargs() const {
  return nb::borrow<nb::dict>(session_->to_py(Arg(edit().kwargs)));
}

nb::object EditView::value() const { return session_->to_py(edit().value); }

nb::dict EditView::attributes() const {
  return nb::borrow<nb::dict>(session_->to_py(Arg(edit().module.attributes)));
}

nb::dict EditView::tensors() const {
  nb::dict out;
  for (const auto& [name, t] : edit().module.tensors) out[name.c_str()] = session_->tensor_to_py(t);
  return out;
}

nb::object EditView::tensor() const { return session_->tensor_to_py(edit().tensor); }

void EditView::bind(nb::module_& m) {
  nb::enum_<Edit::Kind>(m, "EditKind", "What an edit does; the fields it uses follow each name.")
      .value("CreateNode", Edit::Kind::CreateNode, "node, anchor, op, target, name, args, kwargs")
      .value("SetInputs", Edit::Kind::SetInputs, "node, args, kwargs")
      .value("SetTarget", Edit::Kind::SetTarget, "node, op, target")
      .value("SetMeta", Edit::Kind::SetMeta, "node, key, value")
      .value("EraseMeta", Edit::Kind::EraseMeta, "node, key")
      .value("EraseNode", Edit::Kind::EraseNode, "node")
      .value("MoveNode", Edit::Kind::MoveNode, "node, anchor")
      .value("SetModule", Edit::Kind::SetModule, "path, like, module_type, attributes, tensors")
      .value("RemoveModule", Edit::Kind::RemoveModule, "path")
      .value("SetAttribute", Edit::Kind::SetAttribute, "path, tensor")
      .value("RemoveAttribute", Edit::Kind::RemoveAttribute, "path");

  nb::class_<EditView>(m, "Edit", "One edit of the log; its fields are read as Python values.")
      .def_prop_ro("kind", &EditView::kind)
      .def_prop_ro(
          "node", [](const EditView& e) { return e.edit().node; }, "the edited node's id")
      .def_prop_ro(
          "anchor", [](const EditView& e) { return e.edit().anchor; },
          "id of the node a created or moved node goes before")
      .def_prop_ro("op", &EditView::op)
      .def_prop_ro(
          "target", &EditView::target,
          nb::for_getter(nb::sig("def target(self, /) -> typing.Callable[..., typing.Any] | str")))
      .def_prop_ro(
          "name", [](const EditView& e) { return e.edit().name; }, "a created node's name")
      .def_prop_ro("args", &EditView::args,
                   nb::for_getter(nb::sig("def args(self, /) -> tuple[typing.Any, ...]")))
      .def_prop_ro("kwargs", &EditView::kwargs,
                   nb::for_getter(nb::sig("def kwargs(self, /) -> dict[str, typing.Any]")))
      .def_prop_ro(
          "key", [](const EditView& e) { return e.edit().name; }, "a metadata key")
      .def_prop_ro("value", &EditView::value,
                   nb::for_getter(nb::sig("def value(self, /) -> typing.Any")))
      .def_prop_ro(
          "path", [](const EditView& e) { return e.edit().name; }, "a module or tensor path")
      .def_prop_ro(
          "like", [](const EditView& e) { return e.edit().like; },
          "path of the module a SetModule copies")
      .def_prop_ro(
          "module_type", [](const EditView& e) { return e.edit().module.type.str(); },
          "qualified class name of a SetModule's module")
      .def_prop_ro("attributes", &EditView::attributes,
                   nb::for_getter(nb::sig("def attributes(self, /) -> dict[str, typing.Any]")))
      .def_prop_ro("tensors", &EditView::tensors,
                   nb::for_getter(nb::sig("def tensors(self, /) -> dict[str, TensorInfo | None]")))
      .def_prop_ro("tensor", &EditView::tensor,
                   nb::for_getter(nb::sig("def tensor(self, /) -> TensorInfo | None")));
}

}  // namespace fxopt::bindings
