#include "rewrite/marks.h"

#include <algorithm>
#include <charconv>

namespace fxopt {
namespace {

const std::vector<Arg>* tuple_items(const Node& node, std::string_view key) {
  const Arg* value = node.meta().find(key);
  return value && value->is<Tuple>() ? &value->as<Tuple>().items : nullptr;
}

void store(Rewriter& rewriter, Node* node, std::string_view key, std::vector<Arg> items) {
  if (items.empty())
    rewriter.erase_meta(node, key);
  else
    rewriter.set_meta(node, key, Tuple{std::move(items)});
}

bool is_entry_for(const Arg& entry, std::string_view signature) {
  const auto* pair = entry.sequence();
  return pair && pair->size() == 2 && (*pair)[0] == Arg(std::string(signature));
}

const Arg* stored_record(const Node& node, std::string_view signature) {
  const auto* entries = tuple_items(node, kReversalKey);
  if (!entries) return nullptr;
  for (const Arg& entry : *entries)
    if (is_entry_for(entry, signature)) return &entry.sequence()->at(1);
  return nullptr;
}

// Which application of `signature` the mark or record name `name` belongs to; 0 for another
// transformation's.
int application_of(std::string_view name, std::string_view signature) {
  if (!name.starts_with(signature)) return 0;
  std::string_view rest = name.substr(signature.size());
  if (rest.empty()) return 1;
  if (rest.front() != '@') return 0;
  int application = 0;
  auto [end, error] = std::from_chars(rest.data() + 1, rest.data() + rest.size(), application);
  return error == std::errc() && end == rest.data() + rest.size() ? application : 0;
}

}  // namespace

std::string application_signature(std::string_view signature, int application) {
  std::string name(signature);
  if (application > 1) name += "@" + std::to_string(application);
  return name;
}

int latest_application(const Graph& graph, std::string_view signature) {
  int latest = 0;
  auto see = [&](const Arg& name) {
    if (name.is<std::string>())
      latest = std::max(latest, application_of(name.as<std::string>(), signature));
  };
  for (const Node* n : graph) {
    if (const auto* marks = tuple_items(*n, kMarksKey))
      for (const Arg& m : *marks) see(m);
    if (const auto* entries = tuple_items(*n, kReversalKey))
      for (const Arg& entry : *entries)
        if (const auto* pair = entry.sequence(); pair && !pair->empty()) see(pair->front());
  }
  return latest;
}

bool is_marked_by_any_application(const Node& node, std::string_view signature) {
  const auto* marks = tuple_items(node, kMarksKey);
  return marks && std::ranges::any_of(*marks, [&](const Arg& m) {
           return m.is<std::string>() && application_of(m.as<std::string>(), signature) > 0;
         });
}

bool is_marked(const Node& node, std::string_view signature) {
  const auto* marks = tuple_items(node, kMarksKey);
  return marks &&
         std::find(marks->begin(), marks->end(), Arg(std::string(signature))) != marks->end();
}

void mark(Rewriter& rewriter, Node* node, std::string_view signature) {
  if (is_marked(*node, signature)) return;
  const auto* marks = tuple_items(*node, kMarksKey);
  std::vector<Arg> items = marks ? *marks : std::vector<Arg>{};
  items.emplace_back(std::string(signature));
  store(rewriter, node, kMarksKey, std::move(items));
}

void unmark(Rewriter& rewriter, Node* node, std::string_view signature) {
  const auto* marks = tuple_items(*node, kMarksKey);
  if (!marks) return;
  std::vector<Arg> items = *marks;
  std::erase(items, Arg(std::string(signature)));
  store(rewriter, node, kMarksKey, std::move(items));
}

std::vector<Node*> marked_nodes(const Graph& graph, std::string_view signature) {
  std::vector<Node*> nodes;
  for (Node* n : graph)
    if (is_marked(*n, signature)) nodes.push_back(n);
  return nodes;
}

Record& Record::set(std::string key, Arg value) {
  items_.emplace_back(std::move(key), std::move(value));
  return *this;
}

Arg Record::to_arg() const {
  Tuple out;
  for (const auto& [k, v] : items_) out.items.push_back(Tuple{{Arg(k), v}});
  return out;
}

bool has_reversal_record(const Node& node, std::string_view signature) {
  return stored_record(node, signature) != nullptr;
}

std::optional<RecordReader> reversal_record(const Node& node, std::string_view signature) {
  const Arg* stored = stored_record(node, signature);
  if (!stored) return std::nullopt;
  return RecordReader(node, signature, *stored);
}

void set_reversal_record(Rewriter& rewriter, Node* node, std::string_view signature,
                         const Record& record) {
  const auto* entries = tuple_items(*node, kReversalKey);
  std::vector<Arg> items;
  if (entries)
    std::copy_if(entries->begin(), entries->end(), std::back_inserter(items),
                 [&](const Arg& e) { return !is_entry_for(e, signature); });
  items.push_back(Tuple{{Arg(std::string(signature)), record.to_arg()}});
  store(rewriter, node, kReversalKey, std::move(items));
}

void clear_reversal_record(Rewriter& rewriter, Node* node, std::string_view signature) {
  const auto* entries = tuple_items(*node, kReversalKey);
  if (!entries) return;
  std::vector<Arg> items;
  std::copy_if(entries->begin(), entries->end(), std::back_inserter(items),
               [&](const Arg& e) { return !is_entry_for(e, signature); });
  store(rewriter, node, kReversalKey, std::move(items));
}

}  // namespace fxopt
