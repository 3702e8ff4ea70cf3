# Collectives as real processes under mpirun (label mpi): shm and p2p transports, 2-4 ranks (3
# and 4 oversubscribe this 2-core machine, which the spin-then-sleep waits must survive).
set(d ${CMAKE_CURRENT_SOURCE_DIR}/mpi)
braid_mpi_test(comm_collectives_mpi_test SOURCES ${d}/collectives_mpi_test.cpp NP 2
  LIBS braid_comm TIMEOUT 120)
braid_mpi_test(comm_collectives_mpi_test NP 3 TIMEOUT 120)
braid_mpi_test(comm_collectives_mpi_test NP 4 TIMEOUT 180)
# The same binary over point-to-point messages (the multi-node transport); distinct test names.
add_test(NAME comm_collectives_mpi_test_p2p_np3
  COMMAND ${PROJECT_SOURCE_DIR}/scripts/mpirun-test.sh 3 $<TARGET_FILE:comm_collectives_mpi_test>
          --transport=p2p)
set_tests_properties(comm_collectives_mpi_test_p2p_np3 PROPERTIES TIMEOUT 120 LABELS mpi)
