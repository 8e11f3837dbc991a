#include "codegen/python_source.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <string_view>
#include <unordered_map>
#include <unordered_set>

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

// str.isidentifier for ASCII; other text declines (Python accepts some non-ASCII letters).
bool is_identifier(std::string_view s) {
  if (!is_ascii(s)) throw Decline{};
  if (s.empty() || !(is_ascii_alpha(s[0]) || s[0] == '_')) return false;
  for (char c : s)
    if (!is_word(c)) return false;
  return true;
}

int64_t parse_count(std::string_view digits) {
  if (digits.size() > 18) throw Decline{};  // a Python int past int64
  int64_t value = 0;
  for (char c : digits) value = value * 10 + (c - '0');
  return value;
}

// fx's `_Namespace.create_name`.
class Namespace {
 public:
  Namespace(const std::vector<std::string>& illegal, size_t expected)
      : illegal_(illegal.begin(), illegal.end()) {
    used_.reserve(expected);
    base_count_.reserve(expected);
  }

  // `own_builtin`: the object is the builtin `candidate` names, which may keep that name.
  std::string create(std::string candidate, bool own_builtin) {
    // fx's _name_regex also matches before a trailing newline; such names never reach here.
    if (!is_ascii(candidate) || candidate.find('\n') != std::string::npos) throw Decline{};
    if (!valid(candidate)) candidate = sanitized(candidate);
    std::string base = candidate;
    std::optional<int64_t> num;
    size_t underscore = candidate.rfind('_');
    if (underscore != std::string::npos && underscore >= 1 && underscore + 1 < candidate.size()) {
      std::string_view digits = std::string_view(candidate).substr(underscore + 1);
      bool all_digits = true;
      for (char c : digits) all_digits &= is_digit(c);
      if (all_digits) {
        base = candidate.substr(0, underscore);
        num = parse_count(digits);
      }
    }
    int64_t count = 0;
    if (!num || used_.contains(candidate)) {
      auto it = base_count_.find(base);
      count = it == base_count_.end() ? 0 : it->second;
      if (illegal_.contains(candidate) && !own_builtin) {
        ++count;
        candidate = base + "_" + std::to_string(count);
      }
    } else {
      count = *num;
    }
    while (used_.contains(candidate)) {
      ++count;
      candidate = base + "_" + std::to_string(count);
    }
    used_.insert(candidate);
    base_count_[base] = count;
    return candidate;
  }

 private:
  static bool valid(std::string_view s) {
    if (s.empty() || !(is_ascii_alpha(s[0]) || s[0] == '_')) return false;
    for (char c : s)
      if (!is_word(c)) return false;
    return true;
  }
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

  std::unordered_set<std::string> illegal_;
  std::unordered_set<std::string> used_;
  std::unordered_map<std::string, int64_t> base_count_;
};

// fx's `_format_target`: `base.a.b`, with getattr for parts that are not identifiers.
std::string format_target(std::string base, std::string_view target) {
  size_t start = 0;
  while (true) {
    size_t dot = target.find('.', start);
    std::string_view part = target.substr(start, dot == std::string_view::npos ? dot : dot - start);
    if (is_identifier(part)) {
      base += '.';
      base += part;
    } else {
      base = "getattr(" + base + ", \"" + std::string(part) + "\")";
    }
    if (dot == std::string_view::npos) return base;
    start = dot + 1;
  }
}

class Generator {
 public:
  Generator(const Graph& graph, const SourceOptions& options, SourcePrinter& printer)
      : graph_(graph),
        options_(options),
        printer_(printer),
        names_(options.illegal_names, graph.size() + options.custom_builtins.size()) {
    node_names_.reserve(graph.size());
    last_uses_.reserve(graph.size());
  }

  PythonSource run() {
    PythonSource out;
    for (const std::string& name : options_.custom_builtins)
      out.custom_builtin_names.push_back(names_.create(name, true));
    record_last_uses();
    std::vector<std::string> free_vars;
    std::string body;
    body.reserve(graph_.size() * 96);  // about one line per node: grow the text once
    int64_t index = 0;
    for (Node* node : graph_) {
      body += "# COUNTER: ";
      body += std::to_string(index++);
      body += '\n';
      emit(*node, free_vars, body);
      delete_unused_values(*node, body);
    }
    if (body.empty()) body = "pass\n";
    std::optional<std::string> prologue = printer_.prologue(free_vars, return_annotation_);
    if (!prologue) throw Decline{};
    finish(body, *prologue, out);
    out.globals = std::move(globals_);
    out.type_globals = std::move(type_globals_);
    return out;
  }

