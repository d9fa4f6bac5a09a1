/*
 * guardslot.c - where guarded blocks live (guardint.h): regions of slots mapped once and reused
 * through the address quarantine, as GWP-ASan's pool, so that a guarded allocation costs one
 * mprotect and its free one mmap over its pages, with no mapping made or removed.
 *
 * Slots come in classes of 1, 2, 4 .. 64 data pages; a block takes the smallest that holds it.
 * A freed slot's pages are replaced by fresh no-access ones (their contents dropped) and the slot
 * waits in its class's FIFO, still describing the freed block, so that a stale pointer into it
 * faults and is reported as a use after free; it is handed out again only when it is the oldest.
 *
 * Sampling (meant to stay on in production): one region per class, made at the class's first
 * sampled block, of a bounded number of slots; a sample is served by a never-used slot, else by
 * the oldest freed one, else (every slot live) skipped: the allocation is served unguarded.
 * Blocks larger than the largest class are not sampled.
 *
 * Every block guarded: a class's freed slots are reused once its quarantine holds its bound,
 * else a never-used slot is taken, and a class with none gets a new region. A block larger than
 * the largest class gets a region of one slot of its own, unmapped when it leaves a quarantine
 * bounded by count and by address space.
 *
 * One lock covers the choice of a slot, the FIFOs and the list of regions (which the leak scan
 * walks, holding the lock); the system calls on a block's pages run outside it (a new region
 * is mapped under it, a few times in a process's life).
 */
#include "internal.h"
#include "guardint.h"

#define CLASSES 7u               /* 1 .. 64 pages: 256 KiB with 4 KiB pages */
#define SLOTS_SAMPLED 256u       /* a class's slots when sampling: 256 >> class, at least 16 */
#define SLOTS_ALL 1024u          /* a new region's slots when guarding all: 1024 >> class, at least 16 */
#define QUARANTINE_ALL 4096u     /* freed slots a class keeps before reuse: 4096 >> class, at least 64 */
#define ONE_OFF_BLOCKS 64u       /* freed single-slot regions kept mapped, at most ... */
#define ONE_OFF_BYTES ((size_t)1 << 30) /* ... and their address space */

typedef struct slot_class {
    fm_guard_region_t *fresh;                /* the newest region: its unused slots go first */
    fm_guard_block_t *oldest, *newest;       /* freed slots, oldest first */
    uint32_t quarantined;
} slot_class_t;

static fm_lock_t lock;
static fm_guard_region_t *regions; /* every mapped region, newest first (for the leak scan) */
static bool sampled;
static slot_class_t classes[CLASSES];
static fm_guard_block_t *one_off_oldest, *one_off_newest;
static size_t one_off_count, one_off_bytes;

static size_t page(void) { return fm_os_page_size(); }

static uint32_t at_least(uint32_t n, unsigned shift, uint32_t floor)
{
    return (n >> shift) > floor ? n >> shift : floor;
}

void fm_guard_slots_configure(bool sample_mode) { sampled = sample_mode; }

/* A region of `slots` slots of slot_data bytes, every slot no-access, registered; or NULL. */
static fm_guard_region_t *new_region(int cls, uint32_t slots, size_t slot_data)
{
    size_t pg = page();
    size_t head = fm_align_up(sizeof(fm_guard_region_t) + (size_t)slots * sizeof(fm_guard_block_t), pg);
    size_t stride = slot_data + 2 * pg;
    if (slot_data > (size_t)PTRDIFF_MAX / 4 || stride > ((size_t)PTRDIFF_MAX / 2 - head) / slots)
        return NULL;
    size_t map_size = fm_align_up(head + (size_t)slots * stride, FM_OS_CHUNK);
    char *map = fm_os_map(map_size);
    if (map == NULL)
        return NULL;
    if (!fm_os_protect(map + head, map_size - head, false)) {
        fm_os_unmap(map, map_size);
        return NULL;
    }
    fm_guard_region_t *r = (fm_guard_region_t *)map;
    r->cls = cls;
    r->slots = slots;
    r->map_size = map_size;
    r->first_slot = map + head;
    r->stride = stride;
    r->slot_data = slot_data;
    fm_store_release(&r->self, r);
    if (!fm_pagemap_register(map, map_size, r, FM_REGION_GUARD)) {
        fm_os_unmap(map, map_size);
        return NULL;
    }
    return r;
}

