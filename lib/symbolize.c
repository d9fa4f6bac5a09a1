/*
 * symbolize.c - function names and file:line for the stack traces of reports, from the helper
 * program fastmm5-symbolize (tools/, built where configure finds elfutils' libdw).
 *
 * A report is written by a process whose heap may be damaged, and libdw allocates a lot. So the
 * names come from another process: the helper, started at the first trace a report shows, with
 * its own heap (libfastmm5 and its options are taken out of its environment). It reads this
 * process's mappings and object files itself and answers one address per line over a socket.
 * Starting it takes no lock of this library and calls no function that allocates: a raw clone
 * (no fork handlers: a report may hold the report lock and arena locks that those would take),
 * then only dup2 and execve in the child. Every answer is waited for with a time limit; a
 * helper that fails, hangs or cannot be started is given up for the life of the process, and
 * the reports keep the dladdr names. The helper stays for the next report and ends when this
 * process does (its socket closes); after dlopen it is restarted, since it reads the mappings
 * once.
 */
#define _GNU_SOURCE 1 /* dl_iterate_phdr, SOCK_CLOEXEC */
#include "internal.h"

#ifdef FASTMM5_HAVE_SYMBOLIZER

#include <fcntl.h>
#include <link.h>
#include <poll.h>
#include <signal.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

#define FIRST_ANSWER_MS 20000 /* reading the debug information (or fetching it) takes a while */
#define ANSWER_MS 5000
#define MAX_ENV 256

static fm_lock_t helper_lock;
static int helper_socket = -1;
static pid_t helper_pid, helper_owner;
static bool given_up, answered_once;
static unsigned long long helper_adds;

static bool starts_with(const char *s, const char *prefix)
{
    while (*prefix != '\0')
        if (*s++ != *prefix++)
            return false;
    return true;
}

static int read_adds(struct dl_phdr_info *info, size_t size, void *arg)
{
    *(unsigned long long *)arg = size >= offsetof(struct dl_phdr_info, dlpi_adds) + sizeof info->dlpi_adds
                                     ? info->dlpi_adds
                                     : 0;
    return 1;
}

static unsigned long long loads(void)
{
    unsigned long long adds = 0;
    dl_iterate_phdr(read_adds, &adds);
    return adds;
}

static void stop_helper(void)
{
    if (helper_socket >= 0)
        close(helper_socket);
    if (helper_pid > 0 && helper_owner == getpid()) {
        kill(helper_pid, SIGKILL);
        waitpid(helper_pid, NULL, 0);
    }
    helper_socket = -1;
    helper_pid = 0;
    answered_once = false;
}

/* Where the build installs the helper (Makefile.am); a build of these files without that
 * knows only FASTMM5_SYMBOLIZER. */
#ifndef FASTMM5_SYMBOLIZER_PATH
#define FASTMM5_SYMBOLIZER_PATH NULL
#endif

static const char *helper_path(void)
{
    const char *path = fm_option_value(FM_OPT_SYMBOLIZER);
    if (path == NULL || path[0] == '\0')
        path = FASTMM5_SYMBOLIZER_PATH;
    return path == NULL || (starts_with(path, "none") && path[4] == '\0') ? NULL : path;
}

static bool start_helper(void)
{
    const char *path = helper_path();
    if (path == NULL || access(path, X_OK) != 0)
        return false;
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0)
        return false;
    /* everything the child needs is prepared here: after the clone it only calls dup2/execve */
    char pid_text[24];
    fm_report_t r = {pid_text, 0, sizeof pid_text};
    pid_text[0] = '\0';
    fm_report_dec(&r, (uint64_t)getpid());
    char *argv[] = {(char *)path, pid_text, NULL};
    char *envp[MAX_ENV];
    unsigned n = 0;
    for (char **e = environ; e != NULL && *e != NULL && n + 1 < MAX_ENV; e++)
        if (!starts_with(*e, "LD_PRELOAD=") && !starts_with(*e, "FASTMM5_"))
            envp[n++] = *e;
    envp[n] = NULL;
    int null = open("/dev/null", O_WRONLY | O_CLOEXEC);
    long pid = syscall(SYS_clone, (unsigned long)SIGCHLD, 0L, 0L, 0L, 0L);
    if (pid == 0) {
        if (dup2(sv[1], 0) < 0 || dup2(sv[1], 1) < 0 || (null >= 0 && dup2(null, 2) < 0))
            _exit(127);
        execve(path, argv, envp);
        _exit(127);
    }
    close(sv[1]);
    if (null >= 0)
        close(null);
    if (pid < 0) {
        close(sv[0]);
        return false;
    }
    helper_socket = sv[0];
    helper_pid = (pid_t)pid;
    helper_owner = getpid();
    helper_adds = loads();
    answered_once = false;
    return true;
}

/* One line of the helper's answer, without its newline; false on a failure or a timeout. */
static bool read_line(char *line, size_t cap)
{
    size_t len = 0;
    int wait_ms = answered_once ? ANSWER_MS : FIRST_ANSWER_MS;
    for (;;) {
        struct pollfd p = {helper_socket, POLLIN, 0};
        if (poll(&p, 1, wait_ms) != 1)
            return false;
        char c;
        if (read(helper_socket, &c, 1) != 1)
            return false;
        if (c == '\n')
            break;
        if (len + 1 < cap)
            line[len++] = c;
    }
    line[len] = '\0';
    answered_once = true;
    return true;
}

static bool ask(uintptr_t address, char *line, size_t cap)
{
    char question[24];
    fm_report_t r = {question, 0, sizeof question};
    question[0] = '\0';
    fm_report_hex(&r, address);
    fm_report_str(&r, "\n");
    return send(helper_socket, question, r.len, MSG_NOSIGNAL) == (ssize_t)r.len && read_line(line, cap);
}

bool fm_symbolize(uintptr_t address, char *name, size_t name_cap, char *where, size_t where_cap)
{
    char line[512];
    bool ok = false;
    fm_lock_wait(&helper_lock);
    if (helper_socket >= 0 && helper_owner != getpid()) {
        close(helper_socket); /* a child of fork: the helper is its parent's */
        helper_socket = -1;
        helper_pid = 0;
        given_up = false;
    }
    if (!given_up) {
        if (helper_socket >= 0 && loads() != helper_adds)
            stop_helper(); /* objects were loaded since it read the mappings */
        if (helper_socket < 0 && !start_helper())
            given_up = true;
        else if (ask(address, line, sizeof line))
            ok = true;
        else {
            stop_helper();
            given_up = true;
        }
    }
    fm_lock_release(&helper_lock);
    if (!ok)
        return false;
    char *tab = strchr(line, '\t');
    if (tab == NULL)
        return false;
    *tab = '\0';
    size_t n = strlen(line);
    if (n >= name_cap)
        n = name_cap - 1;
    memcpy(name, line, n);
    name[n] = '\0';
    n = strlen(tab + 1);
    if (n >= where_cap)
        n = where_cap - 1;
    memcpy(where, tab + 1, n);
    where[n] = '\0';
    return true;
}

#else

bool fm_symbolize(uintptr_t address, char *name, size_t name_cap, char *where, size_t where_cap)
{
    (void)address, (void)name, (void)name_cap, (void)where, (void)where_cap;
    return false;
}

#endif
