# Collectives as real processes under mpirun (label mpi): both transports, 2-4 ranks.
