/* Build probe: an MPI C compiler wrapper builds and links an MPI program. */
#include <mpi.h>
int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    return MPI_Finalize();
}
