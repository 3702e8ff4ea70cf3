# braid_layer(NAME SOURCES... DEPS...): one library per src/braid folder.
function(braid_layer name)
  cmake_parse_arguments(L "" "" "SOURCES;DEPS" ${ARGN})
  add_library(braid_${name} STATIC ${L_SOURCES})
  target_include_directories(braid_${name} PUBLIC ${PROJECT_SOURCE_DIR}/src)
  target_link_libraries(braid_${name} PUBLIC ${L_DEPS})
endfunction()

# braid_unit_tests(NAME SOURCES... LIBS...): one gtest binary per layer; every test gets a
# timeout so none can hang CI.
function(braid_unit_tests name)
  cmake_parse_arguments(T "" "TIMEOUT" "SOURCES;LIBS;LABELS" ${ARGN})
  if(NOT BRAID_BUILD_TESTS OR NOT T_SOURCES)
    return()
  endif()
  if(NOT T_TIMEOUT)
    set(T_TIMEOUT 120)
  endif()
  add_executable(${name} ${T_SOURCES})
  target_link_libraries(${name} PRIVATE ${T_LIBS} braid_testing GTest::gtest GTest::gtest_main)
  gtest_discover_tests(${name} DISCOVERY_TIMEOUT 60
    PROPERTIES TIMEOUT ${T_TIMEOUT} LABELS "unit;${T_LABELS}")
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
  endif()
  add_test(NAME ${name}_np${T_NP}
    COMMAND ${PROJECT_SOURCE_DIR}/scripts/mpirun-test.sh ${T_NP} $<TARGET_FILE:${name}> ${T_ARGS})
  set_tests_properties(${name}_np${T_NP} PROPERTIES TIMEOUT ${T_TIMEOUT} LABELS mpi)
endfunction()
