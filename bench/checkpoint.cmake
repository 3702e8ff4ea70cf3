# Training checkpoint throughput beside raw disk I/O, and async save (run under braid launch).
add_executable(checkpoint_bench ${CMAKE_CURRENT_LIST_DIR}/checkpoint_bench.cpp)
target_link_libraries(checkpoint_bench PRIVATE braid_train)
