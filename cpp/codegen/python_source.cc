#include "codegen/python_source.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstring>
#include <functional>
#include <memory>
#include <string_view>
#include <unordered_map>

namespace fxopt {
namespace {

// Thrown inside the generator when the graph holds something it cannot print exactly.
struct Decline {};

bool is_ascii_alpha(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }
bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_word(char c) { return is_ascii_alpha(c) || is_digit(c) || c == '_'; }
bool is_ascii(std::string_view s) {
  for (char c : s)
    if (static_cast<unsigned char>(c) >= 0x80) return false;
  return true;
}

// A Python identifier made of ASCII only.
bool is_ascii_identifier(std::string_view s) {
  if (s.empty() || !(is_ascii_alpha(s[0]) || s[0] == '_')) return false;
  for (char c : s)
    if (!is_word(c)) return false;
  return true;
}

// str.isidentifier for ASCII; other text declines (Python accepts some non-ASCII letters).
bool is_identifier(std::string_view s) {
  if (!is_ascii(s)) throw Decline{};
  return is_ascii_identifier(s);
}

int64_t parse_count(std::string_view digits) {
  if (digits.size() > 18) throw Decline{};  // a Python int past int64
  int64_t value = 0;
  for (char c : digits) value = value * 10 + (c - '0');
  return value;
}

void append_int(std::string& out, int64_t value) {
  char buffer[24];
  auto [end, error] = std::to_chars(buffer, buffer + sizeof buffer, value);
  out.append(buffer, end);
}

// Python's repr of a float, appended to `out`.
void append_float_repr(std::string& out, double value) {
  if (std::isnan(value)) {
    out += "nan";
    return;
  }
  if (std::isinf(value)) {
    out += value > 0 ? "inf" : "-inf";
    return;
  }
  // The shortest digits that round-trip, as Python's repr picks them; then Python's layout:
  // positional for decimal exponents -4 < decpt <= 16, scientific (e-05, e+16) otherwise.
  char buffer[64];
  auto [end, error] =
      std::to_chars(buffer, buffer + sizeof buffer, value, std::chars_format::scientific);
  std::string_view text(buffer, end - buffer);
  if (text[0] == '-') {
    out += '-';
    text.remove_prefix(1);
  }
  size_t e = text.find('e');
  char digit_buffer[32];
  size_t n = 0;
  for (char c : text.substr(0, e))
    if (c != '.') digit_buffer[n++] = c;
  std::string_view digits(digit_buffer, n);
  int exponent = 0;
  std::from_chars(text.data() + e + (text[e + 1] == '+' ? 2 : 1), text.data() + text.size(),
                  exponent);
  const int decpt = exponent + 1;
  const int count = static_cast<int>(n);
  if (decpt <= -4 || decpt > 16) {
    out += digits[0];
    if (n > 1) {
      out += '.';
      out += digits.substr(1);
    }
    const int shown = decpt - 1;
    out += shown < 0 ? "e-" : "e+";
    const int magnitude = shown < 0 ? -shown : shown;
    if (magnitude < 10) out += '0';
    append_int(out, magnitude);
  } else if (decpt <= 0) {
    out += "0.";
    out.append(-decpt, '0');
    out += digits;
  } else if (decpt >= count) {
    out += digits;
    out.append(decpt - count, '0');
    out += ".0";
  } else {
    out += digits.substr(0, decpt);
    out += '.';
    out += digits.substr(decpt);
  }
}

// Python's repr of an ASCII string, appended to `out`; false (nothing appended) for other text.
bool append_str_repr(std::string& out, std::string_view text) {
  if (!is_ascii(text)) return false;
  bool single = text.find('\'') != std::string_view::npos;
  bool dbl = text.find('"') != std::string_view::npos;
  char quote = single && !dbl ? '"' : '\'';
  static constexpr char hex[] = "0123456789abcdef";
  out += quote;
  for (char c : text) {
    if (c == quote || c == '\\') {
      out += '\\';
      out += c;
    } else if (c == '\t') {
      out += "\\t";
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c < ' ' || c == 0x7f) {
      out += "\\x";
      out += hex[(c >> 4) & 0xf];
      out += hex[c & 0xf];
    } else {
      out += c;
    }
  }
  out += quote;
  return true;
}

// The number of fx's `# COUNTER: (\d+)` searched anywhere in `line`.
std::optional<int64_t> counter_of(std::string_view line) {
  static constexpr std::string_view marker = "# COUNTER: ";
  for (size_t at = line.find(marker); at != std::string_view::npos;
       at = line.find(marker, at + 1)) {
    size_t digits = at + marker.size();
    size_t end = digits;
    while (end < line.size() && is_digit(line[end])) ++end;
    if (end > digits) return parse_count(line.substr(digits, end - digits));
  }
  return std::nullopt;
}

// Storage for the names the namespace hands out: chunks never move, so the string_views the
// generator keeps (one per node, the namespace's keys) stay valid without a string per name.
class NameArena {
 public:
  std::string_view store(std::string_view text) {
    if (text.size() > room_) {
      size_t size = std::max(kChunk, text.size());
      chunks_.push_back(std::make_unique<char[]>(size));
      next_ = chunks_.back().get();
      room_ = size;
    }
    std::memcpy(next_, text.data(), text.size());
    std::string_view stored(next_, text.size());
    next_ += text.size();
    room_ -= text.size();
    return stored;
  }

