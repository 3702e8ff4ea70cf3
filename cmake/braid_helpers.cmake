# One-way layering (docs/design.md "Layers", STYLE.md "Layout"). A layer's target, and whatever
# links it, sees only that layer's own headers and the headers of the layers it links, so a
# wrong-way #include is a compile error ("No such file or directory"), not a review comment.
# There is no include path to src/ or to the repository root: each folder gets an include root
# of its own in the build tree holding one symbolic link,
#   <build>/include/braid_nn/braid/nn -> src/braid/nn
# so "braid/nn/module.h" keeps working. The root is PUBLIC on the layer's target and travels
# exactly as far as its PUBLIC link dependencies. To use a header of another layer, link that
# layer (only where docs/design.md allows the arrow). A test needing a layer its own does not link
# links it explicitly in its CMakeLists.txt. The ctest `layering` (label lint,
# cmake/layering_test.cmake) checks every layer against docs/design.md's table.

# braid_include_root(TARGET SCOPE LINK_PATH SOURCE_DIR [HEADERS_ONLY]): gives TARGET the include
# root <build>/include/TARGET (with SCOPE: PUBLIC, PRIVATE or INTERFACE) holding the symbolic link
# LINK_PATH -> SOURCE_DIR, made at configure time. With HEADERS_ONLY, LINK_PATH is a folder of
# links instead, one to each header directly in SOURCE_DIR, so that a subfolder holding another
# target's headers (testing/train/, braid_testing_train's) is not reachable through TARGET.
function(braid_include_root target scope link_path source_dir)
  cmake_parse_arguments(R "HEADERS_ONLY" "" "" ${ARGN})
  set(root ${PROJECT_BINARY_DIR}/include/${target})
  get_filename_component(parent ${root}/${link_path} DIRECTORY)
  file(MAKE_DIRECTORY ${parent})
  set(links ${source_dir} ${root}/${link_path})
  if(R_HEADERS_ONLY)
    # An older build tree may hold one link to the whole folder here: remove that link (never
    # what it points to), then the links of headers that are gone.
    if(IS_SYMLINK ${root}/${link_path})
      file(REMOVE ${root}/${link_path})
    endif()
    file(MAKE_DIRECTORY ${root}/${link_path})
    file(GLOB old_links ${root}/${link_path}/*)
    foreach(old ${old_links})
      if(IS_SYMLINK ${old})
        file(REMOVE ${old})
      endif()
    endforeach()
    file(GLOB headers CONFIGURE_DEPENDS ${source_dir}/*.h)
    set(links "")
    foreach(header ${headers})
      get_filename_component(name ${header} NAME)
      list(APPEND links ${header} ${root}/${link_path}/${name})
    endforeach()
  endif()
  while(links)
    list(POP_FRONT links from to)
    file(CREATE_LINK ${from} ${to} RESULT made SYMBOLIC)
    if(NOT made EQUAL 0)
      message(FATAL_ERROR "cannot link ${to} -> ${from}: ${made}")
    endif()
  endwhile()
  # Installed (cmake --install), every layer's headers sit under <prefix>/include/braid/.
  target_include_directories(${target} ${scope} $<BUILD_INTERFACE:${root}>
                             $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>)
  set_property(GLOBAL APPEND PROPERTY BRAID_INCLUDE_ROOTS "${target}|${link_path}|${source_dir}")
endfunction()

# Note [Precompiled headers]: much of a translation unit's compile time here is spent parsing
# the standard library (75k preprocessed lines for a median one), gtest in a test and
# nlohmann/json where configs and tokenizers are read (with the headers precompiled,
# parallel/cost/step_cost.cpp took 2.3 s of CPU instead of 3.9, train/trainer.cpp 5.6 instead
# of 7.8). braid_precompile(TARGET [EXTRA...]) gives a
# target of four or more C++ sources one precompiled header of the standard headers most of its
# files include, and EXTRA (gtest, json) after them: each is parsed once per target instead of
# once per file. Off by default (`make PCH=ON`, or -DBRAID_PCH=ON): ccache serves a developer's
# rebuilds, each file is compiled on its own includes (a missing one fails), and a clean build
# with it compiles with -Werror (past the GCC 12 false positives named in CMakeLists.txt) and
# the CUDA backend beside it. It does not pay on a clean build: two clean clones built side by
# side (2026-11-26, 2-core AMD EPYC, no ccache, `make build` + `make cuda-build`) took 1232 s
# user + 347 s system with it and 1369 s + 213 s without: the precompiled headers (one per
# target, tens of MB each) cost in system time what they save in parsing. So CI builds without
# it. CUDA sources are not precompiled.
set(BRAID_PCH_STD algorithm array atomic chrono cmath cstdint cstdio cstring filesystem fstream
    functional map memory mutex optional set sstream string string_view thread unordered_map
    utility variant vector)
function(braid_precompile target)
  if(NOT BRAID_PCH)
    return()
  endif()
  get_target_property(sources ${target} SOURCES)
  list(FILTER sources INCLUDE REGEX "\\.cpp$")
  list(LENGTH sources n)
  if(n LESS 4)
    return()
  endif()
  set(headers)
  foreach(h IN LISTS BRAID_PCH_STD ARGN)
    list(APPEND headers "$<$<COMPILE_LANGUAGE:CXX>:<${h}>>")
  endforeach()
  target_precompile_headers(${target} PRIVATE ${headers})
endfunction()

# Note [Test optimisation]: a test's own sources are glue (set-up, gtest's assertions, small
# loops over results) around the layers' code, which keeps -O3; most of their compile time is
# the front end and gtest's expansions, and -O3 on them buys the suite nothing. Release builds
# compile them at -O1: 25-28% less time per file measured (train/pipeline_parity_test.cpp 7.7 s
# -> 5.5 s, kernels/kernels_test.cpp 4.6 -> 3.6, nn/transformer_test.cpp 7.6 -> 5.6), about a
# tenth of CI's build.
function(braid_test_optimisation target)
  target_compile_options(${target} PRIVATE $<$<AND:$<CONFIG:Release>,$<COMPILE_LANGUAGE:CXX>>:-O1>)
endfunction()

# braid_layer(NAME SOURCES... DEPS...): one library per src/braid folder, seeing its own
# headers as "braid/NAME/..." and, through DEPS, those of the layers below it.
function(braid_layer name)
  cmake_parse_arguments(L "" "" "SOURCES;DEPS;PCH" ${ARGN})
  add_library(braid_${name} STATIC ${L_SOURCES})
  braid_include_root(braid_${name} PUBLIC braid/${name} ${PROJECT_SOURCE_DIR}/src/braid/${name})
  target_link_libraries(braid_${name} PUBLIC ${L_DEPS})
  braid_precompile(braid_${name} ${L_PCH})
  set_property(GLOBAL APPEND PROPERTY BRAID_LAYERS braid_${name})
endfunction()

# braid_unit_tests(NAME SOURCES... LIBS...): one gtest binary per layer; every test gets a
# timeout so none can hang CI. PREFIX names the ctest tests "<prefix><suite>.<case>" (a second
# binary built from the same sources).
function(braid_unit_tests name)
  cmake_parse_arguments(T "" "TIMEOUT;PREFIX" "SOURCES;LIBS;LABELS;PCH" ${ARGN})
  if(NOT BRAID_BUILD_TESTS OR NOT T_SOURCES)
    return()
  endif()
  if(NOT T_TIMEOUT)
    set(T_TIMEOUT 120)
  endif()
  add_executable(${name} ${T_SOURCES})
  target_link_libraries(${name} PRIVATE ${T_LIBS} braid_testing GTest::gtest GTest::gtest_main)
  braid_test_optimisation(${name})
  braid_precompile(${name} gtest/gtest.h ${T_PCH})
  gtest_discover_tests(${name} DISCOVERY_TIMEOUT 60 TEST_PREFIX "${T_PREFIX}"
    PROPERTIES TIMEOUT ${T_TIMEOUT} LABELS unit)
  if(T_LABELS)
    # Discovery passes properties as single words, so further labels are set on the discovered
    # tests by a file ctest reads after the discovery's own.
    set(labels_file ${CMAKE_CURRENT_BINARY_DIR}/${name}_labels.cmake)
    file(WRITE ${labels_file} "foreach(t IN LISTS ${name}_TESTS)\n"
      "  set_tests_properties(\"\${t}\" PROPERTIES LABELS \"unit;${T_LABELS}\")\n"
      "endforeach()\n")
    set_property(DIRECTORY APPEND PROPERTY TEST_INCLUDE_FILES ${labels_file})
  endif()
endfunction()

# braid_mpi_test(NAME SOURCE NP LIBS...): a test binary run as NP real processes under
# mpirun (label mpi). Fails when any rank fails; the timeout stops any hang.
function(braid_mpi_test name)
  cmake_parse_arguments(T "" "NP;TIMEOUT" "SOURCES;LIBS;ARGS" ${ARGN})
  if(NOT BRAID_BUILD_TESTS OR NOT MPI_FOUND)
    return()
  endif()
  if(NOT T_TIMEOUT)
    set(T_TIMEOUT 120)
  endif()
  if(NOT TARGET ${name})
    add_executable(${name} ${T_SOURCES})
    target_link_libraries(${name} PRIVATE ${T_LIBS} braid_testing GTest::gtest)
    braid_test_optimisation(${name})
  endif()
  add_test(NAME ${name}_np${T_NP}
    COMMAND ${PROJECT_SOURCE_DIR}/scripts/mpirun-test.sh ${T_NP} $<TARGET_FILE:${name}> ${T_ARGS})
  set_tests_properties(${name}_np${T_NP} PROPERTIES TIMEOUT ${T_TIMEOUT} LABELS mpi)
endfunction()

# braid_layering_test(): the ctest `layering` (label lint), run by cmake/layering_test.cmake
# with the include directories CMake computes (transitively) for every target that has an
# include root. Call it once, after every folder is added.
function(braid_layering_test)
  if(NOT BRAID_BUILD_TESTS)
    return()
  endif()
  get_property(entries GLOBAL PROPERTY BRAID_INCLUDE_ROOTS)
  set(content "set(CXX \"${CMAKE_CXX_COMPILER}\")\nset(SOURCE_DIR \"${PROJECT_SOURCE_DIR}\")\n")
  foreach(entry ${entries})
    string(REPLACE "|" ";" entry "${entry}")
    list(GET entry 0 target)
    list(GET entry 1 link_path)
    list(GET entry 2 source_dir)
    # A header-only (INTERFACE) target compiles nothing itself: its own view is its users'.
    get_target_property(type ${target} TYPE)
    set(own INCLUDE_DIRECTORIES)
    if(type STREQUAL "INTERFACE_LIBRARY")
      set(own INTERFACE_INCLUDE_DIRECTORIES)
    endif()
    string(APPEND content "list(APPEND TARGETS ${target})\n"
      "set(LINK_${target} \"${link_path}\")\n"
      "set(DIR_${target} \"${source_dir}\")\n"
      "set(INCLUDES_${target} \"$<TARGET_PROPERTY:${target},${own}>\")\n"
      "set(INTERFACE_${target} \"$<TARGET_PROPERTY:${target},INTERFACE_INCLUDE_DIRECTORIES>\")\n")
  endforeach()
  file(GENERATE OUTPUT ${PROJECT_BINARY_DIR}/layering/targets.cmake CONTENT "${content}")
  add_test(NAME layering
    COMMAND ${CMAKE_COMMAND} -DINPUT=${PROJECT_BINARY_DIR}/layering/targets.cmake
            -DWORK_DIR=${PROJECT_BINARY_DIR}/layering -P ${PROJECT_SOURCE_DIR}/cmake/layering_test.cmake)
  set_tests_properties(layering PROPERTIES TIMEOUT 60 LABELS lint)
endfunction()
