// Marks and reversal records: what a transformation leaves on the nodes it changed.
//
// Both live in node metadata so they travel with the fx graph (deep copies, later bridge
// sessions) and reverse needs nothing but the graph. Values are tuples, never dicts or lists:
// fx copies `node.meta` shallowly, and immutable values keep copies from sharing state.
//   meta["fxopt_transformations"] = ("<signature>", ...)
//   meta["fxopt_reversal"]        = (("<signature>", <record>), ...)
// A record is a tuple of (key, value) pairs, written with Record and read back with RecordReader
// (rewrite/record_reader.h), which fails one way on whatever does not fit.
#pragma once

#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "ir/node.h"
#include "rewrite/record_reader.h"
#include "rewrite/rewriter.h"

namespace fxopt {

inline constexpr std::string_view kMarksKey = "fxopt_transformations";
inline constexpr std::string_view kReversalKey = "fxopt_reversal";

bool is_marked(const Node& node, std::string_view signature);
void mark(Rewriter& rewriter, Node* node, std::string_view signature);
void unmark(Rewriter& rewriter, Node* node, std::string_view signature);
// Nodes that carry `signature`'s mark, in graph order. O(n): reverse runs once per call.
std::vector<Node*> marked_nodes(const Graph& graph, std::string_view signature);

// Applications. A transformation applied to a graph it changed before marks and records this
// application under a signature of its own, "<signature>@2", "@3", ...: reverse undoes the
// latest application only, so compose(A, B, A) reverses A, B, A in that order even where both
// A's sign alike (equal parameters). The first application keeps the plain signature.
std::string application_signature(std::string_view signature, int application);
// The latest application of `signature` whose marks or records the graph holds; 0 if none.
int latest_application(const Graph& graph, std::string_view signature);
// Whether any application of `signature` marked `node`.
bool is_marked_by_any_application(const Node& node, std::string_view signature);

// A record being written, in the order its fields are set.
class Record {
 public:
  // Passes write through their declared keys; the plain form is for the keys' own tests.
  template <typename T>
  Record& set(RecordKey<T> key, std::type_identity_t<T> value) {
    return set(std::string(key.name), RecordValue<T>::write(std::move(value)));
  }
  Record& set(std::string key, Arg value);
  Arg to_arg() const;

 private:
  std::vector<std::pair<std::string, Arg>> items_;
};

bool has_reversal_record(const Node& node, std::string_view signature);
// The record `signature` left on `node`, if any, to read; `signature` must outlive it.
std::optional<RecordReader> reversal_record(const Node& node, std::string_view signature);
void set_reversal_record(Rewriter& rewriter, Node* node, std::string_view signature,
                         const Record& record);
void clear_reversal_record(Rewriter& rewriter, Node* node, std::string_view signature);

}  // namespace fxopt