/* Under the lock. */
static void link_region(fm_guard_region_t *r)
{
    r->prev = NULL;
    r->next = regions;
    if (regions != NULL)
        regions->prev = r;
    regions = r;
}

static void unlink_region(fm_guard_region_t *r)
{
    if (r->prev != NULL)
        r->prev->next = r->next;
    else
        regions = r->next;
    if (r->next != NULL)
        r->next->prev = r->prev;
}

fm_guard_block_t *fm_guard_block_of(const void *p)
{
    uintptr_t entry = fm_pagemap_lookup(p);
    if ((entry & FM_REGION_TYPE_MASK) != FM_REGION_GUARD)
        return NULL;
    fm_guard_region_t *r = (fm_guard_region_t *)(entry & ~(uintptr_t)FM_REGION_TYPE_MASK);
    if (fm_load_acquire(&r->self) != r || (const char *)p < r->first_slot)
        return NULL;
    size_t i = (size_t)((const char *)p - r->first_slot) / r->stride;
    if (i >= r->slots)
        return NULL;
    fm_guard_block_t *g = &r->block[i];
    uint32_t state = fm_load_acquire(&g->state);
    return state == FM_GUARD_LIVE || state == FM_GUARD_FREED ? g : NULL;
}

static fm_guard_block_t *pop_oldest(slot_class_t *c)
{
    fm_guard_block_t *g = c->oldest;
    if (g != NULL) {
        c->oldest = g->next;
        if (c->oldest == NULL)
            c->newest = NULL;
        c->quarantined--;
    }
    return g;
}

/* The region's next never-used slot; its table entry is touched only now. */
static fm_guard_block_t *take_fresh(fm_guard_region_t *r)
{
    if (r == NULL || r->used == r->slots)
        return NULL;
    fm_guard_block_t *g = &r->block[r->used++];
    g->region = r;
    return g;
}

/* A class slot, under the lock. */
static fm_guard_block_t *take_locked(unsigned k)
{
    slot_class_t *c = &classes[k];
    size_t slot_data = page() << k;
    if (sampled) {
        if (c->fresh == NULL && (c->fresh = new_region((int)k, at_least(SLOTS_SAMPLED, k, 16), slot_data)) != NULL)
            link_region(c->fresh);
        fm_guard_block_t *g = take_fresh(c->fresh);
        return g != NULL ? g : pop_oldest(c);
    }
    fm_guard_block_t *g = c->quarantined >= at_least(QUARANTINE_ALL, k, 64) ? pop_oldest(c) : NULL;
    if (g == NULL)
        g = take_fresh(c->fresh);
    if (g == NULL) {
        fm_guard_region_t *r = new_region((int)k, at_least(SLOTS_ALL, k, 16), slot_data);
        if (r != NULL)
            link_region(c->fresh = r);
        g = take_fresh(r);
    }
    return g != NULL ? g : pop_oldest(c); /* no new region: a freed slot rather than none */
}

