# The IO model (src/io_model/): closed-form traffic per algorithm, the counted runs (reference algorithms,
# the fused kernel's and decode's loops) and the machine measurements (cache size, FMA peak, bandwidth)
# that `flashattn io` prints next to them.
target_sources(flashattn PRIVATE
  ${PROJECT_SOURCE_DIR}/src/io_model/io_model.cc
  ${PROJECT_SOURCE_DIR}/src/io_model/counted_fused.cc
  ${PROJECT_SOURCE_DIR}/src/io_model/counted_decode.cc
  ${PROJECT_SOURCE_DIR}/src/io_model/fused_lanes.cc
  ${PROJECT_SOURCE_DIR}/src/io_model/machine.cc
  ${PROJECT_SOURCE_DIR}/src/io_model/bandwidth.cc
  ${PROJECT_SOURCE_DIR}/src/io_model/fma_peak.cc
  ${PROJECT_SOURCE_DIR}/src/io_model/peak_rss.cc
)
