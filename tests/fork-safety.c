/*
 * fork-safety.c - fork() never waits forever on a lock the C library holds around an allocation.
 *
 * Two scenarios, each run in a worker process of its own that a watchdog (this program's first
 * process) watches through a shared progress counter:
 *
 *   stdio   Three threads use stdio while the main thread forks again and again: one reads a
 *           file of long lines with getline() (which holds the FILE's lock while it calls
 *           realloc, and the lines grow through small, medium and large blocks), one calls
 *           fflush(NULL) (which holds stdio's list of files while it waits for each FILE's
 *           lock), one allocates and frees. A fork handler that takes the allocator's locks
 *           before glibc's fork takes the list lock deadlocks here: the forking thread waits for
 *           the list, the flushing thread for the FILE, the reading thread in realloc for the
 *           allocator. Each child allocates, writes to a stdio stream and exits.
 *   signal  One thread allocates, reallocates and frees in a loop while an interval timer's
 *           SIGALRM handler forks (fork is async-signal-safe): the handler often interrupts the
 *           allocator with a lock held, and a fork handler that waits for that lock waits for
 *           itself. Each child _exits at once; the handler waits for it.
 *
 * Usage: fork-safety [stdio|signal|all] [FORKS]   (FORKS per scenario; default 100 stdio and
 * 600 signal forks, make check's, or FASTMM_TEST_FORK_SAFETY_FORKS; `make check-long` runs 2000
 * each). Both deadlocks it was written for hung on every run, well within the short one.
 * The watchdog fails a scenario whose counter has not moved for 120 s (a fork takes
 * milliseconds even on a loaded machine): no timing assumption beyond "a deadlock never ends".
 * Exit status: 0 pass, 1 fail (the reason on standard error), 99 could not run.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

enum { STALL_SECONDS = 120 };

/* Shared with the watchdog: how many forks the worker has completed, and whether it is done. */
typedef struct progress {
    atomic_long forks;
    atomic_int done;
} progress_t;

static progress_t *progress;
static atomic_int stop_threads;
static FILE *lines_file;

static void fail(const char *what)
{
    fprintf(stderr, "fork-safety: %s: %s\n", what, strerror(errno));
    _exit(1);
}

/* A file of lines from 1 KiB to about 600 KiB, so getline's buffer passes every block kind. */
static FILE *make_lines_file(void)
{
    FILE *f = tmpfile();
    if (f == NULL)
        fail("tmpfile");
    static const size_t lengths[] = {1000, 3000, 20000, 70000, 150000, 300000, 600000};
    for (size_t i = 0; i < sizeof lengths / sizeof lengths[0]; i++) {
        for (size_t k = 0; k < lengths[i]; k++)
            putc('a' + (int)(k % 26), f);
        putc('\n', f);
    }
    if (fflush(f) != 0)
        fail("fflush");
    return f;
}

static void *read_lines(void *arg)
{
    (void)arg;
    while (!atomic_load(&stop_threads)) {
        char *line = NULL;
        size_t cap = 0;
        flockfile(lines_file);
        rewind(lines_file);
        while (getline(&line, &cap, lines_file) > 0)
            ;
        funlockfile(lines_file);
        free(line);
    }
    return NULL;
}

static void *flush_all(void *arg)
{
    (void)arg;
    while (!atomic_load(&stop_threads))
        fflush(NULL);
    return NULL;
}

static void *churn(void *arg)
{
    (void)arg;
    void *slots[64] = {0};
    unsigned x = 12345;
    while (!atomic_load(&stop_threads)) {
        x = x * 1103515245u + 12345u;
        unsigned i = (x >> 8) % 64;
        free(slots[i]);
        slots[i] = malloc(16 + (x >> 12) % 200000);
    }
    for (int i = 0; i < 64; i++)
        free(slots[i]);
    return NULL;
}

static int stdio_worker(long forks)
{
    lines_file = make_lines_file();
    void *(*bodies[])(void *) = {read_lines, flush_all, churn};
    pthread_t th[3];
    for (int i = 0; i < 3; i++)
        if (pthread_create(&th[i], NULL, bodies[i], NULL) != 0)
            fail("pthread_create");
    for (long i = 0; i < forks; i++) {
        pid_t pid = fork();
        if (pid < 0)
            fail("fork");
        if (pid == 0) {
            char *p = malloc(100000);
            if (p == NULL)
                _exit(2);
            memset(p, 1, 100000);
            fprintf(stdout, "%s", "");
            fflush(stdout);
            free(p);
            _exit(0);
        }
        int status = 0;
        while (waitpid(pid, &status, 0) < 0)
            if (errno != EINTR)
                fail("waitpid");
        if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
            fprintf(stderr, "fork-safety: stdio: child %ld ended with status %#x\n", i, status);
            return 1;
        }
        atomic_fetch_add(&progress->forks, 1);
    }
    atomic_store(&stop_threads, 1);
    for (int i = 0; i < 3; i++)
        pthread_join(th[i], NULL);
    return 0;
}

