/*
 * track.c - the Valgrind client requests behind track.h, and the requested size of each live
 * block (memcheck needs the old size to resize a block in place; the allocator itself only
 * knows usable sizes). The size table exists only while running under Valgrind: an open
 * addressing hash in memory mapped directly from the OS, under one lock (Valgrind runs one
 * thread at a time anyway).
 */
#include "internal.h"

bool fm_track_on;

#ifdef FASTMM_VALGRIND
#include <valgrind/memcheck.h>

/* Keys are stored complemented: memcheck scans this table for pointers during its leak check,
 * and a plain pointer here would make every block look reachable. */
#define KEY(p) (~(uintptr_t)(p))
#define EMPTY KEY(0)
#define DELETED KEY(1)

typedef struct size_entry {
    uintptr_t key; /* KEY(pointer), or EMPTY, or DELETED */
    size_t requested;
} size_entry_t;

static fm_lock_t table_lock;
static size_entry_t *table;
static size_t table_capacity, table_used;

static size_t slot_of(uintptr_t key, size_t capacity) { return (size_t)((key >> 4) * 0x9e3779b97f4a7c15ull) & (capacity - 1); }

static bool live(const size_entry_t *e) { return e->key != EMPTY && e->key != DELETED; }

static void put(size_entry_t *t, size_t capacity, uintptr_t key, size_t requested)
{
    size_t i = slot_of(key, capacity);
    while (live(&t[i]) && t[i].key != key)
        i = (i + 1) & (capacity - 1);
    t[i] = (size_entry_t){key, requested};
}

static void grow(void)
{
    size_t capacity = table_capacity ? table_capacity * 2 : 65536;
    size_entry_t *t = fm_os_map_fenced(capacity * sizeof *t);
    if (t == NULL)
        return;
    for (size_t i = 0; i < capacity; i++)
        t[i].key = EMPTY;
    for (size_t i = 0; i < table_capacity; i++)
        if (live(&table[i]))
            put(t, capacity, table[i].key, table[i].requested);
    if (table != NULL)
        fm_os_unmap_fenced(table, table_capacity * sizeof *table);
    table = t;
    table_capacity = capacity;
}

static void remember(const void *p, size_t requested)
{
    fm_lock_wait(&table_lock);
    if ((table_used + 1) * 2 > table_capacity)
        grow();
    if (table != NULL) {
        put(table, table_capacity, KEY(p), requested);
        table_used++;
    }
    fm_lock_release(&table_lock);
}

static size_entry_t *find(const void *p)
{
    if (table == NULL)
        return NULL;
    for (size_t i = slot_of(KEY(p), table_capacity);; i = (i + 1) & (table_capacity - 1)) {
        if (table[i].key == KEY(p))
            return &table[i];
        if (table[i].key == EMPTY)
            return NULL;
    }
}

/* FASTMM5_VALGRIND_SLACK=usable: a block is its whole usable size for memcheck (and for
 * usable_size()), for suites that check the allocator's own size arithmetic under memcheck. */
static bool slack_usable;

FM_EVERY_PROCESS void fm_track_init(bool slack)
{
    /* written only when true: outside memcheck this page of .bss stays unwritten (no memory) */
    if (RUNNING_ON_VALGRIND == 0)
        return;
    fm_track_on = true;
    slack_usable = slack;
}

void fm_track_alloc_slow(void *p, size_t requested, size_t usable, bool zeroed)
{
    if (slack_usable)
        requested = usable;
    VALGRIND_MALLOCLIKE_BLOCK(p, requested, 0, zeroed);
    if (usable > requested)
        VALGRIND_MAKE_MEM_NOACCESS((char *)p + requested, usable - requested);
    remember(p, requested);
}

