// The one Catch2 include of every test source: Catch2 3 (find_package(Catch2 3), what newer Debian
// and Ubuntu ship) or the single header of Catch2 2.13, as tests/CMakeLists.txt found it and said
// with FA_CATCH2_MAJOR. The tests are written in the 2.x spelling; below, the few names that 3.x
// moved are given back under their 2.x names:
//
//   Approx(x)                    3.x: Catch::Approx
//   Catch::Contains(text)        3.x: Catch::Matchers::ContainsSubstring (its Contains is for ranges)
//   Catch::StartsWith(text)      3.x: Catch::Matchers::StartsWith
//
// TEST_CASE, SECTION, REQUIRE, CHECK, REQUIRE_FALSE, CHECK_THAT, INFO and WARN are the same in both.
// A test program's main (tests/catch_main.cpp, tests/gpu_main.cpp) defines CATCH_CONFIG_RUNNER
// before this include, which 2.x needs to compile its implementation there and 3.x ignores (its
// implementation is the Catch2 library), and runs Catch::Session.
#pragma once

#if !defined(FA_CATCH2_MAJOR)
#error "FA_CATCH2_MAJOR is not defined: build the tests through tests/CMakeLists.txt (it finds Catch2)"
#elif FA_CATCH2_MAJOR == 3

#include <catch2/catch_approx.hpp>
#include <catch2/catch_session.hpp>
#include <catch2/catch_test_macros.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>
#include <string>

using Catch::Approx;

namespace Catch {
using Matchers::StartsWith;
inline Matchers::StringContainsMatcher Contains(const std::string& text) {
  return Matchers::ContainsSubstring(text);
}
}  // namespace Catch

#elif FA_CATCH2_MAJOR == 2

#include <catch2/catch.hpp>

#else
#error "FA_CATCH2_MAJOR must be 2 or 3"
#endif
