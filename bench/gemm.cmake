# gemm_bench: GFLOP/s of each GEMM library on the shapes braid's GPT-2 small model runs
# (bench/gemm_bench.cpp), to choose and justify the kernels' GEMM backend.
add_executable(gemm_bench ${CMAKE_CURRENT_LIST_DIR}/gemm_bench.cpp)
target_link_libraries(gemm_bench PRIVATE braid_kernels)
find_package(dnnl CONFIG QUIET)
find_package(OpenBLAS CONFIG QUIET)
if(dnnl_FOUND)
  target_link_libraries(gemm_bench PRIVATE DNNL::dnnl)
  target_compile_definitions(gemm_bench PRIVATE BRAID_BENCH_ONEDNN=1)
endif()
if(OpenBLAS_FOUND)
  target_include_directories(gemm_bench PRIVATE ${OpenBLAS_INCLUDE_DIRS})
  target_link_libraries(gemm_bench PRIVATE ${OpenBLAS_LIBRARIES})
  target_compile_definitions(gemm_bench PRIVATE BRAID_BENCH_OPENBLAS=1)
endif()

# kernels_bench: time of each fused kernel on the GPT-2 small training shapes.
add_executable(kernels_bench ${CMAKE_CURRENT_LIST_DIR}/kernels_bench.cpp)
target_link_libraries(kernels_bench PRIVATE braid_kernels)
