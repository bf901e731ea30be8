# The layering check: fails when a quoted #include points up a layer, across to a sibling, or nowhere.
#
#   cmake -DSOURCE_DIR=<repo> -P cmake/check_layers.cmake
#
# Prints one line per violation, then "layering: N files, M includes checked, K violations"; K > 0 is a fatal error.
# Registered as the ctest `layering` (tests/CMakeLists.txt). Plain CMake so that it runs wherever the project builds.
cmake_minimum_required(VERSION 3.24)

# ---- The layer table. It mirrors STYLE.md item 3 and docs/architecture.md: change all three together. ----------
# "folder/=height", bottom to top. A file may include its own layer or a lower one. Layers at the same height are
# siblings and may not include each other (tools/ and examples/). A file belongs to the longest folder that matches.
set(STRATA_LAYERS
    "core/=0"                # errors, logging, env, dtype, the Device seam (and the generated core/config.h)
    "collectives/=1"         # the Communicator seam
    "runtime/bootstrap/=2"
    "runtime/parallel/=3"
    "runtime/sharding/=4"
    "runtime/tensor/=5"      # tensor parallelism as a library: layers beside their collectives
    "runtime/context/=5"     # context parallelism as a library (ring attention): tensor's sibling
    "runtime/optim/=6"
    "runtime/memory/=7"
    "runtime/checkpoint/=8"
    "runtime/inference/=8"   # generation over any Decoder and weight streaming: checkpoint's sibling
    "runtime/data/=8"        # tokenizers (tokenizer.json, SentencePiece): checkpoint's sibling, on core only
    "kernels/=9"             # the kernels every model family calls, by op (cpu/, cuda/), and their kernel table
    "include/strata/=10"     # the public umbrella header: may include any layer below it
    "models/=11"
    "tools/=12"
    "examples/=12"
    "tests/=13")             # may include anything
# Top-level folders scanned (build*/ and .git are skipped wherever they appear).
set(STRATA_LAYER_ROOTS core collectives runtime kernels include models tools examples tests)
# Files that exist only in a build tree (configure_file), with the path they are included by.
set(STRATA_GENERATED_HEADERS "core/config.h")
set(STRATA_SOURCE_GLOBS "*.h" "*.cc" "*.cu" "*.cuh" "*.cpp")
# ---------------------------------------------------------------------------------------------------------------

if(NOT DEFINED SOURCE_DIR)
  message(FATAL_ERROR "layering: usage: cmake -DSOURCE_DIR=<repository root> -P check_layers.cmake")
endif()
get_filename_component(SOURCE_DIR "${SOURCE_DIR}" ABSOLUTE)
if(NOT IS_DIRECTORY "${SOURCE_DIR}")
  message(FATAL_ERROR "layering: SOURCE_DIR=${SOURCE_DIR} is not a directory")
endif()

# layer_of(<out_name> <out_height> <path relative to the root>): the layer a file belongs to; name "" when none.
function(layer_of out_name out_height path)
  set(best_prefix "")
  set(best_height "")
  foreach(entry IN LISTS STRATA_LAYERS)
    string(REGEX MATCH "^(.*)=([0-9]+)$" _ "${entry}")
    set(prefix "${CMAKE_MATCH_1}")
    set(height "${CMAKE_MATCH_2}")
    string(LENGTH "${prefix}" prefix_len)
    string(LENGTH "${best_prefix}" best_len)
    string(FIND "${path}" "${prefix}" at)
    if(at EQUAL 0 AND prefix_len GREATER best_len)
      set(best_prefix "${prefix}")
      set(best_height "${height}")
    endif()
  endforeach()
  string(REGEX REPLACE "/$" "" best_name "${best_prefix}")
  set(${out_name} "${best_name}" PARENT_SCOPE)
  set(${out_height} "${best_height}" PARENT_SCOPE)
endfunction()

