#include "common/tensor_map.h"

#include <cudaTypedefs.h>  // PFN_cuTensorMapEncodeTiled_v12000

#include <sstream>
#include <string>

#include "common/hopper_encoding.h"

namespace fa {
namespace {

// The driver's cuTensorMapEncodeTiled (its CUDA 12.0 signature), looked up once per process.
PFN_cuTensorMapEncodeTiled_v12000 encode_tiled_entry_point() {
  static const PFN_cuTensorMapEncodeTiled_v12000 entry = [] {
    void* function = nullptr;
    cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
    const cudaError_t status = cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &function, 12000,
                                                               cudaEnableDefault, &found);
    return status == cudaSuccess && found == cudaDriverEntryPointSuccess
               ? reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(function)
               : nullptr;
  }();
  return entry;
}

}  // namespace

Status encode_attention_tensor_map(CUtensorMap* map, const TensorView& view, int64_t batch, int64_t seq,
                                   int64_t heads, int64_t head_dim, int box_rows, const char* what,
                                   const char* stage_name) {
  const PFN_cuTensorMapEncodeTiled_v12000 encode = encode_tiled_entry_point();
  if (encode == nullptr) {
    return Status::error(std::string(stage_name) +
                         ": the CUDA driver does not provide cuTensorMapEncodeTiled (TMA needs a CUDA 12 driver)");
  }
  const TmaTileGeometry g = tma_tile_geometry(batch, seq, heads, head_dim, view.batch_stride, view.seq_stride,
                                              view.head_stride, dtype_bytes(view.dtype), box_rows);
  const cuuint32_t element_strides[kTmaRank] = {1, 1, 1, 1};  // every element of the box, no skipping
  const CUresult result =
      encode(map, view.dtype == DType::kFloat16 ? CU_TENSOR_MAP_DATA_TYPE_FLOAT16 : CU_TENSOR_MAP_DATA_TYPE_BFLOAT16,
             kTmaRank, view.data, g.dims, g.strides_bytes, g.box, element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE,
             CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (result != CUDA_SUCCESS) {
    std::ostringstream err;
    err << stage_name << ": cannot encode the TMA tensor map of " << what << " (CUresult " << static_cast<int>(result)
        << "; dims " << g.dims[0] << " x " << g.dims[1] << " x " << g.dims[2] << " x " << g.dims[3]
        << ", byte strides " << g.strides_bytes[0] << ", " << g.strides_bytes[1] << ", " << g.strides_bytes[2] << ")";
    return Status::error(err.str());
  }
  return Status::success();
}

}  // namespace fa
