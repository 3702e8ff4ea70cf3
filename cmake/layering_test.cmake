# The ctest `layering` (label lint; added by braid_layering_test() in braid_helpers.cmake):
#   cmake -DINPUT=<build>/layering/targets.cmake -DWORK_DIR=<dir> -P cmake/layering_test.cmake
# Proves that a wrong-way #include is a compile error. For every target with an include root
# (each layer, cli's `braid`, bench's braid_bench, braid_testing and braid_testing_train) it asks
# the compiler, with that target's own include directories and with those it passes on to
# whatever links it, which folders' headers __has_include can see, and fails when one is visible
# that docs/design.md's table below does not allow, or when one is reachable by another spelling
# ("src/braid/nn/x.h", "nn/x.h"). Then it compiles `#include "braid/train/<header>"` with nn's
# flags and expects "No such file".
# It reads only the folders' names and one header name each, never their contents.
cmake_minimum_required(VERSION 3.25)

# docs/design.md "Layers": the arrows (direct links); visibility is their transitive closure.
set(ARROWS_core "")
set(ARROWS_kernels core)
set(ARROWS_autograd kernels core)
set(ARROWS_nn autograd)
set(ARROWS_optim autograd)
set(ARROWS_comm core)
set(ARROWS_parallel comm optim nn)
set(ARROWS_data core)
set(ARROWS_checkpoint comm nn optim)
# config/: TrainConfig holds nn's ModelConfig and optim's loss-scaler config; config_agreement
# compares it across a comm group. launch/: `braid launch` and each rank's process setup.
set(ARROWS_config nn optim comm)
set(ARROWS_launch core)
set(ARROWS_train config launch checkpoint parallel data optim nn comm autograd kernels core)
# bench/ (beside src/braid): braid_bench, the library of `braid bench comm` and `braid bench tp`.
set(ARROWS_bench parallel)
set(ARROWS_cli train launch config bench)
# testing/: its helpers use core (tensor_compare), autograd (gradcheck) and comm (run_ranks),
# but whatever links braid_testing gets core's headers only, never autograd's or comm's.
set(ARROWS_testing core autograd comm)
set(INTERFACE_ARROWS_testing core)
# testing/train/: train's tests' helpers (header-only, braid_testing_train); they include
# train's headers, so only train's test targets link them.
set(ARROWS_testing_train train testing)

function(closure out)
  set(seen "")
  set(todo ${ARGN})
  while(todo)
    list(POP_FRONT todo name)
    if(NOT name IN_LIST seen)
      list(APPEND seen ${name})
      list(APPEND todo ${ARROWS_${name}})
    endif()
  endwhile()
  set(${out} ${seen} PARENT_SCOPE)
endfunction()

include(${INPUT})
file(MAKE_DIRECTORY ${WORK_DIR})

