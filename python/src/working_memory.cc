// The working memory calling threads keep between calls (include/flashattn/working_memory.h): its limit per
// thread, its release, and what is kept now.
#include <cstddef>

#include "bindings.h"
#include "flashattn/working_memory.h"

namespace flashattn::python {

void RegisterWorkingMemory(py::module_& m) {
  m.def("set_working_memory_limit", &set_working_memory_limit, py::kw_only(), py::arg("bytes_per_thread"),
        "Sets the bytes each calling thread keeps between calls and trims what every thread keeps to it.");
  m.def("working_memory_limit", &working_memory_limit, "The bytes each calling thread may keep between calls.");
  m.def("release_working_memory", &release_working_memory, "Frees the working memory every thread keeps.");
  m.def("retained_working_memory", &retained_working_memory, "The bytes all threads keep now, together.");
}

}  // namespace flashattn::python
