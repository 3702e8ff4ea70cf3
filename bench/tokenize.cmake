# Tokenising throughput (MB/s) of each tokenizer on a corpus, one thread and every core.
add_executable(tokenize_bench ${CMAKE_CURRENT_LIST_DIR}/tokenize_bench.cpp)
target_link_libraries(tokenize_bench PRIVATE braid_data Threads::Threads)