 private:
  static constexpr size_t kChunk = size_t{1} << 16;
  std::vector<std::unique_ptr<char[]>> chunks_;
  char* next_ = nullptr;
  size_t room_ = 0;
};

// An open-addressing hash map keyed by string_views into storage that outlives it: the
// namespace's lookups, with no allocation per name. The probed slots are 8 bytes (a hash tag and
// an entry number), so the table of a large graph's names stays small enough for the cache;
// the entries themselves are appended in order.
template <class V>
class NameTable {
 public:
  explicit NameTable(size_t expected) {
    size_t capacity = 16;
    while (capacity < 2 * expected) capacity *= 2;
    slots_.resize(capacity);
    entries_.reserve(expected);
  }

  V* find(std::string_view key) {
    Slot& slot = probe(key, hash(key));
    return slot.entry ? &entries_[slot.entry - 1].second : nullptr;
  }

  // Sets the value of `key`, adding it (the view itself is kept) if it is new.
  void set(std::string_view key, V value) {
    uint32_t h = hash(key);
    Slot* slot = &probe(key, h);
    if (!slot->entry) {
      if (2 * (entries_.size() + 1) > slots_.size()) {
        grow();
        slot = &probe(key, h);
      }
      entries_.emplace_back(key, V{});
      *slot = Slot{h, static_cast<uint32_t>(entries_.size())};
    }
    entries_[slot->entry - 1].second = value;
  }

 private:
  struct Slot {
    uint32_t hash = 0;
    uint32_t entry = 0;  // 1 + index in entries_; 0: empty
  };

  static uint32_t hash(std::string_view key) {
    return static_cast<uint32_t>(std::hash<std::string_view>()(key));
  }

  // The slot holding `key`, or the empty one where it would go.
  Slot& probe(std::string_view key, uint32_t h) {
    const size_t mask = slots_.size() - 1;
    for (size_t i = h & mask;; i = (i + 1) & mask) {
      Slot& slot = slots_[i];
      if (!slot.entry || (slot.hash == h && entries_[slot.entry - 1].first == key)) return slot;
    }
  }

  void grow() {
    std::vector<Slot> old(slots_.size() * 2);
    old.swap(slots_);
    const size_t mask = slots_.size() - 1;
    for (const Slot& slot : old) {
      if (!slot.entry) continue;
      size_t i = slot.hash & mask;
      while (slots_[i].entry) i = (i + 1) & mask;
      slots_[i] = slot;
    }
  }

