/* pool-bench's reference: the start-up of an MPI job (MPI_Init wires the processes up,
 * the barrier makes sure every one of them is there), compiled and run by pool-bench. */
#include <mpi.h>

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    MPI_Barrier(MPI_COMM_WORLD);
    MPI_Finalize();
    return 0;
}