void fm_track_free_slow(void *p, size_t usable, bool medium, bool keep_defined)
{
    fm_lock_wait(&table_lock);
    size_entry_t *e = find(p);
    size_t requested = e != NULL ? e->requested : usable;
    if (e != NULL) {
        e->key = DELETED;
        table_used--;
    }
    fm_lock_release(&table_lock);
    if (e == NULL)
        return; /* allocated before tracking started */
    VALGRIND_FREELIKE_BLOCK(p, 0);
    if (keep_defined) {
        VALGRIND_MAKE_MEM_DEFINED(p, requested);
        return;
    }
    if (medium) { /* small and large blocks stay inaccessible: fm_link_get/set open their link */
        VALGRIND_MAKE_MEM_DEFINED(p, usable < 16 ? usable : 16); /* bin links */
        VALGRIND_MAKE_MEM_DEFINED((char *)p + usable - 4, 4);    /* boundary tag */
    }
}

/* Whether memcheck sees the link word of block as inaccessible (GET_VBITS answers 3, without an
 * error report); then it is made defined for the access, and inaccessible again after it. */
static bool link_open(void *block)
{
    unsigned char vbits[sizeof(void *)];
    if (VALGRIND_GET_VBITS(block, vbits, sizeof vbits) != 3)
        return false;
    VALGRIND_MAKE_MEM_DEFINED(block, sizeof(void *));
    return true;
}

void *fm_track_link_get_slow(void *block)
{
    bool opened = link_open(block);
    void *next = *(void **)block;
    if (opened)
        VALGRIND_MAKE_MEM_NOACCESS(block, sizeof(void *));
    return next;
}

void fm_track_link_set_slow(void *block, void *next)
{
    bool opened = link_open(block);
    *(void **)block = next;
    if (opened)
        VALGRIND_MAKE_MEM_NOACCESS(block, sizeof(void *));
}

void fm_track_resize_slow(void *p, size_t new_requested, size_t usable)
{
    if (slack_usable)
        new_requested = usable;
    fm_lock_wait(&table_lock);
    size_entry_t *e = find(p);
    size_t old = e != NULL ? e->requested : 0;
    if (e != NULL)
        e->requested = new_requested;
    fm_lock_release(&table_lock);
    if (e == NULL)
        return;
    VALGRIND_RESIZEINPLACE_BLOCK(p, old, new_requested, 0);
    if (usable > new_requested)
        VALGRIND_MAKE_MEM_NOACCESS((char *)p + new_requested, usable - new_requested);
}

void fm_track_internal_slow(void *p, size_t n) { VALGRIND_MAKE_MEM_DEFINED(p, n); }

void fm_track_quiet_slow(bool quiet)
{
    if (quiet)
        VALGRIND_DISABLE_ERROR_REPORTING;
    else
        VALGRIND_ENABLE_ERROR_REPORTING;
}

size_t fm_track_requested_slow(const void *p, size_t usable)
{
    fm_lock_wait(&table_lock);
    size_entry_t *e = find(p);
    size_t r = e != NULL ? e->requested : usable;
    fm_lock_release(&table_lock);
    return r;
}

/* fork: the table's lock is innermost (nothing else is taken while it is held), so init.c takes
 * it last. */
FM_EVERY_PROCESS void fm_track_fork_lock(void) { fm_lock_wait(&table_lock); }
FM_EVERY_PROCESS void fm_track_fork_unlock(void) { fm_lock_release(&table_lock); }

#else /* built without Valgrind support */

FM_EVERY_PROCESS void fm_track_fork_lock(void) {}
FM_EVERY_PROCESS void fm_track_fork_unlock(void) {}

FM_EVERY_PROCESS void fm_track_init(bool slack) { (void)slack; }
void fm_track_alloc_slow(void *p, size_t requested, size_t usable, bool zeroed)
{
    (void)p, (void)requested, (void)usable, (void)zeroed;
}
void fm_track_free_slow(void *p, size_t usable, bool medium, bool keep_defined)
{
    (void)p, (void)usable, (void)medium, (void)keep_defined;
}
void fm_track_resize_slow(void *p, size_t new_requested, size_t usable) { (void)p, (void)new_requested, (void)usable; }
void fm_track_internal_slow(void *p, size_t n) { (void)p, (void)n; }
void fm_track_quiet_slow(bool quiet) { (void)quiet; }
void *fm_track_link_get_slow(void *block) { return *(void **)block; }
void fm_track_link_set_slow(void *block, void *next) { *(void **)block = next; }
size_t fm_track_requested_slow(const void *p, size_t usable)
{
    (void)p;
    return usable;
}

#endif
