# `cmake --install build/<preset> --prefix P` installs braid as a CMake package: the `braid`
# binary (and the netguard library `braid launch` preloads beside it), every layer's static
# library, the headers (include/braid/<layer>/...), and lib/cmake/braid with the targets, so
#   find_package(braid REQUIRED)
#   target_link_libraries(app PRIVATE braid::braid)
# builds a user's program against the Accelerator (train/accelerator.h) and everything below.
include(CMakePackageConfigHelpers)

get_property(braid_layers GLOBAL PROPERTY BRAID_LAYERS)
# The whole library: the train layer links every layer below it.
add_library(braid_all INTERFACE)
target_link_libraries(braid_all INTERFACE braid_train)
set_target_properties(braid_all PROPERTIES EXPORT_NAME braid)
target_compile_features(braid_all INTERFACE cxx_std_20)
add_library(braid::braid ALIAS braid_all)

install(TARGETS ${braid_layers} braid_all EXPORT braidTargets
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
  INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(TARGETS braid RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(TARGETS braid_netguard LIBRARY DESTINATION ${CMAKE_INSTALL_BINDIR})
# Headers, without the tests' helpers (they include gtest and testing/) and without cli/'s, which
# belong to the binary alone (they include CLI11, which the package does not depend on).
install(DIRECTORY ${PROJECT_SOURCE_DIR}/src/braid/ DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/braid
  FILES_MATCHING PATTERN "*.h"
  PATTERN "*_test.h" EXCLUDE
  PATTERN "*test_util.h" EXCLUDE
  PATTERN "test_nodes.h" EXCLUDE
  PATTERN "netguard" EXCLUDE
  PATTERN "cli" EXCLUDE)
install(EXPORT braidTargets NAMESPACE braid:: DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/braid)

get_property(braid_gemm GLOBAL PROPERTY BRAID_GEMM)
set(BRAID_PACKAGE_NEEDS_DNNL OFF)
if(braid_gemm STREQUAL "onednn")
  set(BRAID_PACKAGE_NEEDS_DNNL ON)
endif()
set(BRAID_PACKAGE_NEEDS_MPI OFF)
if(BRAID_WITH_MPI AND MPI_FOUND)
  set(BRAID_PACKAGE_NEEDS_MPI ON)
endif()
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/braidConfig.cmake.in
  ${PROJECT_BINARY_DIR}/braidConfig.cmake INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/braid)
write_basic_package_version_file(${PROJECT_BINARY_DIR}/braidConfigVersion.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/braidConfig.cmake ${PROJECT_BINARY_DIR}/braidConfigVersion.cmake
  DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/braid)
