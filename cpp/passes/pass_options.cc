#include "passes/pass_options.h"

#include <stdexcept>

namespace fxopt {
namespace {

template <class T>
const Arg* typed(const Dict& options, std::string_view name, const char* what) {
  const Arg* value = options.find(name);
  if (value && !value->is<T>())
    throw std::invalid_argument("option '" + std::string(name) + "' must be " + what);
  return value;
}

}  // namespace

std::string string_option(const Dict& options, std::string_view name) {
  const Arg* value = typed<std::string>(options, name, "a string");
  if (!value) throw std::invalid_argument("option '" + std::string(name) + "' must be a string");
  return value->as<std::string>();
}

std::string string_option(const Dict& options, std::string_view name, std::string fallback) {
  const Arg* value = typed<std::string>(options, name, "a string");
  return value ? value->as<std::string>() : std::move(fallback);
}

int64_t integer_option(const Dict& options, std::string_view name, int64_t fallback) {
  const Arg* value = typed<int64_t>(options, name, "an integer");
  return value ? value->as<int64_t>() : fallback;
}

bool bool_option(const Dict& options, std::string_view name, bool fallback) {
  const Arg* value = typed<bool>(options, name, "a bool");
  return value ? value->as<bool>() : fallback;
}

void check_compare_with(const std::string& compare_with) {
  if (compare_with != "float32" && compare_with != "bfloat16")
    throw std::invalid_argument(
        "option 'compare_with' must be \"float32\" or \"bfloat16\", not \"" + compare_with + "\"");
}

}  // namespace fxopt