  std::vector<Slot> slots_;
  std::vector<std::pair<std::string_view, V>> entries_;
};

// fx's `_Namespace.create_name`.
class Namespace {
 public:
  // `illegal` must outlive the namespace (its names are keys).
  Namespace(const std::vector<std::string>& illegal, size_t expected)
      : illegal_(illegal.size()), used_(expected), base_count_(expected) {
    for (const std::string& name : illegal) illegal_.set(name, true);
  }

  // `own_builtin`: the object is the builtin `candidate` names, which may keep that name. The
  // name returned stays valid as long as the namespace.
  std::string_view create(std::string_view candidate, bool own_builtin) {
    if (!is_ascii_identifier(candidate)) {
      // fx's _name_regex also matches before a trailing newline; such names never reach here.
      if (!is_ascii(candidate) || candidate.find('\n') != std::string_view::npos) throw Decline{};
      sanitized_ = sanitized(candidate);
      candidate = sanitized_;
    }
    std::string_view base = candidate;
    std::optional<int64_t> num;
    size_t underscore = candidate.rfind('_');
    if (underscore != std::string_view::npos && underscore >= 1 &&
        underscore + 1 < candidate.size()) {
      std::string_view digits = candidate.substr(underscore + 1);
      bool all_digits = true;
      for (char c : digits) all_digits &= is_digit(c);
      if (all_digits) {
        base = candidate.substr(0, underscore);
        num = parse_count(digits);
      }
    }
    int64_t count = 0;
    if (!num || used_.find(candidate)) {
      const int64_t* known = base_count_.find(base);
      count = known ? *known : 0;
      if (illegal_.find(candidate) && !own_builtin) candidate = numbered(base, ++count);
    } else {
      count = *num;
    }
    while (used_.find(candidate)) candidate = numbered(base, ++count);
    // Every name fx settles on starts with its base: the stored name holds both keys.
    std::string_view name = arena_.store(candidate);
    used_.set(name, true);
    base_count_.set(name.substr(0, base.size()), count);
    return name;
  }

 private:
  // Runs of illegal characters become one underscore; never empty; never starts with a digit.
  static std::string sanitized(std::string_view s) {
    std::string out;
    for (size_t i = 0; i < s.size();) {
      if (is_word(s[i])) {
        out += s[i++];
      } else {
        out += '_';
        while (i < s.size() && !is_word(s[i])) ++i;
      }
    }
    if (out.empty()) return "_unnamed";
    if (is_digit(out[0])) out.insert(out.begin(), '_');
    return out;
  }

  // `{base}_{count}`, in a buffer reused by every attempt (`base` never points into it).
  std::string_view numbered(std::string_view base, int64_t count) {
    numbered_.assign(base);
    numbered_ += '_';
    append_int(numbered_, count);
    return numbered_;
  }

  NameTable<bool> illegal_;
  NameTable<bool> used_;
  NameTable<int64_t> base_count_;
  NameArena arena_;
  std::string sanitized_;
  std::string numbered_;
};

// fx's body after its last step, written as it is generated. fx writes a `# COUNTER: i` line
// before node i's text, then drops every line holding such a counter, maps each remaining line
// to the index of the counter before it (fx's `_lineno_map`), strips leading blank lines and
// indents every line by four spaces. A node's text is a whole number of lines (each ends with
// a newline); nearly always one line with no counter in it, which is written in place. Any
// other text (a value whose source spans lines or holds `# COUNTER: 3`) is re-read line by line
// under fx's rules.
class Body {
 public:
  explicit Body(size_t expected_bytes) { text_.reserve(expected_bytes); }

  // Where the current node's text goes.
  std::string& text() { return text_; }

  void begin_node(int64_t index) {
    current_ = index;
    start_ = text_.size();
    text_ += kIndent;
  }

