# Helpers of the test scripts that install flashattn and build against it or import it (run_consumer.cmake,
# tests/c_api/run_c_api.cmake, tests/python/run_install.cmake); include() them from a `cmake -P` script.

# Runs a command; fails the script with its output if it fails. Its output is left in `output`.
function(run)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE status OUTPUT_VARIABLE output ERROR_VARIABLE output)
  if(NOT status EQUAL 0)
    list(JOIN ARGN " " command)
    message(FATAL_ERROR "failed (${status}): ${command}\n${output}")
  endif()
  set(output "${output}" PARENT_SCOPE)
endfunction()

# Writes to `file` the code of README.md's ```<fence> block between <!-- <marker>:begin --> and
# <!-- <marker>:end -->, so that the tests compile the README's examples as they are.
function(extract_readme_example source_dir marker fence file)
  file(READ ${source_dir}/README.md readme)
  string(FIND "${readme}" "<!-- ${marker}:begin -->" begin)
  string(FIND "${readme}" "<!-- ${marker}:end -->" end)
  if(begin EQUAL -1 OR end EQUAL -1 OR end LESS begin)
    message(FATAL_ERROR "README.md has no <!-- ${marker}:begin --> ... <!-- ${marker}:end --> block")
  endif()
  math(EXPR length "${end} - ${begin}")
  string(SUBSTRING "${readme}" ${begin} ${length} block)
  if(NOT block MATCHES "```${fence}\n(.*)```")
    message(FATAL_ERROR "README.md's ${marker} block holds no ```${fence} fence")
  endif()
  file(WRITE ${file} "${CMAKE_MATCH_1}")
endfunction()
