// The Python module: CUDA devices: whether the build has CUDA, the devices, why none is usable.
#include "common.hpp"

using namespace nb::literals;

namespace ndtcu::python {

void define_devices(nb::module_& m) {
  m.def("cuda_compiled", &cuda_compiled, "True when this build includes the CUDA backend.");
  m.def(
      "cuda_devices",
      [] {
        nb::list out;
        for (const CudaDeviceInfo& d : cuda_devices()) {
          nb::dict e;
          e["index"] = d.index;
          e["name"] = d.name;
          e["compute_capability"] = std::to_string(d.compute_major) + "." + std::to_string(d.compute_minor);
          e["multiprocessors"] = d.multiprocessors;
          e["total_memory_bytes"] = d.total_memory_bytes;
          e["free_memory_bytes"] = d.free_memory_bytes;
          out.append(e);
        }
        return out;
      },
      "The CUDA devices backend='cuda' can use, as dicts (the fields of `ndtcu --json devices`); empty without "
      "a CUDA build, driver or device.");
  m.def("cuda_unavailable_reason", &cuda_unavailable_reason,
        "Why no CUDA device is usable (the build or the runtime's error), or '' when one is.");
}

}  // namespace ndtcu::python
