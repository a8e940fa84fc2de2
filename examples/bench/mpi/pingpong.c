/* mpi-bench's reference: round trips and streams between ranks 0 and 1, with the
 * counts and the timing of ipl-bench's, compiled (mpicc) and run (mpirun -n 2) by
 * mpi-bench.
 *
 *   pingpong latency ITERS BATCH SIZE...    one line "latency SIZE RTT_US" per size
 *   pingpong throughput MBYTES SIZE...      one line "throughput SIZE MB_PER_S" per size
 *
 * Latency: ITERS / 10 + 10 round trips to warm up, then ITERS round trips (a quarter,
 * at least 100, from 64 KiB up) timed in batches of BATCH; the figure is the median of
 * the batches' mean round trips, as ipl-bench's. Throughput: one message and its
 * acknowledgement to connect, then MBYTES MiB in messages of SIZE bytes sent with
 * MPI_Send, and the figure is the bytes over the time to the receiver's one-byte
 * acknowledgement of the last message, as ipl-bench's.
 *
 * Everything the command line says is checked; a bad argument ends the job with a
 * message and exit status 2. */
#include <errno.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_SIZE (1ul << 30)
#define MAX_COUNT (1ul << 32)

static int rank;

static void usage_error(const char *what, const char *arg) {
    if (rank == 0)
        fprintf(stderr, "pingpong: %s: %s\n", what, arg);
    MPI_Abort(MPI_COMM_WORLD, 2);
    exit(2);
}

static unsigned long parse(const char *s, unsigned long lo, unsigned long hi, const char *what) {
    char *end;
    errno = 0;
    unsigned long v = strtoul(s, &end, 10);
    if (errno || end == s || *end || s[0] == '-' || v < lo || v > hi)
        usage_error(what, s);
    return v;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static void round_trips(char *buf, int size, unsigned long n) {
    for (unsigned long i = 0; i < n; i++) {
        if (rank == 0) {
            MPI_Send(buf, size, MPI_BYTE, 1, 0, MPI_COMM_WORLD);
            MPI_Recv(buf, size, MPI_BYTE, 1, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        } else {
            MPI_Recv(buf, size, MPI_BYTE, 0, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            MPI_Send(buf, size, MPI_BYTE, 0, 0, MPI_COMM_WORLD);
        }
    }
}

static void latency(unsigned long iters, unsigned long batch, int size, char *buf) {
    if (size >= (1 << 16))
        iters = iters / 4 > 100 ? iters / 4 : 100;
    round_trips(buf, size, iters / 10 + 10);
    unsigned long nsamples = (iters + batch - 1) / batch;
    double *samples = malloc(nsamples * sizeof *samples);
    if (!samples)
        usage_error("out of memory for samples", "");
    unsigned long left = iters;
    for (unsigned long s = 0; s < nsamples; s++) {
        unsigned long n = left < batch ? left : batch;
        left -= n;
        double t0 = MPI_Wtime();
        round_trips(buf, size, n);
        samples[s] = (MPI_Wtime() - t0) / (double)n;
    }
    if (rank == 0) {
        qsort(samples, nsamples, sizeof *samples, cmp_double);
        printf("latency %d %.6f\n", size, samples[nsamples / 2] * 1e6);
        fflush(stdout);
    }
    free(samples);
}

static void throughput(unsigned long mbytes, int size, char *buf) {
    unsigned long count = (mbytes << 20) / (unsigned long)(size > 0 ? size : 1);
    char ack = 0;
    if (count == 0)
        count = 1;
    /* Connects (the TCP transport does so at the first message) before the clock. */
    if (rank == 0) {
        MPI_Send(buf, size, MPI_BYTE, 1, 0, MPI_COMM_WORLD);
        MPI_Recv(&ack, 1, MPI_BYTE, 1, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        double t0 = MPI_Wtime();
        for (unsigned long i = 0; i < count; i++)
            MPI_Send(buf, size, MPI_BYTE, 1, 0, MPI_COMM_WORLD);
        MPI_Recv(&ack, 1, MPI_BYTE, 1, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        double t = MPI_Wtime() - t0;
        printf("throughput %d %.3f\n", size, (double)size * (double)count / t / 1e6);
        fflush(stdout);
    } else {
        MPI_Recv(buf, size, MPI_BYTE, 0, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        MPI_Send(&ack, 1, MPI_BYTE, 0, 1, MPI_COMM_WORLD);
        for (unsigned long i = 0; i < count; i++)
            MPI_Recv(buf, size, MPI_BYTE, 0, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        MPI_Send(&ack, 1, MPI_BYTE, 0, 1, MPI_COMM_WORLD);
    }
}

int main(int argc, char **argv) {
    int ranks;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &ranks);
    if (ranks != 2)
        usage_error("needs exactly 2 ranks", "");
    int lat = argc > 1 && strcmp(argv[1], "latency") == 0;
    int thr = argc > 1 && strcmp(argv[1], "throughput") == 0;
    if (!lat && !thr)
        usage_error("first argument: latency or throughput", argc > 1 ? argv[1] : "(none)");
    int first = lat ? 4 : 3;
    if (argc <= first)
        usage_error("missing arguments", "latency ITERS BATCH SIZE... | throughput MBYTES SIZE...");
    unsigned long iters = 0, batch = 0, mbytes = 0;
    if (lat) {
        iters = parse(argv[2], 1, MAX_COUNT, "ITERS");
        batch = parse(argv[3], 1, MAX_COUNT, "BATCH");
    } else {
        mbytes = parse(argv[2], 1, 1ul << 20, "MBYTES");
    }
    for (int a = first; a < argc; a++) {
        int size = (int)parse(argv[a], 0, MAX_SIZE, "SIZE");
        char *buf = malloc(size > 0 ? (size_t)size : 1);
        if (!buf)
            usage_error("out of memory for a message of", argv[a]);
        memset(buf, 7, size > 0 ? (size_t)size : 1);
        if (lat)
            latency(iters, batch, size, buf);
        else
            throughput(mbytes, size, buf);
        free(buf);
    }
    MPI_Finalize();
    return 0;
}