# One probe header per folder (the first by name), and every spelling of it that some include
# directory could reach: "src/braid/nn/x.h", "braid/nn/x.h", "nn/x.h". Only LINK/x.h is legal.
set(probes "")
foreach(t ${TARGETS})
  # The folder's name in the table: a layer's ("braid/nn": nn), else its link path with _ for /
  # ("testing", "testing/train": testing_train).
  string(REGEX REPLACE "^braid/" "" name "${LINK_${t}}")
  string(REPLACE "/" "_" name "${name}")
  set(NAME_${t} ${name})
  file(GLOB headers RELATIVE ${DIR_${t}} ${DIR_${t}}/*.h)
  if(NOT headers)
    file(GLOB_RECURSE headers RELATIVE ${DIR_${t}} ${DIR_${t}}/*.h)
  endif()
  if(NOT headers)
    continue()
  endif()
  list(SORT headers)
  list(GET headers 0 header)
  file(RELATIVE_PATH path ${SOURCE_DIR} ${DIR_${t}}/${header})
  set(LEGAL_${name} ${LINK_${t}}/${header})
  set(SPELLINGS_${name} "")
  while(path MATCHES "/")
    list(APPEND SPELLINGS_${name} ${path})
    string(FIND "${path}" "/" slash)
    math(EXPR slash "${slash} + 1")
    string(SUBSTRING "${path}" ${slash} -1 path)
  endwhile()
  list(APPEND probes ${name})
endforeach()

set(tu "")
foreach(name ${probes})
  foreach(s ${SPELLINGS_${name}})
    string(APPEND tu "#if __has_include(\"${s}\")\nvisible ${name} \"${s}\"\n#endif\n")
  endforeach()
endforeach()
file(WRITE ${WORK_DIR}/probe.cpp "${tu}")

# check(TARGET KIND ALLOWED...): KIND is INCLUDES (the target's own compile) or INTERFACE (what
# a target linking it gets).
function(check target kind)
  set(flags "")
  foreach(dir ${${kind}_${target}})
    list(APPEND flags -I${dir})
  endforeach()
  execute_process(COMMAND ${CXX} -std=c++20 -E -P -x c++ ${flags} ${WORK_DIR}/probe.cpp
    RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(SEND_ERROR "${target}: the probe did not preprocess (${rc}): ${err}")
    return()
  endif()
  set(self ${NAME_${target}})
  set(own_visible OFF)
  set(seen "")
  string(REGEX MATCHALL "visible [a-z_]+ \"[^\"]+\"" lines "${out}")
  foreach(line ${lines})
    string(REGEX REPLACE "visible ([a-z_]+) \"([^\"]+)\"" "\\1;\\2" line "${line}")
    list(GET line 0 name)
    list(GET line 1 spelling)
    if(NOT spelling STREQUAL "${LEGAL_${name}}")
      message(SEND_ERROR "${target} (${kind}): \"${spelling}\" is reachable; only "
                         "\"${LEGAL_${name}}\" may be (is src/ or the repository root on the "
                         "include path?)")
      continue()
    endif()
    list(APPEND seen ${name})
    if(name STREQUAL self)
      set(own_visible ON)
    elseif(NOT name IN_LIST ARGN)
      string(REPLACE ";" ", " allowed "${ARGN}")
      message(SEND_ERROR "${target} (${kind}): sees \"${spelling}\", but docs/design.md allows "
                         "${self} -> ${allowed} only")
    endif()
  endforeach()
  if(kind STREQUAL "INCLUDES" AND self IN_LIST probes AND NOT own_visible)
    message(SEND_ERROR "${target}: its own \"${LEGAL_${self}}\" is not visible")
  endif()
  string(REPLACE ";" " " seen "${seen}")
  message(STATUS "${target} (${kind}) sees: ${seen}")
endfunction()

foreach(t ${TARGETS})
  set(name ${NAME_${t}})
  if(NOT DEFINED ARROWS_${name})
    message(SEND_ERROR "${t}: folder '${name}' is not in docs/design.md's table here; "
                       "add its arrows")
    continue()
  endif()
  closure(allowed ${ARROWS_${name}})
  check(${t} INCLUDES ${allowed})
  if(DEFINED INTERFACE_ARROWS_${name})
    closure(allowed ${INTERFACE_ARROWS_${name}})
  endif()
  check(${t} INTERFACE ${allowed})
endforeach()

# The rule as a user meets it: a train header included from nn is a compile error.
if(NOT "braid_nn" IN_LIST TARGETS OR NOT "train" IN_LIST probes)
  message(FATAL_ERROR "no braid_nn target or no header in train/ to try the wrong-way include")
endif()
file(WRITE ${WORK_DIR}/wrong_way.cpp "#include \"${LEGAL_train}\"\n")
set(flags "")
foreach(dir ${INCLUDES_braid_nn})
  list(APPEND flags -I${dir})
endforeach()
execute_process(COMMAND ${CXX} -std=c++20 -fsyntax-only -x c++ ${flags} ${WORK_DIR}/wrong_way.cpp
  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
# GCC says "No such file or directory", Clang "file not found".
if(rc EQUAL 0 OR NOT err MATCHES "No such file|file not found")
  message(SEND_ERROR "braid_nn: #include \"${LEGAL_train}\" did not fail as a missing file "
                     "(exit ${rc}): ${err}")
else()
  string(REGEX MATCH "[^\n]*(No such file|file not found)[^\n]*" line "${err}")
  message(STATUS "braid_nn: #include \"${LEGAL_train}\" fails as it should: ${line}")
endif()