  void end_node() {
    std::string_view written = std::string_view(text_).substr(start_ + kIndent.size());
    if (written.empty()) {  // a placeholder fx prints nothing for
      text_.resize(start_);
      return;
    }
    if (written.back() != '\n') throw Decline{};  // not a whole line: not fx's layout
    if (written.size() > 1 && written.find('\n') == written.size() - 1 && !counter_of(written)) {
      lines_.push_back(current_);
      any_text_ = true;
      return;
    }
    std::string node_text(written.substr(0, written.size() - 1));
    text_.resize(start_);
    std::string_view rest = node_text;
    for (size_t end = rest.find('\n');; end = rest.find('\n')) {
      line(rest.substr(0, end));
      if (end == std::string_view::npos) break;
      rest.remove_prefix(end + 1);
    }
  }

  // One line of body text, under fx's rules.
  void line(std::string_view text) {
    if (std::optional<int64_t> counter = counter_of(text)) {
      current_ = *counter;
      return;
    }
    lines_.push_back(current_);
    if (text.empty() && !any_text_) return;  // str.lstrip("\n")
    any_text_ = true;
    text_ += kIndent;
    text_ += text;
    text_ += '\n';
  }

  // The last line, the empty one after the final newline; returns the body and its line map.
  std::pair<std::string, std::vector<int64_t>> finish() && {
    lines_.push_back(current_);
    text_ += kIndent;
    return {std::move(text_), std::move(lines_)};
  }

 private:
  static constexpr std::string_view kIndent = "    ";
  std::string text_;
  std::vector<int64_t> lines_;  // the node index of each line, -1 for none
  int64_t current_ = -1;
  size_t start_ = 0;
  bool any_text_ = false;  // a non-blank line was written: blank lines are kept from now on
};

class Generator {
 public:
  Generator(const Graph& graph, const SourceOptions& options, SourcePrinter& printer)
      : graph_(graph),
        options_(options),
        printer_(printer),
        names_(options.illegal_names, graph.size() + options.custom_builtins.size()),
        nodes_(graph.next_id()),
        body_(graph.size() * 128) {}

  PythonSource run() {
    PythonSource out;
    for (const std::string& name : options_.custom_builtins)
      out.custom_builtin_names.emplace_back(names_.create(name, true));
    record_last_uses();
    int64_t index = 0;
    for (Node* node : graph_) {
      body_.begin_node(index++);
      emit(*node, body_.text());
      delete_unused_values(*node, body_.text());
      body_.end_node();
    }
    if (!graph_.first()) body_.line("pass");
    std::optional<std::string> prologue = printer_.prologue(free_vars_, return_annotation_);
    if (!prologue) throw Decline{};
    auto [body, lines] = std::move(body_).finish();
    out.lineno_start = 1 + std::count(prologue->begin(), prologue->end(), '\n');
    out.node_index = std::move(lines);
    out.src.reserve(4 + prologue->size() + body.size());
    out.src += "\n\n\n";
    out.src += *prologue;
    out.src += '\n';
    out.src += body;
    out.prologue_start = 4;
    out.globals = std::move(globals_);
    out.type_globals = std::move(type_globals_);
    return out;
  }

 private:
  // What the generator keeps per node, indexed by node id.
  struct NodeState {
    std::string_view name;  // empty until fx would name it
    // The nodes whose last use this node is: `dead_[dead_begin, dead_end)`.
    uint32_t dead_begin = 0;
    uint32_t dead_end = 0;
  };

  // A call_function target: how fx spells it and, for a global, the name it got.
  struct Callee {
    CallTarget spelled;
    std::string_view global;
  };

  // fx names a node when it first prints it.
  std::string_view name(const Node* node) {
    NodeState& state = nodes_.at(node->id());
    if (state.name.empty()) state.name = names_.create(node->name(), false);
    return state.name;
  }

