#include "rewrite/record_reader.h"

namespace fxopt {
namespace {

// A captured graph can be long; the start of a value is enough to recognise it.
std::string shown(const Arg& value) {
  constexpr size_t kLimit = 120;
  std::string text = to_string(value);
  return text.size() > kLimit ? text.substr(0, kLimit) + "..." : text;
}

std::string message(std::string_view record, const std::string& field, std::string_view problem) {
  std::string out = "reversal record " + std::string(record) + " does not fit: ";
  if (!field.empty()) out += "field '" + field + "' ";
  return out + std::string(problem);
}

}  // namespace

RecordError::RecordError(const Node& node, std::string_view record, std::string field,
                         std::string_view problem)
    : PassError(node, message(record, field, problem)), record_(record), field_(std::move(field)) {}

void RecordField::fail(std::string_view problem) const {
  throw RecordError(*node_, record_, path_, std::string(problem) + " (" + shown(*value_) + ")");
}

bool RecordField::boolean() const {
  if (!value_->is<bool>()) fail("is not a bool");
  return value_->as<bool>();
}

int64_t RecordField::integer() const {
  std::optional<int64_t> i = value_->integer();
  if (!i) fail("is not an integer");
  return *i;
}

size_t RecordField::index(size_t bound) const {
  int64_t i = integer();
  if (i < 0 || size_t(i) >= bound) fail("is not a position below " + std::to_string(bound));
  return size_t(i);
}

const std::string& RecordField::text() const {
  if (!value_->is<std::string>()) fail("is not a string");
  return value_->as<std::string>();
}

const std::string* RecordField::optional_text() const {
  if (value_->is_none()) return nullptr;
  if (!value_->is<std::string>()) fail("is neither a string nor None");
  return &value_->as<std::string>();
}

NodeKind RecordField::kind() const {
  std::optional<NodeKind> kind = parse_kind(text());
  if (!kind) fail("is not a node kind");
  return *kind;
}

Node* RecordField::node(const Graph& graph) const {
  Node* node = graph.find_by_name(text());
  if (!node || node->erased()) fail("names no node of the graph");
  return node;
}

std::vector<RecordField> RecordField::items(size_t size) const {
  const std::vector<Arg>* seq = value_->sequence();
  if (!seq) fail("is not a tuple");
  if (size && seq->size() != size) fail("does not hold " + std::to_string(size) + " items");
  std::vector<RecordField> out;
  out.reserve(seq->size());
  for (size_t i = 0; i < seq->size(); ++i)
    out.push_back(RecordField(*node_, record_, (*seq)[i], path_ + "[" + std::to_string(i) + "]"));
  return out;
}

const Dict& RecordField::dict() const {
  if (!value_->is<Dict>()) fail("is not a dict");
  return value_->as<Dict>();
}

Arg RecordValue<std::vector<std::string>>::write(const std::vector<std::string>& texts) {
  Tuple out;
  for (const std::string& text : texts) out.items.emplace_back(text);
  return out;
}

std::vector<std::string> RecordValue<std::vector<std::string>>::read(const RecordField& field) {
  std::vector<std::string> out;
  for (const RecordField& item : field.items()) out.push_back(item.text());
  return out;
}

Arg RecordValue<std::vector<Node*>>::write(const std::vector<Node*>& nodes) {
  Tuple out;
  for (const Node* node : nodes) out.items.emplace_back(node->name());
  return out;
}

std::vector<Node*> RecordValue<std::vector<Node*>>::read(const RecordField& field,
                                                         const Graph& graph) {
  std::vector<Node*> out;
  for (const RecordField& item : field.items()) out.push_back(item.node(graph));
  return out;
}

RecordReader::RecordReader(const Node& node, std::string_view name, Arg stored)
    : node_(&node), name_(name), stored_(std::move(stored)) {
  const std::vector<Arg>* entries = stored_.sequence();
  if (!entries) throw RecordError(node, name, "", "is not a tuple (" + shown(stored_) + ")");
  for (size_t i = 0; i < entries->size(); ++i) {
    const std::vector<Arg>* kv = (*entries)[i].sequence();
    if (!kv || kv->size() != 2 || !(*kv)[0].is<std::string>())
      throw RecordError(node, name, "#" + std::to_string(i),
                        "is not a (key, value) pair (" + shown((*entries)[i]) + ")");
    fields_.emplace_back((*kv)[0].as<std::string>(), &(*kv)[1]);
  }
}

RecordField RecordReader::at(std::string_view key) const {
  if (std::optional<RecordField> field = find(key)) return *field;
  throw RecordError(*node_, name_, std::string(key), "is missing");
}

std::optional<RecordField> RecordReader::find(std::string_view key) const {
  for (const auto& [k, v] : fields_)
    if (k == key) return RecordField(*node_, name_, *v, std::string(key));
  return std::nullopt;
}

}  // namespace fxopt
