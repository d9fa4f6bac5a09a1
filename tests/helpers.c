/*
 * helpers.c - fixtures shared by the Check suites (declared in helpers.h).
 */
#define _GNU_SOURCE
#include "helpers.h"

#include <check.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

/* ---- standard error ---- */

static int saved_stderr = -1;

void redirect_stderr(int fd)
{
    fflush(stderr);
    saved_stderr = dup(2);
    dup2(fd, 2);
}

void quiet_stderr(void)
{
    int fd = open("/dev/null", O_WRONLY);
    redirect_stderr(fd);
    if (fd >= 0)
        close(fd);
}

void restore_stderr(void)
{
    if (saved_stderr >= 0) {
        fflush(stderr);
        dup2(saved_stderr, 2);
        close(saved_stderr);
        saved_stderr = -1;
    }
}

/* ---- event recorder ---- */

static test_event_t events[EV_MAX]; /* a ring: event i is events[i % EV_MAX] */
static size_t event_count;
static int bad_user;
static int last_text_null;
static char first_text[32768];
static char last_text[32768];
static const void *watched;
static char watch_text[32768];
static int handler_magic;

static void copy_text(char *dst, size_t cap, const char *src)
{
    size_t i = 0;
    if (src != NULL)
        for (; i + 1 < cap && src[i] != '\0'; i++)
            dst[i] = src[i];
    dst[i] = '\0';
}

static void record_event(const fastmm_event_t *e, void *user)
{
    size_t i = __atomic_fetch_add(&event_count, 1, __ATOMIC_ACQ_REL);
    if (user != &handler_magic)
        bad_user = 1;
    events[i % EV_MAX] = (test_event_t){e->type, e->block, e->size, e->allocation_number};
    if (i == 0)
        copy_text(first_text, sizeof first_text, e->text);
    copy_text(last_text, sizeof last_text, e->text);
    last_text_null = e->text == NULL;
    if (e->block != NULL && e->block == watched)
        copy_text(watch_text, sizeof watch_text, e->text);
}

void ev_reset(void)
{
    __atomic_store_n(&event_count, 0, __ATOMIC_RELEASE);
    bad_user = 0;
    last_text_null = 0;
    first_text[0] = '\0';
    last_text[0] = '\0';
    watched = NULL;
    watch_text[0] = '\0';
}

void ev_record(void)
{
    ev_reset();
    fastmm_set_event_handler(record_event, &handler_magic);
}

size_t evn(void) { return __atomic_load_n(&event_count, __ATOMIC_ACQUIRE); }

test_event_t ev_at(size_t i) { return events[i % EV_MAX]; }

test_event_t ev_last(void)
{
    size_t n = evn();
    return n == 0 ? (test_event_t){(fastmm_event_type_t)-1, NULL, 0, 0} : ev_at(n - 1);
}

const char *ev_first_text(void) { return first_text; }
const char *ev_last_text(void) { return last_text; }
int ev_last_text_null(void) { return last_text_null; }
int ev_bad_user(void) { return bad_user; }

void ev_watch(const void *block)
{
    watched = block;
}

const char *ev_watch_text(void) { return watch_text; }

const char *event_name(int type)
{
    switch (type) {
    case FASTMM_EVENT_INVALID_POINTER: return "INVALID_POINTER";
    case FASTMM_EVENT_DOUBLE_FREE: return "DOUBLE_FREE";
    case FASTMM_EVENT_REALLOC_OF_FREED_BLOCK: return "REALLOC_OF_FREED_BLOCK";
    case FASTMM_EVENT_HEADER_CORRUPTION: return "HEADER_CORRUPTION";
    case FASTMM_EVENT_FOOTER_CORRUPTION: return "FOOTER_CORRUPTION";
    case FASTMM_EVENT_MODIFIED_AFTER_FREE: return "MODIFIED_AFTER_FREE";
    case FASTMM_EVENT_VIRTUAL_CALL_ON_FREED_OBJECT: return "VIRTUAL_CALL_ON_FREED_OBJECT";
    case FASTMM_EVENT_LEAK_DETAIL: return "LEAK_DETAIL";
    case FASTMM_EVENT_LEAK_SUMMARY: return "LEAK_SUMMARY";
    case FASTMM_EVENT_MISMATCHED_DEALLOCATION: return "MISMATCHED_DEALLOCATION";
    case FASTMM_EVENT_SIZED_DELETE_MISMATCH: return "SIZED_DELETE_MISMATCH";
    default: return "?";
    }
}

/* ---- processes and files ---- */

void no_core_dump(void)
{
    struct rlimit rl = {0, 0};
    setrlimit(RLIMIT_CORE, &rl);
}

void slurp(int fd, char *buf, size_t cap)
{
    size_t n = 0;
    lseek(fd, 0, SEEK_SET);
    while (n + 1 < cap) {
        ssize_t r = read(fd, buf + n, cap - 1 - n);
        if (r <= 0)
            break;
        n += (size_t)r;
    }
    buf[n] = '\0';
}

int make_tmp(char *path, size_t cap)
{
    const char *dir = getenv("TMPDIR");
    snprintf(path, cap, "%s/fastmm5-check-XXXXXX", dir != NULL && *dir != '\0' ? dir : "/tmp");
    int fd = mkstemp(path);
    ck_assert_msg(fd >= 0, "mkstemp(%s) failed", path);
    return fd;
}

int wait_child_stderr(int pid, int fd, const char *path, char *text, size_t cap)
{
    int st = 0;
    ck_assert_int_eq(waitpid(pid, &st, 0), pid);
    slurp(fd, text, cap);
    close(fd);
    unlink(path);
    return st;
}
