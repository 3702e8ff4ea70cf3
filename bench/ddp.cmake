# DDP overlap benchmark (run under braid launch).
add_executable(ddp_overlap_bench ${CMAKE_CURRENT_LIST_DIR}/ddp_overlap_bench.cpp)
target_link_libraries(ddp_overlap_bench PRIVATE braid_train)
