/*
 * helpers.h - fixtures shared by the Check suites (tests/helpers.c): standard error sent to
 * /dev/null while a test provokes reports, the recording event handler, temporary files.
 *
 * The recorder's state is read through functions, never as variables: GCC takes free() and
 * realloc() for calls that change no memory the program can see, so a count read straight from
 * a variable after a free could be one read before it.
 */
#ifndef TEST_HELPERS_H
#define TEST_HELPERS_H

#include <stddef.h>
#include <stdint.h>

#include <fastmm5.h>

/* Sends standard error to /dev/null (the reports are expected), or to fd, and back. */
void quiet_stderr(void);
void redirect_stderr(int fd);
void restore_stderr(void);

/* The recording event handler. It runs inside the allocator (with its report lock held), so it
 * copies into static storage only; the slot index is taken atomically, so the events of several
 * threads are all counted. */
#define EV_MAX 8192
typedef struct test_event {
    fastmm_event_type_t type;
    const void *block;
    size_t size;
    uint32_t number;
} test_event_t;
void ev_record(void);                    /* ev_reset, then the recorder becomes the event handler */
void ev_reset(void);                     /* forgets the events and the watched block */
size_t evn(void);                        /* events since the last reset */
test_event_t ev_at(size_t i);            /* event i since the reset (the last EV_MAX are kept) */
test_event_t ev_last(void);              /* the last one (type -1, block NULL: none yet) */
const char *ev_first_text(void);         /* the report text of the first event since the reset */
const char *ev_last_text(void);          /* ... and of the last one */
int ev_last_text_null(void);             /* the last event came with no text */
int ev_bad_user(void);                   /* the handler was given another user pointer */
void ev_watch(const void *block);        /* keep the text of the last event about this block */
const char *ev_watch_text(void);
const char *event_name(int type);        /* "DOUBLE_FREE", ...; "?" for others */

/* No core file for a child that is meant to abort. */
void no_core_dump(void);
/* Reads at most cap - 1 bytes of a file from its start into buf (NUL-terminated). */
void slurp(int fd, char *buf, size_t cap);
/* A new temporary file (under TMPDIR or /tmp): its descriptor, its name in path. */
int make_tmp(char *path, size_t cap);
/* Waits for child pid, whose standard error went to the temporary file fd named path (make_tmp),
 * reads that into text (slurp), closes and removes the file. Returns the child's wait status. */
int wait_child_stderr(int pid, int fd, const char *path, char *text, size_t cap);

#endif
