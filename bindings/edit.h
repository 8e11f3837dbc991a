// One entry of a session's edit log as Python sees it: the kind (`Edit::Kind`, bound as
// `EditKind`) and named fields, converted to Python values when read. The layout is the one of
// `Edit` (rewrite/edit_log.h); this view only converts, so no edit is described twice.
#pragma once

#include <nanobind/nanobind.h>

#include <cstddef>

#include "rewrite/edit_log.h"

namespace fxopt::bindings {

namespace nb = nanobind;

class Session;

class EditView {
 public:
  EditView(Session& session, size_t index) : session_(&session), index_(index) {}

  const Edit& edit() const;
  Edit::Kind kind() const { return edit().kind; }
  // The fx op of a created or retargeted node ("call_function", ...).
  nb::str op() const;
  // The target as fx holds it: the callable for call_function, else its string.
  nb::object target() const;
  nb::tuple args() const;
  nb::dict kwargs() const;
  // The value of a SetMeta edit.
  nb::object value() const;
  // SetModule: the copied module's plain attributes, and its tensors (TensorInfo or None).
  nb::dict attributes() const;
  nb::dict tensors() const;
  // SetAttribute: the stored tensor (TensorInfo), or None.
  nb::object tensor() const;

  // Binds the view (and EditKind) into `m`.
  static void bind(nb::module_& m);

 private:
  Session* session_;
  size_t index_;
};

}  // namespace fxopt::bindings