 private:
  const std::string& name(const Node* node) {
    auto it = node_names_.find(node);
    if (it != node_names_.end()) return it->second;
    return node_names_.emplace(node, names_.create(node->name(), false)).first->second;
  }

  // fx's `_get_repr`; `plain`: Python's repr (inside dicts), which fx does not special-case.
  std::string repr(const Arg& arg, bool plain = false) {
    return std::visit(
        [&](const auto& v) -> std::string {
          using V = std::decay_t<decltype(v)>;
          if constexpr (std::is_same_v<V, None>) {
            return "None";
          } else if constexpr (std::is_same_v<V, Node*>) {
            return name(v);
          } else if constexpr (std::is_same_v<V, bool>) {
            return v ? "True" : "False";
          } else if constexpr (std::is_same_v<V, int64_t>) {
            return std::to_string(v);
          } else if constexpr (std::is_same_v<V, double>) {
            return python_float_repr(v);
          } else if constexpr (std::is_same_v<V, std::string>) {
            std::optional<std::string> text = python_str_repr(v);
            if (!text) throw Decline{};
            return *text;
          } else if constexpr (std::is_same_v<V, List>) {
            return "[" + joined(v.items, plain) + "]";
          } else if constexpr (std::is_same_v<V, Tuple>) {
            if (v.items.size() == 1) return "(" + repr(v.items[0], plain) + ",)";
            return "(" + joined(v.items, plain) + ")";
          } else if constexpr (std::is_same_v<V, Slice>) {
            return "slice(" + joined(v.items, plain) + ")";
          } else if constexpr (std::is_same_v<V, Dict>) {
            std::string out = "{";
            for (size_t i = 0; i < v.items.size(); ++i) {
              std::optional<std::string> key = python_str_repr(v.items[i].first);
              if (!key) throw Decline{};
              out += (i ? ", " : "") + *key + ": " + repr(v.items[i].second, true);
            }
            return out + "}";
          } else {
            std::optional<std::string> text = printer_.opaque(v, plain);
            if (!text) throw Decline{};
            return *text;
          }
        },
        arg.value);
  }

  std::string joined(const std::vector<Arg>& items, bool plain) {
    std::string out;
    for (size_t i = 0; i < items.size(); ++i) out += (i ? ", " : "") + repr(items[i], plain);
    return out;
  }

  std::string format_args(const Args& args, size_t first, const Kwargs& kwargs) {
    std::string out;
    for (size_t i = first; i < args.size(); ++i) out += (i > first ? ", " : "") + repr(args[i]);
    for (const auto& [key, value] : kwargs.items) {
      if (!out.empty()) out += ", ";
      out += key + " = " + repr(value);
    }
    return out;
  }

  // str.format(*items) for templates made of `{}` fields only.
  static std::string format(std::string_view pattern, const std::vector<std::string>& items) {
    std::string out;
    size_t next = 0;
    for (size_t i = 0; i < pattern.size(); ++i) {
      if (pattern.substr(i, 2) == "{}") {
        if (next >= items.size()) throw Decline{};  // fx raises IndexError
        out += items[next++];
        ++i;
      } else if (pattern[i] == '{' || pattern[i] == '}') {
        throw Decline{};
      } else {
        out += pattern[i];
      }
    }
    return out;
  }

  const CallTarget& call_target(Symbol target) {
    auto it = targets_.find(target);
    if (it != targets_.end()) return it->second;
    std::optional<CallTarget> spelled = printer_.call_target(target);
    if (!spelled) throw Decline{};
    return targets_.emplace(target, std::move(*spelled)).first->second;
  }

  // fx's `add_global`: one name per callable, allocated when first printed.
  std::string global_name(Symbol target, const CallTarget& spelled) {
    if (spelled.style == CallTarget::Style::Qualified) return spelled.text;
    auto it = global_names_.find(target);
    if (it != global_names_.end()) return it->second;
    std::string name = names_.create(spelled.text, spelled.builtin_object);
    globals_.emplace_back(name, target);
    return global_names_.emplace(target, name).first->second;
  }