fm_guard_block_t *fm_guard_slot_take(size_t size)
{
    size_t pg = page();
    if (size > (size_t)PTRDIFF_MAX / 4)
        return NULL;
    size_t pages = (size + pg - 1) / pg;
    unsigned k = 0;
    while (k < CLASSES && ((size_t)1 << k) < pages)
        k++;
    fm_guard_block_t *g;
    if (k < CLASSES) {
        fm_lock_wait(&lock);
        g = take_locked(k);
        if (g != NULL)
            fm_store_relaxed(&g->state, FM_GUARD_SETUP);
        fm_lock_release(&lock);
        return g;
    }
    if (sampled)
        return NULL;
    fm_guard_region_t *r = new_region(FM_GUARD_ONE_OFF, 1, pages * pg);
    if (r == NULL)
        return NULL;
    g = take_fresh(r);
    fm_store_relaxed(&g->state, FM_GUARD_SETUP);
    fm_lock_wait(&lock);
    link_region(r);
    fm_lock_release(&lock);
    return g;
}

static void unmap_region(fm_guard_region_t *r)
{
    fm_pagemap_unregister(r, r->map_size);
    fm_store_release(&r->self, NULL);
    fm_os_unmap(r, r->map_size);
}

/* A one-off region into its FIFO; those beyond the bounds come back, unlinked, to be unmapped. */
static fm_guard_block_t *one_off_locked(fm_guard_block_t *g)
{
    g->next = NULL;
    if (one_off_newest != NULL)
        one_off_newest->next = g;
    else
        one_off_oldest = g;
    one_off_newest = g;
    one_off_count++;
    one_off_bytes += g->region->map_size;
    fm_guard_block_t *out = NULL;
    while (one_off_oldest != NULL && (one_off_count > ONE_OFF_BLOCKS || one_off_bytes > ONE_OFF_BYTES)) {
        fm_guard_block_t *e = one_off_oldest;
        one_off_oldest = e->next;
        if (one_off_oldest == NULL)
            one_off_newest = NULL;
        one_off_count--;
        one_off_bytes -= e->region->map_size;
        unlink_region(e->region);
        e->next = out;
        out = e;
    }
    return out;
}

void fm_guard_slot_quarantine(fm_guard_block_t *g)
{
    fm_guard_block_t *out = NULL;
    fm_lock_wait(&lock);
    if (g->region->cls == FM_GUARD_ONE_OFF) {
        out = one_off_locked(g);
    } else {
        slot_class_t *c = &classes[g->region->cls];
        g->next = NULL;
        if (c->newest != NULL)
            c->newest->next = g;
        else
            c->oldest = g;
        c->newest = g;
        c->quarantined++;
    }
    fm_lock_release(&lock);
    while (out != NULL) {
        fm_guard_block_t *next = out->next;
        unmap_region(out->region);
        out = next;
    }
}

void fm_guard_slot_release(fm_guard_block_t *g)
{
    fm_store_release(&g->state, FM_GUARD_UNUSED);
    if (g->region->cls == FM_GUARD_ONE_OFF) {
        fm_lock_wait(&lock);
        unlink_region(g->region);
        fm_lock_release(&lock);
        unmap_region(g->region);
    } else {
        fm_guard_slot_quarantine(g);
    }
}

void fm_guard_walk_live(void (*visit)(const void *user, size_t size, void *arg), void *arg)
{
    for (const fm_guard_region_t *r = regions; r != NULL; r = r->next)
        for (uint32_t i = 0; i < r->used; i++)
            if (fm_load_acquire(&r->block[i].state) == FM_GUARD_LIVE)
                visit(r->block[i].user, r->block[i].size, arg);
}

bool fm_guard_live_trace(const void *user, uint32_t *trace_id, unsigned *depth)
{
    const fm_guard_block_t *g = fm_guard_block_of(user);
    if (g == NULL || g->user != user || fm_load_acquire(&g->state) != FM_GUARD_LIVE)
        return false;
    *trace_id = g->allocation_trace;
    *depth = g->depth;
    return true;
}

/* the fork handlers (init.c) and the leak scan hold it across: FM_EVERY_PROCESS */
FM_EVERY_PROCESS void fm_guard_slots_lock(void) { fm_lock_wait(&lock); }
FM_EVERY_PROCESS void fm_guard_slots_unlock(void) { fm_lock_release(&lock); }
