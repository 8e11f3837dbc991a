// Typed readers of a pass's options (`from_options`): one wording for every pass's errors, and
// no pass repeats the lookup and type check.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "ir/program.h"

namespace fxopt {

// A required string option; throws std::invalid_argument naming it if missing or not a string.
std::string string_option(const Dict& options, std::string_view name);
// These give `fallback` where the option is absent and throw std::invalid_argument naming it
// where it has another type.
std::string string_option(const Dict& options, std::string_view name, std::string fallback);
int64_t integer_option(const Dict& options, std::string_view name, int64_t fallback);
bool bool_option(const Dict& options, std::string_view name, bool fallback);

// The int8 passes' float baseline ("float32" or "bfloat16"); throws std::invalid_argument
// naming the option otherwise.
void check_compare_with(const std::string& compare_with);

}  // namespace fxopt
