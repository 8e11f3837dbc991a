// Session::effective_edits, write_meta and applied_marks: the node metadata side of a sync.
//
// Metadata edits are most of a sync's edits (every changed node gets its mark and its reversal
// record), and each is one dict write; so they are written in one call, after the structural ones
// succeeded, in a way that cannot fail half-way: nothing written needs undoing.
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <algorithm>
#include <set>

#include "bindings/fx_nodes.h"
#include "bindings/session.h"

namespace fxopt::bindings {
namespace {

bool is_meta(Edit::Kind kind) {
  return kind == Edit::Kind::SetMeta || kind == Edit::Kind::EraseMeta;
}

}  // namespace

std::pair<std::vector<size_t>, std::vector<size_t>> Session::effective_edits() const {
  std::pair<std::vector<size_t>, std::vector<size_t>> out;
  for (size_t index : fxopt::effective_edits(log_))
    (is_meta(log_[index].kind) ? out.second : out.first).push_back(index);
  return out;
}

void Session::write_meta(const std::vector<size_t>& indices) {
  struct Write {
    nb::object meta, key, value;  // value: null for EraseMeta
  };
  // Everything that can fail (an unbound node, a value without a Python form, a meta that is
  // not a dict) happens before the first write.
  std::vector<Write> writes;
  writes.reserve(indices.size());
  const nb::handle meta_key = node_keys().meta;
  for (size_t index : indices) {
    const Edit& edit = log_.at(index);
    if (!is_meta(edit.kind))
      throw std::invalid_argument("edit " + std::to_string(index) + " is not a metadata edit");
    nb::object meta = get(py_node(edit.node), meta_key);
    if (!PyDict_Check(meta.ptr())) throw std::invalid_argument("node.meta is not a dict");
    nb::object value = edit.kind == Edit::Kind::SetMeta ? to_py(edit.value) : nb::object();
    writes.push_back({std::move(meta), nb::str(edit.name.c_str()), std::move(value)});
  }
  for (const Write& w : writes) {
    if (w.value.is_valid()) {
      if (PyDict_SetItem(w.meta.ptr(), w.key.ptr(), w.value.ptr()) != 0) throw nb::python_error();
    } else if (PyDict_DelItem(w.meta.ptr(), w.key.ptr()) != 0) {
      if (!PyErr_ExceptionMatches(PyExc_KeyError)) throw nb::python_error();
      PyErr_Clear();  // erasing an absent key is no change
    }
  }
}

std::vector<std::string> Session::applied_marks() const {
  std::set<std::string> marks;
  for (const Fingerprint& print : fingerprints_) {
    if (!print.marks.is_valid() || !PyTuple_Check(print.marks.ptr())) continue;
    for (nb::handle mark : nb::borrow<nb::tuple>(print.marks))
      if (PyUnicode_Check(mark.ptr())) marks.insert(nb::cast<std::string>(mark));
  }
  return {marks.begin(), marks.end()};
}

}  // namespace fxopt::bindings