  // fx's `_get_repr`; `plain`: Python's repr (inside dicts), which fx does not special-case.
  void put(std::string& out, const Arg& arg, bool plain = false) {
    std::visit(
        [&](const auto& v) {
          using V = std::decay_t<decltype(v)>;
          if constexpr (std::is_same_v<V, None>) {
            out += "None";
          } else if constexpr (std::is_same_v<V, Node*>) {
            out += name(v);
          } else if constexpr (std::is_same_v<V, bool>) {
            out += v ? "True" : "False";
          } else if constexpr (std::is_same_v<V, int64_t>) {
            append_int(out, v);
          } else if constexpr (std::is_same_v<V, double>) {
            append_float_repr(out, v);
          } else if constexpr (std::is_same_v<V, std::string>) {
            if (!append_str_repr(out, v)) throw Decline{};
          } else if constexpr (std::is_same_v<V, List>) {
            out += '[';
            put_joined(out, v.items, plain);
            out += ']';
          } else if constexpr (std::is_same_v<V, Tuple>) {
            out += '(';
            put_joined(out, v.items, plain);
            out += v.items.size() == 1 ? ",)" : ")";
          } else if constexpr (std::is_same_v<V, Slice>) {
            out += "slice(";
            put_joined(out, v.items, plain);
            out += ')';
          } else if constexpr (std::is_same_v<V, Dict>) {
            out += '{';
            for (size_t i = 0; i < v.items.size(); ++i) {
              if (i) out += ", ";
              if (!append_str_repr(out, v.items[i].first)) throw Decline{};
              out += ": ";
              put(out, v.items[i].second, true);
            }
            out += '}';
          } else {
            out += opaque(v, plain);
          }
        },
        arg.value);
  }

  void put_joined(std::string& out, const std::vector<Arg>& items, bool plain) {
    for (size_t i = 0; i < items.size(); ++i) {
      if (i) out += ", ";
      put(out, items[i], plain);
    }
  }

  // fx's `_format_args(args[first:], kwargs)`.
  void put_args(std::string& out, const Args& args, size_t first, const Kwargs& kwargs) {
    bool any = false;
    for (size_t i = first; i < args.size(); ++i, any = true) {
      if (any) out += ", ";
      put(out, args[i]);
    }
    for (const auto& [key, value] : kwargs.items) {
      if (any) out += ", ";
      any = true;
      out += key;
      out += " = ";
      put(out, value);
    }
  }

  // fx's `_format_target(base, target)`: `base.a.b`, with getattr for parts that are not
  // identifiers; `put_base` prints the base.
  template <class PutBase>
  static void put_target(std::string& out, std::string_view target, PutBase&& put_base) {
    auto for_each_part = [&](auto&& visit) {
      for (size_t start = 0;;) {
        size_t dot = target.find('.', start);
        visit(target.substr(start, dot == std::string_view::npos ? dot : dot - start));
        if (dot == std::string_view::npos) return;
        start = dot + 1;
      }
    };
    for_each_part([&](std::string_view part) {
      if (!is_identifier(part)) out += "getattr(";
    });
    put_base();
    for_each_part([&](std::string_view part) {
      if (is_identifier(part)) {
        out += '.';
        out += part;
      } else {
        out += ", \"";
        out += part;
        out += "\")";
      }
    });
  }

  // `str.format(*(repr(a) for a in args))` for templates made of `{}` fields only. fx prints
  // every argument before formatting, used or not: each node it names takes its name then.
  void put_format(std::string& out, std::string_view pattern, const Args& args) {
    items_.clear();
    item_ends_.clear();
    for (const Arg& arg : args) {
      put(items_, arg);
      item_ends_.push_back(items_.size());
    }
    size_t next = 0;
    for (size_t i = 0; i < pattern.size(); ++i) {
      if (pattern.substr(i, 2) == "{}") {
        if (next >= item_ends_.size()) throw Decline{};  // fx raises IndexError
        size_t begin = next ? item_ends_[next - 1] : 0;
        out.append(items_, begin, item_ends_[next] - begin);
        ++next;
        ++i;
      } else if (pattern[i] == '{' || pattern[i] == '}') {
        throw Decline{};
      } else {
        out += pattern[i];
      }
    }
  }

