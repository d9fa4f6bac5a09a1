/*
 * large.c - the large block manager: requests above 558904 bytes get their own mapping, rounded
 * to 64 KiB, with the 64-byte header in front of the user pointer (facts 2.5, 3.3).
 *
 * The arenas only keep lists of live blocks (for walkers and usage reports); their locks are
 * never waited for by a free, which queues the block on the arena's pending stack instead. Every
 * large allocation and free drains those stacks, as FastMM5 does.
 * Growing uses mremap: in place when the pages after the block are free, otherwise the kernel
 * moves the pages to a new address without copying them.
 */
#include "internal.h"

#include <errno.h>

fm_large_manager_t fm_large_managers[FM_LARGE_ARENAS];
static uint64_t contention;

static void link_locked(fm_large_manager_t *m, fm_large_header_t *h)
{
    h->manager = m;
    h->prev = NULL;
    h->next = m->first;
    if (m->first != NULL)
        m->first->prev = h;
    m->first = h;
}

static void unlink_locked(fm_large_manager_t *m, fm_large_header_t *h)
{
    if (h->prev != NULL)
        h->prev->next = h->next;
    else
        m->first = h->next;
    if (h->next != NULL)
        h->next->prev = h->prev;
}

static void release(fm_large_header_t *h)
{
    void *base = h->map_base;
    size_t size = h->map_size;
    fm_pagemap_unregister(base, size);
    fm_os_unmap(base, size);
}

/* Takes an arena lock, trying each in turn and yielding when all are busy. */
static fm_large_manager_t *lock_any(void)
{
    for (;;) {
        for (unsigned a = 0; a < FM_LARGE_ARENAS; a++)
            if (fm_lock_try(&fm_large_managers[a].lock))
                return &fm_large_managers[a];
        fm_add_relaxed(&contention, 1);
        fm_os_yield();
    }
}

static void drain_locked(fm_large_manager_t *m, fm_large_header_t **to_release)
{
    for (void *b = fm_pending_take(&m->pending); b != NULL;) {
        void *next = *(void **)b;
        fm_large_header_t *h = fm_large_header_of(b);
        unlink_locked(m, h);
        h->next = *to_release; /* unmapped after the lock is dropped */
        *to_release = h;
        b = next;
    }
}

static void release_list(fm_large_header_t *h)
{
    while (h != NULL) {
        fm_large_header_t *next = h->next;
        release(h);
        h = next;
    }
}

bool fm_large_drain_all(void)
{
    bool all = true;
    for (unsigned a = 0; a < FM_LARGE_ARENAS; a++) {
        fm_large_manager_t *m = &fm_large_managers[a];
        if (fm_load_relaxed(&m->pending) == NULL)
            continue;
        fm_large_header_t *done = NULL;
        if (fm_lock_try(&m->lock)) {
            drain_locked(m, &done);
            fm_lock_release(&m->lock);
            release_list(done);
        } else {
            all = false;
        }
    }
    return all;
}

/* Maps a block with its user pointer aligned to `alignment` (64 is free: the header is 64 bytes
 * at a chunk boundary); larger alignments map extra room and give back the unused chunks. */
static fm_large_header_t *map_block(size_t size, size_t alignment)
{
    size_t extra = alignment > FM_LARGE_HEADER ? alignment : 0;
    if (size > (size_t)PTRDIFF_MAX - FM_LARGE_HEADER - extra - FM_LARGE_GRANULARITY)
        return NULL;
    size_t map_size = fm_align_up(size + FM_LARGE_HEADER + extra, FM_LARGE_GRANULARITY);
    char *base = fm_os_map(map_size);
    if (base == NULL)
        return NULL;
    char *user = (char *)fm_align_up((uintptr_t)base + FM_LARGE_HEADER, alignment > 64 ? alignment : 64);
    char *front = (char *)fm_align_down((uintptr_t)user - FM_LARGE_HEADER, FM_OS_CHUNK);
    /* the chunk holding the user pointer must stay mapped even for a zero-byte request */
    char *end = (char *)fm_align_up((uintptr_t)user + (size != 0 ? size : 1), FM_OS_CHUNK);
    if (front > base)
        fm_os_unmap(base, (size_t)(front - base));
    if (end < base + map_size)
        fm_os_unmap(end, (size_t)(base + map_size - end));
    fm_large_header_t *h = fm_large_header_of(user);
    h->map_base = front;
    h->map_size = (size_t)(end - front);
    h->user_size = size;
    h->flags = FM_FLAG_LARGE;
    if (!fm_pagemap_register(front, h->map_size, h, FM_REGION_LARGE)) {
        fm_os_unmap(front, h->map_size);
        return NULL;
    }
    return h;
}

void *fm_large_alloc(size_t size, size_t alignment)
{
    fm_large_drain_all();
    fm_large_header_t *h = map_block(size, alignment);
    if (h == NULL) {
        errno = ENOMEM;
        return NULL;
    }
    fm_large_manager_t *m = lock_any();
    link_locked(m, h);
    m->served++;
    fm_lock_release(&m->lock);
    return (char *)h + FM_LARGE_HEADER;
}

void fm_large_free(void *p)
{
    fm_large_header_t *h = fm_large_header_of(p);
    fm_large_manager_t *m = h->manager;
    if (!fm_lock_try(&m->lock)) {
        fm_pending_push(&m->pending, p);
        return;
    }
    unlink_locked(m, h);
    fm_lock_release(&m->lock);
    release(h);
    fm_large_drain_all();
}

