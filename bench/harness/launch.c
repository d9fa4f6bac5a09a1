/*
 * launch.c - starts one benchmark process and measures it (built by runner.py, statically when
 * the toolchain allows).
 *
 *   launch RESULT TIMEOUT_S CPU OUT ERR [-e NAME=VALUE]... -- PROGRAM [ARG]...
 *
 * Forks; the child puts itself in its own process group, pins itself to CPU (unless CPU is -1),
 * redirects stdin from /dev/null and stdout/stderr to OUT/ERR, applies the -e settings (the
 * allocator preload among them, so the launcher itself never runs on the allocator under test)
 * and execs PROGRAM (searched in PATH). The parent waits with wait4() and writes one line to
 * RESULT:  wall_ns=N maxrss_kb=N utime_us=N stime_us=N status=exit:N|signal:N timed_out=0|1
 *
 * Why a launcher rather than Python's own fork/posix_spawn: Linux records the hiwater RSS of the
 * memory image a process had before exec in its ru_maxrss. A child spawned by the Python runner
 * would report at least the runner's own RSS (tens of MiB); forked from this small launcher, the
 * floor is the launcher's few hundred KiB.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static volatile pid_t g_child;
static volatile sig_atomic_t g_timed_out;

static void on_alarm(int sig)
{
    (void)sig;
    g_timed_out = 1;
    if (g_child > 0)
        kill(-g_child, SIGKILL);
}

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static int redirect(int fd, const char *path, int flags)
{
    int f = open(path, flags, 0644);
    if (f < 0)
        return -1;
    if (f != fd) {
        if (dup2(f, fd) < 0)
            return -1;
        close(f);
    }
    return 0;
}

int main(int argc, char **argv)
{
    if (argc < 8) {
        fprintf(stderr, "usage: launch RESULT TIMEOUT_S CPU OUT ERR [-e NAME=VALUE]... -- PROGRAM [ARG]...\n");
        return 2;
    }
    const char *result = argv[1];
    double timeout = atof(argv[2]);
    int cpu = atoi(argv[3]);
    const char *out = argv[4], *err = argv[5];
    int i = 6;
    int first_env = i;
    while (i < argc && strcmp(argv[i], "--") != 0)
        i += 2;
    if (i >= argc - 1) {
        fprintf(stderr, "launch: no program after --\n");
        return 2;
    }
    int last_env = i;
    char **prog = &argv[i + 1];

    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_alarm;
    sigaction(SIGALRM, &sa, NULL);

    uint64_t t0 = now_ns();
    pid_t pid = fork();
    if (pid < 0) {
        perror("launch: fork");
        return 2;
    }
    if (pid == 0) {
        setpgid(0, 0);
        if (cpu >= 0) {
            cpu_set_t set;
            CPU_ZERO(&set);
            CPU_SET(cpu, &set);
            sched_setaffinity(0, sizeof set, &set);
        }
        if (redirect(0, "/dev/null", O_RDONLY) || redirect(1, out, O_WRONLY | O_CREAT | O_TRUNC) ||
            redirect(2, err, O_WRONLY | O_CREAT | O_TRUNC))
            _exit(126);
        for (int k = first_env; k < last_env; k += 2) {
            if (strcmp(argv[k], "-e") != 0 || k + 1 >= last_env)
                _exit(126);
            char *eq = strchr(argv[k + 1], '=');
            if (!eq)
                _exit(126);
            *eq = 0;
            setenv(argv[k + 1], eq + 1, 1);
        }
        execvp(prog[0], prog);
        fprintf(stderr, "launch: cannot exec %s: %s\n", prog[0], strerror(errno));
        _exit(127);
    }
    g_child = pid;
    setpgid(pid, pid); /* also from this side, so the kill on timeout cannot miss */
    if (timeout > 0) {
        struct itimerval it;
        memset(&it, 0, sizeof it);
        it.it_value.tv_sec = (time_t)timeout;
        it.it_value.tv_usec = (suseconds_t)((timeout - (double)(time_t)timeout) * 1e6);
        setitimer(ITIMER_REAL, &it, NULL);
    }
    int status;
    struct rusage ru;
    pid_t r;
    do
        r = wait4(pid, &status, 0, &ru);
    while (r < 0 && errno == EINTR);
    uint64_t t1 = now_ns();
    struct itimerval off;
    memset(&off, 0, sizeof off);
    setitimer(ITIMER_REAL, &off, NULL);
    if (r < 0) {
        perror("launch: wait4");
        return 2;
    }
    FILE *f = fopen(result, "w");
    if (!f) {
        perror("launch: result file");
        return 2;
    }
    fprintf(f, "wall_ns=%" PRIu64 " maxrss_kb=%ld utime_us=%ld stime_us=%ld status=%s:%d timed_out=%d\n",
            t1 - t0, ru.ru_maxrss, (long)ru.ru_utime.tv_sec * 1000000L + (long)ru.ru_utime.tv_usec,
            (long)ru.ru_stime.tv_sec * 1000000L + (long)ru.ru_stime.tv_usec,
            WIFSIGNALED(status) ? "signal" : "exit", WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status),
            (int)g_timed_out);
    fclose(f);
    return 0;
}
