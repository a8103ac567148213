// The launcher contract for sequence lengths, without a GPU: a stage that declares "any_length" in
// its stage.json accepts every seq_q, seq_kv >= 1; every other stage rejects a length that is not a
// multiple of its tiles, with a message that says so. Only validate_params is called (the tensor
// pointers are fake: aligned, never dereferenced).
#include <cstdint>
#include <string>

#include "common/params.h"
#include "common/registry.h"
#include "fa_catch.h"
#include "valid_params.h"

using fa::AttentionParams;
using fa::StageInfo;

namespace {

bool declares_any_length(const StageInfo& stage) {
  return (stage.features & fa::kFeatureAnyLength) != 0;
}

constexpr int64_t kLengths[] = {1, 7, 63, 64, 65, 127, 129, 1000, 4097};

}  // namespace

TEST_CASE("at least one registered stage declares any_length", "[validation][any_length]") {
  int declaring = 0;
  for (const StageInfo* stage : fa::registered_stages()) declaring += declares_any_length(*stage) ? 1 : 0;
  CHECK(declaring > 0);
}

TEST_CASE("a stage that declares any_length accepts every length; the others reject non-multiples",
          "[validation][any_length]") {
  for (const StageInfo* stage : fa::registered_stages()) {
    for (int64_t seq_q : kLengths) {
      for (int64_t seq_kv : kLengths) {
        const fa::Status status = fa::validate_params(fa_test::valid_params(*stage, 2, 3, seq_q, seq_kv), *stage);
        INFO("stage " << stage->name << " (block_q " << stage->block_q << ", block_kv " << stage->block_kv
                      << "), seq_q " << seq_q << ", seq_kv " << seq_kv << ": \"" << status.message << "\"");
        if (declares_any_length(*stage)) {
          CHECK(status.ok());
        } else if (seq_q % stage->block_q != 0) {
          CHECK_FALSE(status.ok());
          CHECK_THAT(status.message,
                     Catch::Contains("seq_q " + std::to_string(seq_q) + " is not a multiple"));
        } else if (seq_kv % stage->block_kv != 0) {
          CHECK_FALSE(status.ok());
          CHECK_THAT(status.message,
                     Catch::Contains("seq_kv " + std::to_string(seq_kv) + " is not a multiple"));
        } else {
          CHECK(status.ok());
        }
      }
    }
  }
}

TEST_CASE("any_length: the grid limit counts the partial query block", "[validation][any_length]") {
  for (const StageInfo* stage : fa::registered_stages()) {
    if (!declares_any_length(*stage)) continue;
    INFO("stage " << stage->name);
    // 1024 x 1024 x 2048 = 2^31 query blocks once the partial last block is counted: one too many
    // (counting only whole blocks would give 2^31 - 2^20 and accept it).
    const int64_t seq_q = int64_t{stage->block_q} * 2048 - 1;
    const fa::Status too_many = fa::validate_params(fa_test::valid_params(*stage, 1024, 1024, seq_q, 64), *stage);
    INFO("\"" << too_many.message << "\"");
    CHECK_FALSE(too_many.ok());
    CHECK_THAT(too_many.message, Catch::Contains("2^31-1"));
    // 2047 blocks per (batch, head), the last one partial, fit.
    const fa::Status fits =
        fa::validate_params(fa_test::valid_params(*stage, 1024, 1024, int64_t{stage->block_q} * 2047 - 1, 64), *stage);
    INFO("\"" << fits.message << "\"");
    CHECK(fits.ok());
  }
}

TEST_CASE("any_length still rejects lengths below 1", "[validation][any_length]") {
  for (const StageInfo* stage : fa::registered_stages()) {
    if (!declares_any_length(*stage)) continue;
    for (int64_t bad : {int64_t{0}, int64_t{-1}, int64_t{-65}}) {
      INFO("stage " << stage->name << ", length " << bad);
      const fa::Status q = fa::validate_params(fa_test::valid_params(*stage, 2, 3, bad, 65), *stage);
      const fa::Status kv = fa::validate_params(fa_test::valid_params(*stage, 2, 3, 65, bad), *stage);
      CHECK_THAT(q.message, Catch::Contains("sizes must be positive"));
      CHECK_THAT(kv.message, Catch::Contains("sizes must be positive"));
    }
  }
}
