# comm_mpi_bench: raw MPI collectives in a plain MPI program (no braid, MPI_THREAD_SINGLE unless
# --thread-multiple), the baseline `braid bench comm` is compared with. Run it like
#   scripts/mpirun-test.sh 2 build/<dir>/bench/comm_mpi_bench
if(MPI_FOUND)
  add_executable(comm_mpi_bench ${CMAKE_CURRENT_LIST_DIR}/comm_mpi_bench.cpp)
  target_link_libraries(comm_mpi_bench PRIVATE MPI::MPI_C)
  target_compile_definitions(comm_mpi_bench PRIVATE OMPI_SKIP_MPICXX=1 MPICH_SKIP_MPICXX=1)
endif()