static volatile sig_atomic_t handler_failed;
static volatile sig_atomic_t loop_steps; /* the signal worker's iterations, counted */

/* Forks at most once per step of the worker's loop: where a fork takes longer than the timer's
 * interval (a loaded machine), the next signal is already pending when the handler returns, and
 * a write that faults on a page the fork made copy-on-write would be interrupted again before it
 * completes, forever. */
static void fork_from_handler(int sig)
{
    (void)sig;
    static sig_atomic_t forked_at = -1;
    if (loop_steps == forked_at)
        return;
    forked_at = loop_steps;
    int saved = errno;
    pid_t pid = fork();
    if (pid == 0)
        _exit(0);
    if (pid < 0) {
        handler_failed = 1;
    } else {
        int status = 0;
        while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
            ;
        if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
            handler_failed = 1;
        atomic_fetch_add(&progress->forks, 1);
    }
    errno = saved;
}

static int signal_worker(long forks)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = fork_from_handler;
    sa.sa_flags = SA_RESTART;
    sigemptyset(&sa.sa_mask);
    if (sigaction(SIGALRM, &sa, NULL) != 0)
        fail("sigaction");
    struct itimerval it = {{0, 200}, {0, 200}};
    if (setitimer(ITIMER_REAL, &it, NULL) != 0)
        fail("setitimer");
    void *slots[256] = {0};
    unsigned x = 777;
    while (atomic_load(&progress->forks) < forks && !handler_failed) {
        loop_steps = (loop_steps + 1) & 0x3fffffff;
        x = x * 1103515245u + 12345u;
        unsigned i = (x >> 8) % 256;
        size_t n = 1 + (x >> 12) % ((x & 1) ? 300 : 300000);
        if (x & 2)
            slots[i] = realloc(slots[i], n);
        else {
            free(slots[i]);
            slots[i] = malloc(n);
        }
    }
    struct itimerval off = {{0, 0}, {0, 0}};
    setitimer(ITIMER_REAL, &off, NULL);
    for (int i = 0; i < 256; i++)
        free(slots[i]);
    if (handler_failed) {
        fprintf(stderr, "fork-safety: signal: a fork from the handler failed\n");
        return 1;
    }
    return 0;
}

/* Runs one scenario in a worker process and watches its progress. */
static int run_watched(const char *name, int (*worker)(long), long forks)
{
    atomic_store(&progress->forks, 0);
    atomic_store(&progress->done, 0);
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0)
        fail("fork (worker)");
    if (pid == 0)
        _exit(worker(forks));
    long seen = -1;
    time_t moved = time(NULL);
    for (;;) {
        int status = 0;
        pid_t r = waitpid(pid, &status, WNOHANG);
        if (r == pid) {
            if (WIFEXITED(status) && WEXITSTATUS(status) == 0) {
                printf("fork-safety: %s: %ld forks, no deadlock\n", name, (long)atomic_load(&progress->forks));
                return 0;
            }
            fprintf(stderr, "fork-safety: %s: worker ended with status %#x after %ld forks\n", name, status,
                    (long)atomic_load(&progress->forks));
            return 1;
        }
        long now_forks = atomic_load(&progress->forks);
        if (now_forks != seen) {
            seen = now_forks;
            moved = time(NULL);
        } else if (time(NULL) - moved > STALL_SECONDS) {
            fprintf(stderr, "fork-safety: %s: DEADLOCK: no fork completed for %d s (after %ld forks)\n", name,
                    STALL_SECONDS, seen);
            kill(pid, SIGKILL);
            waitpid(pid, &status, 0);
            return 1;
        }
        struct timespec ts = {0, 50 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
}

int main(int argc, char **argv)
{
    const char *which = argc > 1 ? argv[1] : "all";
    const char *env = getenv("FASTMM_TEST_FORK_SAFETY_FORKS");
    long forks = argc > 2 ? atol(argv[2]) : env != NULL ? atol(env) : 0;
    progress = mmap(NULL, sizeof *progress, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (progress == MAP_FAILED) {
        perror("mmap");
        return 99;
    }
    int rc = 0;
    if (strcmp(which, "stdio") == 0 || strcmp(which, "all") == 0)
        rc |= run_watched("stdio", stdio_worker, forks > 0 ? forks : 100);
    if (strcmp(which, "signal") == 0 || strcmp(which, "all") == 0)
        rc |= run_watched("signal", signal_worker, forks > 0 ? forks : 600);
    return rc;
}