bool fm_large_validate(const void *p, fm_large_header_t *h)
{
    return (const char *)p == (const char *)h + FM_LARGE_HEADER && (h->flags & FM_FLAG_LARGE) != 0;
}

/* Resizes the mapping under p to hold new_size user bytes: in place if the kernel can extend it,
 * else by moving the pages. Returns the (possibly new) user pointer, or NULL leaving p intact. */
void *fm_large_resize(void *p, size_t new_size)
{
    fm_large_header_t *h = fm_large_header_of(p);
    char *base = h->map_base;
    size_t lead = (size_t)((char *)p - base);
    if (new_size > (size_t)PTRDIFF_MAX - lead - FM_LARGE_GRANULARITY)
        return NULL;
    size_t old_map = h->map_size;
    size_t new_map = fm_align_up(lead + new_size, FM_LARGE_GRANULARITY);
    if (new_map <= old_map) {
        h->user_size = new_size;
        return p;
    }
    if (fm_os_grow_in_place(base, old_map, new_map)) {
        if (fm_pagemap_register(base + old_map, new_map - old_map, h, FM_REGION_LARGE)) {
            h->map_size = new_map;
            h->user_size = new_size;
            return p;
        }
        fm_os_unmap(base + old_map, new_map - old_map);
    }
    /* Move: take the block off its arena list while its address changes. */
    fm_large_manager_t *m = h->manager;
    fm_lock_wait(&m->lock);
    unlink_locked(m, h);
    fm_lock_release(&m->lock);
    fm_pagemap_unregister(base, old_map);
    char *moved = fm_os_move(base, old_map, new_map);
    if (moved != NULL) {
        h = (fm_large_header_t *)(moved + lead - FM_LARGE_HEADER);
        h->map_base = moved;
        h->map_size = new_map;
        h->user_size = new_size;
    }
    if (!fm_pagemap_register(h->map_base, h->map_size, h, FM_REGION_LARGE)) {
        /* cannot describe it any more: give the memory back rather than lose track of it */
        fm_os_unmap(h->map_base, h->map_size);
        return NULL;
    }
    m = lock_any();
    link_locked(m, h);
    fm_lock_release(&m->lock);
    return moved != NULL ? (char *)h + FM_LARGE_HEADER : NULL;
}

void fm_large_lock_all(void)
{
    for (unsigned a = 0; a < FM_LARGE_ARENAS; a++)
        fm_lock_wait(&fm_large_managers[a].lock);
}

void fm_large_unlock_all(void)
{
    for (unsigned a = 0; a < FM_LARGE_ARENAS; a++)
        fm_lock_release(&fm_large_managers[a].lock);
}

uint64_t fm_large_contention(void) { return fm_load_relaxed(&contention); }

void fm_large_collect(fm_usage_detail_t *d)
{
    for (unsigned a = 0; a < FM_LARGE_ARENAS; a++) {
        fm_large_manager_t *m = &fm_large_managers[a];
        fm_lock_wait(&m->lock);
        for (const fm_large_header_t *h = m->first; h != NULL; h = h->next) {
            d->large_blocks++;
            d->large_used_bytes += fm_large_usable(h);
            d->large_mapped_bytes += h->map_size;
        }
        fm_lock_release(&m->lock);
    }
}

size_t fm_large_visit_debug_blocks(bool (*check)(const void *outer))
{
    size_t corrupt = 0;
    for (unsigned a = 0; a < FM_LARGE_ARENAS; a++) {
        fm_large_manager_t *m = &fm_large_managers[a];
        fm_lock_wait(&m->lock);
        for (fm_large_header_t *h = m->first; h != NULL; h = h->next)
            if (fm_load_relaxed(&h->flags) & FM_FLAG_DEBUG_INFO)
                corrupt += check((char *)h + FM_LARGE_HEADER);
        fm_lock_release(&m->lock);
    }
    return corrupt;
}

void fm_large_visit_used(void (*visit)(void *block, size_t usable, void *arg), void *arg)
{
    for (unsigned a = 0; a < FM_LARGE_ARENAS; a++) {
        fm_large_manager_t *m = &fm_large_managers[a];
        fm_lock_wait(&m->lock);
        for (fm_large_header_t *h = m->first; h != NULL; h = h->next)
            if (!(fm_load_relaxed(&h->flags) & FM_FLAG_FREE))
                visit((char *)h + FM_LARGE_HEADER, fm_large_usable(h), arg);
        fm_lock_release(&m->lock);
    }
}

bool fm_large_walk(fm_walk_visit_t visit, void *arg, uint64_t deadline_ms)
{
    bool complete = true;
    for (unsigned a = 0; a < FM_LARGE_ARENAS; a++) {
        fm_large_manager_t *m = &fm_large_managers[a];
        bool locked;
        while (!(locked = fm_lock_try(&m->lock)) && fm_os_time_ms() < deadline_ms)
            fm_os_yield();
        if (!locked) {
            complete = false;
            continue;
        }
        for (fm_large_header_t *h = m->first; h != NULL; h = h->next) {
            uint16_t flags = fm_load_relaxed(&h->flags);
            fm_walk_record_t r = {(char *)h + FM_LARGE_HEADER, h->map_size, fm_large_usable(h), flags,
                                  FM_WALK_LARGE_BLOCK, a, (flags & FM_FLAG_FREE) != 0, 0, 0};
            visit(&r, arg);
        }
        fm_lock_release(&m->lock);
    }
    return complete;
}
