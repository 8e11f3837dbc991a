#include "passes/pass_options.h"

#include <gtest/gtest.h>

#include <stdexcept>
#include <string>

namespace fxopt {
namespace {

// Whether `call` throws std::invalid_argument whose message names `option`.
template <class F>
bool refuses_naming(F call, const std::string& option) {
  try {
    call();
  } catch (const std::invalid_argument& error) {
    return std::string(error.what()).find("'" + option + "'") != std::string::npos;
  }
  return false;
}

TEST(PassOptions, GiveTheValueOrTheFallback) {
  Dict options{{{"name", "x"}, {"count", int64_t{3}}, {"flag", true}}};
  EXPECT_EQ(string_option(options, "name"), "x");
  EXPECT_EQ(string_option(options, "name", "y"), "x");
  EXPECT_EQ(string_option(options, "absent", "y"), "y");
  EXPECT_EQ(integer_option(options, "count", 7), 3);
  EXPECT_EQ(integer_option(options, "absent", 7), 7);
  EXPECT_TRUE(bool_option(options, "flag", false));
  EXPECT_FALSE(bool_option(options, "absent", false));
}

TEST(PassOptions, WrongTypesAndMissingRequiredOnesAreRefusedByName) {
  Dict options{{{"name", int64_t{1}}, {"count", "three"}, {"flag", int64_t{1}}}};
  EXPECT_TRUE(refuses_naming([&] { string_option(options, "name"); }, "name"));
  EXPECT_TRUE(refuses_naming([&] { string_option(options, "name", "y"); }, "name"));
  EXPECT_TRUE(refuses_naming([&] { string_option(options, "absent"); }, "absent"));
  EXPECT_TRUE(refuses_naming([&] { integer_option(options, "count", 7); }, "count"));
  // A bool is no integer and an integer no bool: no silent conversion either way.
  EXPECT_TRUE(refuses_naming([&] { bool_option(options, "flag", false); }, "flag"));
  EXPECT_TRUE(refuses_naming([&] { integer_option(Dict{{{"n", true}}}, "n", 0); }, "n"));
}

TEST(PassOptions, CompareWithIsAFloatDtypeTheInt8PassesTime) {
  EXPECT_NO_THROW(check_compare_with("float32"));
  EXPECT_NO_THROW(check_compare_with("bfloat16"));
  EXPECT_TRUE(refuses_naming([] { check_compare_with("float16"); }, "compare_with"));
}

}  // namespace
}  // namespace fxopt
