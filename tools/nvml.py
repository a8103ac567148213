"""Read-only NVML readings (SM clock, power, temperature, clock-event reasons) through ctypes, so
that tools/interleaved.py --readings can say at which clock each launch ran. Nothing is set.

NVML ships with the driver (libnvidia-ml.so.1); no Python package is needed. The GPU is NVML's
index 0 unless CUDA_VISIBLE_DEVICES names a single index first.
"""

import ctypes
import os

NVML_CLOCK_SM = 1
NVML_TEMPERATURE_GPU = 0
# nvmlDeviceGetCurrentClocksEventReasons bits (nvml.h) this project has seen on the H200.
REASONS = {0x1: "idle", 0x4: "sw_power_cap", 0x8: "hw_slowdown", 0x20: "sw_thermal", 0x40: "hw_thermal",
           0x80: "hw_power_brake"}


class NvmlError(RuntimeError):
    pass


class Nvml:
    def __init__(self):
        try:
            self.lib = ctypes.CDLL("libnvidia-ml.so.1")
        except OSError as e:
            raise NvmlError("libnvidia-ml.so.1 not loadable: %s" % e)
        self._check(self.lib.nvmlInit_v2(), "nvmlInit_v2")
        visible = os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",")[0].strip()
        index = int(visible) if visible.isdigit() else 0
        self.handle = ctypes.c_void_p()
        self._check(self.lib.nvmlDeviceGetHandleByIndex_v2(ctypes.c_uint(index), ctypes.byref(self.handle)),
                    "nvmlDeviceGetHandleByIndex_v2")

    @staticmethod
    def _check(code, what):
        if code != 0:
            raise NvmlError("%s returned NVML error %d" % (what, code))

    def _uint(self, fn, *args):
        value = ctypes.c_uint()
        self._check(getattr(self.lib, fn)(self.handle, *args, ctypes.byref(value)), fn)
        return value.value

    def reading(self):
        """(sm_clock_mhz, power_w, temperature_c, reasons): one instant's reading; power is the
        driver's own (averaged) figure."""
        reasons = ctypes.c_ulonglong()
        self._check(self.lib.nvmlDeviceGetCurrentClocksEventReasons(self.handle, ctypes.byref(reasons)),
                    "nvmlDeviceGetCurrentClocksEventReasons")
        names = "+".join(n for bit, n in REASONS.items() if reasons.value & bit) or "none"
        return (self._uint("nvmlDeviceGetClockInfo", ctypes.c_int(NVML_CLOCK_SM)),
                self._uint("nvmlDeviceGetPowerUsage") / 1000.0,
                self._uint("nvmlDeviceGetTemperature", ctypes.c_int(NVML_TEMPERATURE_GPU)), names)
