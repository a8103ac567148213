// A stand-in for the NVIDIA driver library, built as libcuda.so.1 in its own folder: with that
// folder on LD_LIBRARY_PATH, the CUDA runtime loads it instead of the real driver and finds a driver
// that supports CUDA 11.4 only, older than any runtime this project builds with (CUDA 12 or 13).
// test_device_probe's "[fake_old_driver]" case runs against it. The runtime asks for the driver's
// version first and stops there with cudaErrorInsufficientDriver, so no other entry point is needed.
namespace {
constexpr int kCudaSuccess = 0;          // CUDA_SUCCESS
constexpr int kReportedVersion = 11040;  // CUDA 11.4
}  // namespace

extern "C" int cuDriverGetVersion(int* version) {
  *version = kReportedVersion;
  return kCudaSuccess;
}
