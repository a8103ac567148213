// Host side of TMA (the Hopper tensor memory accelerator): building the tensor map that a
// cp.async.bulk.tensor copy reads its tensor's address, shape and strides from. The geometry is
// common/hopper_encoding.h's (section 7, CPU-tested); this file only hands it to the driver.
//
// cuTensorMapEncodeTiled is a driver API function. It is reached through the runtime's
// cudaGetDriverEntryPointByVersion, so nothing links against libcuda: the program keeps the
// runtime-only dependency every other stage has.
#pragma once

#include <cuda.h>  // CUtensorMap (a 128-byte opaque struct; header only)

#include "common/params.h"

namespace fa {

// Encodes the map of one [batch, seq, heads, head_dim] operand of `params` for copies of
// box_rows x 64 elements with the 128-byte swizzle. `what` names the tensor in error messages.
// Fails (no map) if the driver lacks the function or rejects the geometry.
Status encode_attention_tensor_map(CUtensorMap* map, const TensorView& view, int64_t batch, int64_t seq,
                                   int64_t heads, int64_t head_dim, int box_rows, const char* what,
                                   const char* stage_name);

}  // namespace fa
