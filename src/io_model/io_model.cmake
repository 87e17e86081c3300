# The IO model (src/io_model/): closed-form traffic per algorithm, the instrumented reference run and the
# machine measurements (cache size, FMA peak, bandwidth) that `flashattn io` prints next to them.
target_sources(flashattn PRIVATE
  ${PROJECT_SOURCE_DIR}/src/io_model/io_model.cc
  ${PROJECT_SOURCE_DIR}/src/io_model/machine.cc
  ${PROJECT_SOURCE_DIR}/src/io_model/bandwidth.cc
  ${PROJECT_SOURCE_DIR}/src/io_model/fma_peak.cc
  ${PROJECT_SOURCE_DIR}/src/io_model/peak_rss.cc
)
