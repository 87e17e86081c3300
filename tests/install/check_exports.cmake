# Checks the dynamic symbol table of a shared libflashattn: it exports the public API of include/flashattn/
# and nothing else. Run as a script:
#   cmake -DLIBRARY=<libflashattn.so> -DNM=<nm> -P check_exports.cmake
# Every defined dynamic symbol, demangled, must be a function of namespace flashattn (flashattn::name(...)),
# a member function of one of its public types (flashattn::Type::name(...)), or Error's type information.
# Named failures: Highway (hwy::), the per-target SIMD namespaces (N_AVX2, N_AVX3, N_SSE4, ...), any
# namespace inside flashattn (kernels::, reference::, decoding::, backward_kernel::, varlen::, ...), the
# measurement code (IO model, peak, bandwidth, peak RSS) and anything outside namespace flashattn.
cmake_minimum_required(VERSION 3.25)

foreach(var LIBRARY NM)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "check_exports.cmake needs -D${var}=...")
  endif()
endforeach()
execute_process(COMMAND ${NM} -D --defined-only -C ${LIBRARY} RESULT_VARIABLE status OUTPUT_VARIABLE listing
                ERROR_VARIABLE error)
if(NOT status EQUAL 0)
  message(FATAL_ERROR "${NM} -D --defined-only -C ${LIBRARY} failed (${status}): ${error}")
endif()

set(failures "")
set(names "")
string(REPLACE "\n" ";" lines "${listing}")
foreach(line IN LISTS lines)
  if(line STREQUAL "")
    continue()
  endif()
  # "<address> <type> <demangled name>"; the qualified name is what precedes the parameter list.
  if(NOT line MATCHES "^[0-9a-fA-F]* *[A-Za-z] (.*)$")
    list(APPEND failures "unreadable line: ${line}")
    continue()
  endif()
  set(symbol "${CMAKE_MATCH_1}")
  string(REGEX REPLACE "\\(.*$" "" name "${symbol}")
  list(APPEND names "${name}")
  if(name MATCHES "hwy::")
    list(APPEND failures "Highway: ${symbol}")
  elseif(name MATCHES "(^|::)N_[A-Z0-9_]+::")
    list(APPEND failures "per-target SIMD code: ${symbol}")
  elseif(name MATCHES "io_model|IoModel|[Pp]eak|[Bb]andwidth|[Mm]easure|Counted|VmHWM")
    list(APPEND failures "measurement code: ${symbol}")
  elseif(name MATCHES "^flashattn::[a-z_][a-z0-9_]*::")
    list(APPEND failures "internal namespace: ${symbol}")
  elseif(NOT (name MATCHES "^flashattn::[a-z_][a-z0-9_]*$"
              OR name MATCHES "^flashattn::[A-Z][A-Za-z0-9]*::~?[A-Za-z_][A-Za-z0-9_]*$"
              OR name MATCHES "^(typeinfo|typeinfo name|vtable) for flashattn::Error$"
              OR name MATCHES "^flashattn_[a-z0-9_]+$"))  # the C API
    list(APPEND failures "not public API: ${symbol}")
  endif()
endforeach()

# The list cannot pass by being empty: the entry points must be there.
foreach(expected flashattn::forward flashattn::forward_varlen flashattn::backward flashattn::backward_varlen
                 flashattn::decode flashattn::merge_attention_states flashattn::validate
                 flashattn::materialize_dropout_mask flashattn::choose_num_splits flashattn::to_string
                 flashattn::size_of flashattn::parse_algorithm "typeinfo for flashattn::Error"
                 flashattn_forward flashattn_decode flashattn_backward flashattn_last_error flashattn_version)
  if(NOT expected IN_LIST names)
    list(APPEND failures "missing: ${expected}")
  endif()
endforeach()

list(LENGTH names count)
if(failures)
  list(JOIN failures "\n  " report)
  message(FATAL_ERROR "${LIBRARY} exports what it should not, or lacks the public API:\n  ${report}")
endif()
message(STATUS "${LIBRARY}: ${count} exported symbols, all public API")