  // Each order of evaluation below is fx's (f-strings left to right): names are allocated in
  // the order fx prints them.
  void emit(const Node& node, std::vector<std::string>& free_vars, std::string& body) {
    const Args& args = node.args();
    // fx spells the annotation first: a new global it needs takes its name before the node's.
    const std::string type = type_name(node);
    const std::string annotation = type.empty() ? "" : " : " + type;
    switch (node.kind()) {
      case NodeKind::Placeholder: {
        const std::string& target = node.target().str();
        std::string default_arg = args.empty() ? "" : " = " + repr(args[0]);
        free_vars.push_back(target + annotation + default_arg);
        std::string raw_name;
        for (char c : target)
          if (c != '*') raw_name += c;
        const std::string& own = name(&node);
        if (raw_name != own) body += own + " = " + raw_name + "\n";
        return;
      }
      case NodeKind::CallMethod: {
        if (args.empty()) throw Decline{};
        std::string line = name(&node) + annotation + " = ";
        line += format_target(repr(args[0]), node.target().str());
        body += line + "(" + format_args(args, 1, node.kwargs()) + ")";
        return;
      }
      case NodeKind::CallFunction: {
        const CallTarget& spelled = call_target(node.target());
        if (spelled.style == CallTarget::Style::Operator) {
          std::string line = name(&node) + annotation + " = ";
          body += line + format(spelled.text, reprs(args));
          return;
        }
        if (spelled.style == CallTarget::Style::Inplace) {
          std::string statement = format(spelled.text, reprs(args));
          std::string line = statement + ";  " + name(&node) + annotation + " = ";
          body += line + repr(args.at(0));
          return;
        }
        std::string function = global_name(node.target(), spelled);
        if (function == "getattr") {
          if (args.size() < 2) throw Decline{};  // fx raises IndexError
          if (args.size() == 2 && args[1].is<std::string>() &&
              is_identifier(args[1].as<std::string>())) {
            std::string line = name(&node) + annotation + " = ";
            body += line + format_target(repr(args[0]), args[1].as<std::string>());
            return;
          }
        }
        std::string line = name(&node) + annotation + " = " + function + "(";
        body += line + format_args(args, 0, node.kwargs()) + ")";
        return;
      }
      case NodeKind::CallModule: {
        std::string line = name(&node) + annotation + " = ";
        line += format_target(options_.root_module, node.target().str()) + "(";
        body += line + format_args(args, 0, node.kwargs()) + ")";
        return;
      }
      case NodeKind::GetAttr: {
        std::string line = name(&node) + annotation + " = ";
        body += line + format_target(options_.root_module, node.target().str());
        return;
      }
      case NodeKind::Output:
        if (args.empty()) throw Decline{};
        if (!type.empty()) return_annotation_ = " -> " + type;
        body += "return " + options_.output_prefix + repr(args[0]) + options_.output_suffix;
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
    if (it != type_names_.end()) return it->second;
    std::string name = names_.create(spelled.text, spelled.builtin_object);
    type_globals_.emplace_back(name, type->key);
    return type_names_.emplace(type->key, name).first->second;
  }

  std::vector<std::string> reprs(const Args& args) {
    std::vector<std::string> out;
    for (const Arg& arg : args) out.push_back(repr(arg));
    return out;
  }

  // fx frees each value after its last use: walking the nodes backwards, the first user seen
  // of each input is its last; a user lists its inputs in the order it first reads them.
  void record_last_uses() {
    std::unordered_set<const Node*> seen;
    for (Node* user = graph_.last(); user; user = user->prev()) {
      std::unordered_set<const Node*> inputs;
      user->for_each_input([&](Node* input) {
        if (inputs.insert(input).second && seen.insert(input).second)
          last_uses_[user].push_back(input);
      });
    }
  }

  void delete_unused_values(const Node& user, std::string& body) {
    if (user.kind() == NodeKind::Placeholder) return;
    if (user.kind() == NodeKind::Output) {
      body += '\n';
      return;
    }
    std::vector<const Node*> dead;
    if (auto it = last_uses_.find(&user); it != last_uses_.end()) dead = it->second;
    if (user.users().empty()) dead.push_back(&user);
    if (dead.empty()) {
      body += '\n';
      return;
    }
    body += ";  ";
    for (const Node* node : dead) body += name(node) + " = ";
    body += "None\n";
  }

  // fx's last step: drop the `# COUNTER: i` lines, map each remaining line to the node index of
  // the counter before it, strip leading blank lines and indent the body.
  static void finish(const std::string& body, const std::string& prologue, PythonSource& out) {
    int64_t prologue_len = 1;
    for (char c : prologue) prologue_len += c == '\n';
    out.lineno_start = prologue_len;
    std::vector<std::string_view> lines;
    const size_t line_count = std::count(body.begin(), body.end(), '\n') + 1;
    lines.reserve(line_count);
    out.node_index.reserve(line_count);
    std::optional<int64_t> current;
    std::string_view rest = body;
    while (true) {
      size_t end = rest.find('\n');
      std::string_view line = rest.substr(0, end);
      if (std::optional<int64_t> counter = counter_of(line)) {
        current = counter;
      } else {
        out.node_index.push_back(current.value_or(-1));
        lines.push_back(line);
      }
      if (end == std::string_view::npos) break;
      rest.remove_prefix(end + 1);
    }
    size_t first = 0;
    while (first < lines.size() && lines[first].empty()) ++first;
    // str.lstrip("\n") of the joined lines: a wholly blank body keeps one empty line.
    if (first == lines.size()) first = lines.size() - 1;
    std::string code;
    code.reserve(body.size() + 4 * lines.size());
    for (size_t i = first; i < lines.size(); ++i) {
      if (i > first) code += '\n';
      code += "    ";
      code += lines[i];
    }
    out.src = "\n\n\n" + prologue + "\n" + code;
    out.prologue_start = 4;
  }

  // The number of fx's `# COUNTER: (\d+)` searched anywhere in `line`.
  static std::optional<int64_t> counter_of(std::string_view line) {
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

  const Graph& graph_;
  const SourceOptions& options_;
  SourcePrinter& printer_;
  Namespace names_;
  std::unordered_map<const Node*, std::string> node_names_;
  std::unordered_map<const Node*, std::vector<const Node*>> last_uses_;
  std::unordered_map<Symbol, CallTarget> targets_;
  std::unordered_map<Symbol, std::string> global_names_;
  std::vector<std::pair<std::string, Symbol>> globals_;
  std::unordered_map<uint64_t, std::string> type_names_;
  std::vector<std::pair<std::string, uint64_t>> type_globals_;
  std::string return_annotation_;
};

}  // namespace

std::string python_float_repr(double value) {
  if (std::isnan(value)) return "nan";
  if (std::isinf(value)) return value > 0 ? "inf" : "-inf";
  // The shortest digits that round-trip, as Python's repr picks them; then Python's layout:
  // positional for decimal exponents -4 < decpt <= 16, scientific (e-05, e+16) otherwise.
  char buffer[64];
  auto [end, error] =
      std::to_chars(buffer, buffer + sizeof buffer, value, std::chars_format::scientific);
  std::string_view text(buffer, end - buffer);
  std::string sign;
  if (text[0] == '-') {
    sign = "-";
    text.remove_prefix(1);
  }
  size_t e = text.find('e');
  std::string digits;
  for (char c : text.substr(0, e))
    if (c != '.') digits += c;
  int exponent = 0;
  std::from_chars(text.data() + e + (text[e + 1] == '+' ? 2 : 1), text.data() + text.size(),
                  exponent);
  int decpt = exponent + 1;
  int n = static_cast<int>(digits.size());
  if (decpt <= -4 || decpt > 16) {
    std::string out = sign;
    out += digits[0];
    if (n > 1) out += "." + digits.substr(1);
    int shown = decpt - 1;
    out += shown < 0 ? "e-" : "e+";
    std::string magnitude = std::to_string(shown < 0 ? -shown : shown);
    if (magnitude.size() < 2) magnitude.insert(magnitude.begin(), '0');
    return out + magnitude;
  }
  if (decpt <= 0) return sign + "0." + std::string(-decpt, '0') + digits;
  if (decpt >= n) return sign + digits + std::string(decpt - n, '0') + ".0";
  return sign + digits.substr(0, decpt) + "." + digits.substr(decpt);
}

std::optional<std::string> python_str_repr(std::string_view text) {
  if (!is_ascii(text)) return std::nullopt;
  bool single = text.find('\'') != std::string_view::npos;
  bool dbl = text.find('"') != std::string_view::npos;
  char quote = single && !dbl ? '"' : '\'';
  std::string out(1, quote);
  static constexpr char hex[] = "0123456789abcdef";
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
  return out + quote;
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
