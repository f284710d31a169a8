/* Times MPI_Allreduce (MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD) at several message sizes, for the
 * alpha-beta fit of the cost model (BENCHMARKS.md section 12; `scaling-model fit` reads the
 * output). Usage: allreduce-alpha-beta ROUNDS REPS FLOATS...
 * Each round visits every size once (so slow phases of a shared machine hit all sizes alike);
 * per visit: 3 warm-up calls, then REPS timed calls, each between barriers; a call's time is the
 * slowest rank's. Rank 0 prints one CSV line per timed call: bytes,seconds. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (argc < 4) {
        if (rank == 0) fprintf(stderr, "usage: %s ROUNDS REPS FLOATS...\n", argv[0]);
        MPI_Finalize();
        return 2;
    }
    int rounds = atoi(argv[1]), reps = atoi(argv[2]), nsizes = argc - 3;
    long max = 0;
    for (int i = 0; i < nsizes; i++) {
        long n = atol(argv[3 + i]);
        if (n <= 0) {
            if (rank == 0) fprintf(stderr, "bad size '%s': need a positive float count\n", argv[3 + i]);
            MPI_Finalize();
            return 2;
        }
        if (n > max) max = n;
    }
    if (rounds <= 0 || reps <= 0) {
        if (rank == 0) fprintf(stderr, "ROUNDS and REPS must be positive, got '%s' '%s'\n", argv[1], argv[2]);
        MPI_Finalize();
        return 2;
    }
    float *in = malloc(sizeof(float) * max), *out = malloc(sizeof(float) * max);
    if (!in || !out) {
        fprintf(stderr, "rank %d: cannot allocate %ld floats\n", rank, max);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    for (long i = 0; i < max; i++) in[i] = (float)(rank + 1) * 0.5f;
    if (rank == 0) printf("# ranks=%d rounds=%d reps=%d\nbytes,seconds\n", size, rounds, reps);
    for (int r = 0; r < rounds; r++) {
        for (int s = 0; s < nsizes; s++) {
            long n = atol(argv[3 + s]);
            for (int w = 0; w < 3; w++) MPI_Allreduce(in, out, (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
            for (int i = 0; i < reps; i++) {
                MPI_Barrier(MPI_COMM_WORLD);
                double t0 = MPI_Wtime();
                MPI_Allreduce(in, out, (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
                double dt = MPI_Wtime() - t0, slowest;
                MPI_Reduce(&dt, &slowest, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
                /* The sum of (rank+1)*0.5 over all ranks: a wrong reduction must not pass as fast. */
                float want = 0.25f * (float)size * (float)(size + 1);
                if (out[n - 1] != want) {
                    fprintf(stderr, "rank %d: wrong sum %g (want %g)\n", rank, out[n - 1], want);
                    MPI_Abort(MPI_COMM_WORLD, 1);
                }
                if (rank == 0) printf("%ld,%.9f\n", n * 4, slowest);
            }
        }
        if (rank == 0) fflush(stdout);
    }
    free(in);
    free(out);
    MPI_Finalize();
    return 0;
}
