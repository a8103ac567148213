// The main of every CPU test program, compiled once and shared by all of them. Catch returns the
// number of failed assertions; the exit status is 0 or 1, never a count that a SKIP_RETURN_CODE
// could take for "skipped".
#define CATCH_CONFIG_RUNNER
#include "fa_catch.h"

int main(int argc, char** argv) {
  const int failed = Catch::Session().run(argc, argv);
  return failed == 0 ? 0 : 1;
}
