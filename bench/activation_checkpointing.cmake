# activation_checkpointing_bench: peak activation memory and step time of each activation
# checkpointing policy on the bench-small model (bench/activation_checkpointing_bench.cpp).
add_executable(activation_checkpointing_bench
               ${CMAKE_CURRENT_LIST_DIR}/activation_checkpointing_bench.cpp)
target_link_libraries(activation_checkpointing_bench PRIVATE braid_nn)
