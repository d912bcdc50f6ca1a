/* Strong-scaling test program: 5 iterations of a fixed amount of work (80 ms per iteration
 * in total) split over the ranks with weights 1..n, then MPI_Allreduce + MPI_Barrier.
 * Work is a busy wait on the monotonic clock, so its length is wall time even on an
 * oversubscribed machine. Expected CPU load balance: (n + 1) / (2 n). */
#include <mpi.h>
#include <stdio.h>
#include <time.h>

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

int main(int argc, char **argv) {
    int rank, size;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    double share = 0.080 * (rank + 1) / (size * (size + 1) / 2.0);
    double x = rank, sum = 0;
    for (int it = 0; it < 5; it++) {
        double end = now() + share;
        while (now() < end) x = x * 1.0000001 + 1e-9;
        MPI_Allreduce(&x, &sum, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
        MPI_Barrier(MPI_COMM_WORLD);
    }
    if (rank == 0) printf("done %g\n", sum);
    MPI_Finalize();
    return 0;
}
