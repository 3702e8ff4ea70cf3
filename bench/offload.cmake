# offload_bench: the disk's O_DIRECT read, write and overlapped speed for the bytes an offloaded
# training step moves (bench/offload.sh runs it beside the step).
add_executable(offload_bench ${CMAKE_CURRENT_LIST_DIR}/offload_bench.cpp)
target_link_libraries(offload_bench PRIVATE Threads::Threads)
