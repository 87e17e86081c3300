# The SIMD building blocks shared by every kernel (src/simd/): most are per-target -inl.h headers compiled
# into the kernels' own translation units; targets.cc holds the test hooks, working_memory.cc the blocks of
# working memory a calling thread keeps between calls. Every kernel translation unit of
# the library is compiled for every Highway target (cmake/simd_targets.cmake); the best runs.
target_sources(flashattn PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/targets.cc
  ${CMAKE_CURRENT_LIST_DIR}/working_memory.cc
)
flashattn_compile_for_every_simd_target(flashattn)
