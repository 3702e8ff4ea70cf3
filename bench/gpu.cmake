# gpu_train_bench: braid training GPT-2 on one GPU (CUDA backend), tokens/s and MFU beside
# PyTorch (bench/gpu_vs_pytorch.sh). Built with the CUDA backend (BRAID_CUDA or BRAID_CUDA_CHECK).
if(TARGET braid_cuda)
  add_executable(gpu_train_bench ${CMAKE_CURRENT_LIST_DIR}/gpu_train_bench.cpp)
  target_link_libraries(gpu_train_bench PRIVATE braid_optim braid_nn braid_cuda)
endif()
