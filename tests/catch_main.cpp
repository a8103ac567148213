// Catch2's own main for the CPU tests, compiled once and shared by every CPU test program.
#define CATCH_CONFIG_MAIN
#include <catch2/catch.hpp>
