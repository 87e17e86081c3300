# The C API (include/flashattn/c_api.h), compiled into the flashattn library (included by the top-level
# CMakeLists.txt). flashattn_version() returns the project version given here.
target_sources(flashattn PRIVATE ${PROJECT_SOURCE_DIR}/src/c_api/c_api.cc ${PROJECT_SOURCE_DIR}/src/c_api/convert.cc)
set_source_files_properties(${PROJECT_SOURCE_DIR}/src/c_api/c_api.cc PROPERTIES
                            COMPILE_DEFINITIONS FLASHATTN_VERSION="${PROJECT_VERSION}")
