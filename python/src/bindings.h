// One registration function per concern of the _core module (module.cc calls them all).
#ifndef FLASHATTN_PYTHON_BINDINGS_H_
#define FLASHATTN_PYTHON_BINDINGS_H_

#include <pybind11/pybind11.h>

namespace flashattn::python {

namespace py = pybind11;

void RegisterForward(py::module_& m);   // forward.cc: flash_attn_func
void RegisterBackward(py::module_& m);  // backward.cc: flash_attn_backward
void RegisterVarlen(py::module_& m);    // varlen.cc: flash_attn_varlen_func and its backward
void RegisterKvcache(py::module_& m);   // kvcache.cc: flash_attn_with_kvcache
void RegisterMerge(py::module_& m);     // merge.cc: merge_attention_states
void RegisterIndexer(py::module_& m);   // indexer.cc: lightning_indexer
void RegisterSdpa(py::module_& m);      // sdpa.cc: scaled_dot_product_attention and its backward
void RegisterWorkingMemory(py::module_& m);  // working_memory.cc: the limit and release of kept working memory

}  // namespace flashattn::python

#endif  // FLASHATTN_PYTHON_BINDINGS_H_
