# The fast kernels, added to the flashattn library target (included by the top-level CMakeLists.txt).
target_sources(flashattn PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/tiling.cc
)
