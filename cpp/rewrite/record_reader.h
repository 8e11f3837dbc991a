// Reversal record fields: their typed keys, and reading them back, failing one way.
//
// A pass declares each field of its record once, as a RecordKey<T> (the key and the type of
// its value), and both writes it (Record::set, rewrite/marks.h) and reads it back
// (RecordReader::get / find) through that declaration, so no key is spelled twice and how each
// type is stored is defined once, in RecordValue below.
//
// A record is a plain value a forward run left in node metadata (rewrite/marks.h); reverse reads
// it in this session or a later one, after deep copies, save/load, or a user's own edits of
// `node.meta`, so any field may be missing or of the wrong type. Every read goes through the
// typed getters of RecordField, and every value that does not fit throws the same RecordError:
// a PassError naming the node, the record and the field, such as
//   node 'fc': reversal record MergeLinears-1a2b does not fit: field 'start' is not an
//   integer ('x')
// Nested fields are named by their path from the record's key (`removed[0][1]`), so no pass
// writes its own "malformed" message. A field naming a node the graph no longer has fails the
// same way. Other ways a well-formed record no longer matches the graph (an operand was
// rewired, a module is gone) are the pass's own errors, saying what changed.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "ir/graph.h"
#include "rewrite/pass_error.h"

namespace fxopt {

class RecordError : public PassError {
 public:
  // An empty `field` is the record as a whole.
  RecordError(const Node& node, std::string_view record, std::string field,
              std::string_view problem);
  const std::string& record() const { return record_; }
  const std::string& field() const { return field_; }

 private:
  std::string record_, field_;
};

// One value of a record and where it sits. Cheap to copy; valid while its RecordReader lives.
class RecordField {
 public:
  const std::string& path() const { return path_; }
  // The value as stored, for values a record keeps verbatim (a divisor, a metadata value).
  const Arg& value() const { return *value_; }

  bool is_none() const { return value_->is_none(); }
  bool boolean() const;
  int64_t integer() const;
  // An integer position in [0, bound).
  size_t index(size_t bound) const;
  const std::string& text() const;
  // Text, or nullptr where the record stores None.
  const std::string* optional_text() const;
  // A node kind by its name (kind_name).
  NodeKind kind() const;
  // The live node of `graph` whose name the field holds.
  Node* node(const Graph& graph) const;
  // The items of a tuple or list; exactly `size` of them unless `size` is 0.
  std::vector<RecordField> items(size_t size = 0) const;
  const Dict& dict() const;

  // Fails on this field: for a value of the right type that is none of those a pass writes.
  [[noreturn]] void fail(std::string_view problem) const;

 private:
  friend class RecordReader;
  RecordField(const Node& node, std::string_view record, const Arg& value, std::string path)
      : node_(&node), record_(record), value_(&value), path_(std::move(path)) {}

  const Node* node_;
  std::string_view record_;
  const Arg* value_;
  std::string path_;
};

// A field of a record: its key and the type of its value.
template <typename T>
struct RecordKey {
  std::string_view name;
};

// How a value of type T is stored in a record (write) and read back from its field (read).
template <typename T>
struct RecordValue;

template <>
struct RecordValue<bool> {
  static Arg write(bool value) { return value; }
  static bool read(const RecordField& field) { return field.boolean(); }
};
template <>
struct RecordValue<int64_t> {
  static Arg write(int64_t value) { return value; }
  static int64_t read(const RecordField& field) { return field.integer(); }
};
template <>
struct RecordValue<std::string> {
  static Arg write(std::string value) { return value; }
  static const std::string& read(const RecordField& field) { return field.text(); }
};
// Text or None; read back as nullptr where None.
template <>
struct RecordValue<std::optional<std::string>> {
  static Arg write(std::optional<std::string> value) {
    return value ? Arg(std::move(*value)) : Arg(None{});
  }
  static const std::string* read(const RecordField& field) { return field.optional_text(); }
};
// A node kind, by its torch.fx name.
template <>
struct RecordValue<NodeKind> {
  static Arg write(NodeKind kind) { return std::string(kind_name(kind)); }
  static NodeKind read(const RecordField& field) { return field.kind(); }
};
// A target, by its qualified name.
template <>
struct RecordValue<Symbol> {
  static Arg write(Symbol target) { return target.str(); }
  static Symbol read(const RecordField& field) { return Symbol::intern(field.text()); }
};
// Paths (attributes a pass stored), as a tuple of text.
template <>
struct RecordValue<std::vector<std::string>> {
  static Arg write(const std::vector<std::string>& texts);
  static std::vector<std::string> read(const RecordField& field);
};
// Nodes, by name; read back as the live nodes of `graph`.
template <>
struct RecordValue<std::vector<Node*>> {
  static Arg write(const std::vector<Node*>& nodes);
  static std::vector<Node*> read(const RecordField& field, const Graph& graph);
};
// Any other value is stored as given and read by its own reader (captured nodes, replaced
// parameters, a divisor kept verbatim): the field itself.
template <>
struct RecordValue<Arg> {
  static Arg write(Arg value) { return value; }
  static RecordField read(const RecordField& field) { return field; }
};

// The record stored on `node` under `name` (the transformation's signature), as (key, value)
// pairs. Keeps its own copy of the value, so reverse may edit the node's metadata meanwhile;
// `name` must outlive the reader and its fields (the signature does: it lives for the pass).
class RecordReader {
 public:
  RecordReader(const Node& node, std::string_view name, Arg stored);
  RecordReader(const RecordReader&) = delete;
  RecordReader& operator=(const RecordReader&) = delete;
  RecordReader(RecordReader&&) = default;  // fields point into the items, which a move keeps

  const Node& node() const { return *node_; }
  // The field under `key`; a missing one is a RecordError.
  RecordField at(std::string_view key) const;
  // The field under `key`, for fields only some records of a pass have.
  std::optional<RecordField> find(std::string_view key) const;

  // The field itself, to fail on a value of the right type that is none a pass writes.
  template <typename T>
  RecordField at(RecordKey<T> key) const {
    return at(key.name);
  }
  // The value of field `key`; `context` is what its RecordValue reads with (a graph for nodes).
  template <typename T, typename... Context>
  decltype(auto) get(RecordKey<T> key, const Context&... context) const {
    return RecordValue<T>::read(at(key.name), context...);
  }
  // The value of field `key`, for fields only some records of a pass have.
  template <typename T, typename... Context>
  auto find(RecordKey<T> key, const Context&... context) const
      -> std::optional<std::decay_t<decltype(RecordValue<T>::read(at(key.name), context...))>> {
    if (std::optional<RecordField> field = find(key.name))
      return RecordValue<T>::read(*field, context...);
    return std::nullopt;
  }

 private:
  const Node* node_;
  std::string_view name_;
  Arg stored_;
  std::vector<std::pair<std::string_view, const Arg*>> fields_;
};

}  // namespace fxopt