# resolve(<out> <include> <folder of the including file>): the included file relative to the root, or "" when it is
# not a file of the tree. Tried from the root first (how the project spells includes), then from the file's folder.
function(resolve out inc from_dir)
  if(inc IN_LIST STRATA_GENERATED_HEADERS)
    set(${out} "${inc}" PARENT_SCOPE)
    return()
  endif()
  foreach(base "${SOURCE_DIR}" "${SOURCE_DIR}/${from_dir}")
    get_filename_component(candidate "${base}/${inc}" ABSOLUTE)  # also collapses "..": the layer is the real one
    if(EXISTS "${candidate}" AND NOT IS_DIRECTORY "${candidate}")
      file(RELATIVE_PATH rel "${SOURCE_DIR}" "${candidate}")
      if(NOT rel MATCHES "^\\.\\./")
        set(${out} "${rel}" PARENT_SCOPE)
        return()
      endif()
    endif()
  endforeach()
  set(${out} "" PARENT_SCOPE)
endfunction()

# Collect the files.
set(globs)
foreach(root IN LISTS STRATA_LAYER_ROOTS)
  foreach(glob IN LISTS STRATA_SOURCE_GLOBS)
    list(APPEND globs "${SOURCE_DIR}/${root}/${glob}")
  endforeach()
endforeach()
file(GLOB_RECURSE files RELATIVE "${SOURCE_DIR}" LIST_DIRECTORIES false ${globs})
list(FILTER files EXCLUDE REGEX "(^|/)(build[^/]*|\\.git)/")
list(REMOVE_DUPLICATES files)
list(SORT files)

set(num_files 0)
set(num_includes 0)
set(num_violations 0)
foreach(src IN LISTS files)
  math(EXPR num_files "${num_files} + 1")
  layer_of(from_name from_height "${src}")
  if(from_name STREQUAL "")
    message("layering: ${src}: in no layer (add its folder to the layer table in cmake/check_layers.cmake)")
    math(EXPR num_violations "${num_violations} + 1")
    continue()
  endif()
  file(READ "${SOURCE_DIR}/${src}" text)
  if(NOT text MATCHES "#[ \t]*include[ \t]*\"")
    continue()
  endif()
  get_filename_component(from_dir "${src}" DIRECTORY)
  # One list element per line: drop the characters a CMake list treats specially (none can be in an include path).
  string(REGEX REPLACE "[][;\\\\\r]" "" text "${text}")
  string(REPLACE "\n" ";" lines "${text}")
  set(line_no 0)
  foreach(line IN LISTS lines)
    math(EXPR line_no "${line_no} + 1")
    if(NOT line MATCHES "^[ \t]*#[ \t]*include[ \t]*\"([^\"]+)\"")
      continue()  # not an include, or a <system> one
    endif()
    set(inc "${CMAKE_MATCH_1}")
    math(EXPR num_includes "${num_includes} + 1")
    set(where "layering: ${src}:${line_no} includes ${inc}")
    resolve(target "${inc}" "${from_dir}")
    if(target STREQUAL "")
      message("${where}: not a file of the tree (looked from the root and from ${from_dir}/)")
      math(EXPR num_violations "${num_violations} + 1")
      continue()
    endif()
    if(NOT target STREQUAL inc)
      string(APPEND where " (${target})")  # spelled relative to the including file
    endif()
    layer_of(to_name to_height "${target}")
    if(to_name STREQUAL "")
      message("${where}: ${target} is in no layer")
      math(EXPR num_violations "${num_violations} + 1")
    elseif(to_height GREATER from_height)
      message("${where}: ${from_name} (layer ${from_height}) must not include ${to_name} (layer ${to_height})")
      math(EXPR num_violations "${num_violations} + 1")
    elseif(to_height EQUAL from_height AND NOT to_name STREQUAL from_name)
      message("${where}: ${from_name} (layer ${from_height}) must not include its sibling ${to_name} "
              "(layer ${to_height})")
      math(EXPR num_violations "${num_violations} + 1")
    endif()
  endforeach()
endforeach()

message("layering: ${num_files} files, ${num_includes} includes checked, ${num_violations} violations")
if(num_violations GREATER 0)
  message(FATAL_ERROR "layering: ${num_violations} violations (the layers: STYLE.md item 3, docs/architecture.md)")
endif()