  const std::string& opaque(Opaque value, bool plain) {
    uint64_t key = value.id * 2 + plain;
    auto it = opaques_.find(key);
    if (it != opaques_.end()) return it->second;
    std::optional<std::string> text = printer_.opaque(value, plain);
    if (!text) throw Decline{};
    return opaques_.emplace(key, std::move(*text)).first->second;
  }

  Callee& callee(Symbol target) {
    auto it = callees_.find(target);
    if (it != callees_.end()) return it->second;
    std::optional<CallTarget> spelled = printer_.call_target(target);
    if (!spelled) throw Decline{};
    return callees_.emplace(target, Callee{std::move(*spelled), {}}).first->second;
  }

  // fx's `add_global`: one name per callable, allocated when first printed.
  std::string_view global_name(Symbol target, Callee& callee) {
    if (callee.spelled.style == CallTarget::Style::Qualified) return callee.spelled.text;
    if (callee.global.empty()) {
      callee.global = names_.create(callee.spelled.text, callee.spelled.builtin_object);
      globals_.emplace_back(std::string(callee.global), target);
    }
    return callee.global;
  }

  // `name : type = ` (the annotation spelled before: see emit).
  void put_assignment(std::string& out, const Node& node, std::string_view type) {
    out += name(&node);
    if (!type.empty()) {
      out += " : ";
      out += type;
    }
    out += " = ";
  }

  // Each order of evaluation below is fx's (f-strings left to right): names are allocated in
  // the order fx prints them.
  void emit(const Node& node, std::string& out) {
    const Args& args = node.args();
    // fx spells the annotation first: a new global it needs takes its name before the node's.
    const std::string type = type_name(node);
    switch (node.kind()) {
      case NodeKind::Placeholder: {
        const std::string& target = node.target().str();
        std::string free_var = target;
        if (!type.empty()) free_var += " : " + type;
        if (!args.empty()) {
          free_var += " = ";
          put(free_var, args[0]);
        }
        free_vars_.push_back(std::move(free_var));
        std::string raw_name;
        for (char c : target)
          if (c != '*') raw_name += c;
        std::string_view own = name(&node);
        if (raw_name != own) {
          out += own;
          out += " = ";
          out += raw_name;
          out += '\n';
        }
        return;
      }
      case NodeKind::CallMethod:
        if (args.empty()) throw Decline{};
        put_assignment(out, node, type);
        put_target(out, node.target().str(), [&] { put(out, args[0]); });
        out += '(';
        put_args(out, args, 1, node.kwargs());
        out += ')';
        return;
      case NodeKind::CallFunction: {
        Callee& called = callee(node.target());
        const CallTarget& spelled = called.spelled;
        if (spelled.style == CallTarget::Style::Operator) {
          put_assignment(out, node, type);
          put_format(out, spelled.text, args);
          return;
        }
        if (spelled.style == CallTarget::Style::Inplace) {
          if (args.empty()) throw Decline{};
          put_format(out, spelled.text, args);
          out += ";  ";
          put_assignment(out, node, type);
          put(out, args[0]);
          return;
        }
        std::string_view function = global_name(node.target(), called);
        if (function == "getattr") {
          if (args.size() < 2) throw Decline{};  // fx raises IndexError
          if (args.size() == 2 && args[1].is<std::string>() &&
              is_identifier(args[1].as<std::string>())) {
            put_assignment(out, node, type);
            put_target(out, args[1].as<std::string>(), [&] { put(out, args[0]); });
            return;
          }
        }
        put_assignment(out, node, type);
        out += function;
        out += '(';
        put_args(out, args, 0, node.kwargs());
        out += ')';
        return;
      }
      case NodeKind::CallModule:
        put_assignment(out, node, type);
        put_target(out, node.target().str(), [&] { out += options_.root_module; });
        out += '(';
        put_args(out, args, 0, node.kwargs());
        out += ')';
        return;
      case NodeKind::GetAttr:
        put_assignment(out, node, type);
        put_target(out, node.target().str(), [&] { out += options_.root_module; });
        return;
      case NodeKind::Output:
        if (args.empty()) throw Decline{};
        if (!type.empty()) return_annotation_ = " -> " + type;
        out += "return ";
        out += options_.output_prefix;
        put(out, args[0]);
        out += options_.output_suffix;
        return;
    }
  }

  std::string type_name(const Node& node) {
    std::optional<TypeAnnotation> type = printer_.type_annotation(node);
    if (!type) throw Decline{};
    const CallTarget& spelled = type->spelling;
    if (spelled.style == CallTarget::Style::Qualified || spelled.text.empty()) return spelled.text;
    if (spelled.style != CallTarget::Style::Global) throw Decline{};
    auto it = type_names_.find(type->key);
    if (it != type_names_.end()) return std::string(it->second);
    std::string_view name = names_.create(spelled.text, spelled.builtin_object);
    type_globals_.emplace_back(std::string(name), type->key);
    type_names_.emplace(type->key, name);
    return std::string(name);
  }

  // fx frees each value after its last use: walking the nodes backwards, the first user seen
  // of each input is its last; a user lists its inputs in the order it first reads them.
  void record_last_uses() {
    std::vector<bool> seen(nodes_.size());
    for (Node* user = graph_.last(); user; user = user->prev()) {
      NodeState& state = nodes_.at(user->id());
      state.dead_begin = static_cast<uint32_t>(dead_.size());
      user->for_each_input([&](Node* input) {
        if (seen.at(input->id())) return;
        seen[input->id()] = true;
        dead_.push_back(input);
      });
      state.dead_end = static_cast<uint32_t>(dead_.size());
    }
  }

  void delete_unused_values(const Node& user, std::string& out) {
    if (user.kind() == NodeKind::Placeholder) return;
    if (user.kind() == NodeKind::Output) {
      out += '\n';
      return;
    }
    const NodeState& state = nodes_.at(user.id());
    const bool unused = user.users().empty();
    if (state.dead_begin == state.dead_end && !unused) {
      out += '\n';
      return;
    }
    out += ";  ";
    for (uint32_t i = state.dead_begin; i < state.dead_end; ++i) {
      out += name(dead_[i]);
      out += " = ";
    }
    if (unused) {
      out += name(&user);
      out += " = ";
    }
    out += "None\n";
  }

  const Graph& graph_;
  const SourceOptions& options_;
  SourcePrinter& printer_;
  Namespace names_;
  std::vector<NodeState> nodes_;
  std::vector<const Node*> dead_;
  Body body_;
  std::vector<std::string> free_vars_;
  std::string return_annotation_;
  std::unordered_map<Symbol, Callee> callees_;
  std::vector<std::pair<std::string, Symbol>> globals_;
  std::unordered_map<uint64_t, std::string_view> type_names_;
  std::vector<std::pair<std::string, uint64_t>> type_globals_;
  std::unordered_map<uint64_t, std::string> opaques_;  // by id * 2 + plain
  std::string items_;              // put_format's printed arguments, back to back
  std::vector<size_t> item_ends_;  // where each ends in items_
};

}  // namespace

std::string python_float_repr(double value) {
  std::string out;
  append_float_repr(out, value);
  return out;
}

std::optional<std::string> python_str_repr(std::string_view text) {
  std::string out;
  if (!append_str_repr(out, text)) return std::nullopt;
  return out;
}

std::optional<PythonSource> python_source(const Graph& graph, const SourceOptions& options,
                                          SourcePrinter& printer) {
  try {
    return Generator(graph, options, printer).run();
  } catch (const Decline&) {
    return std::nullopt;
  }
}

}  // namespace fxopt
