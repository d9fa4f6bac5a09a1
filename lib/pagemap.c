/*
 * pagemap.c - the ownership map: for every 64 KiB chunk of address space, the region of this
 * heap that covers it (a medium span or a large block), or nothing.
 *
 * Why: free() must never trust the bytes before a pointer alone (FastMM5's FPC port learned this
 * when foreign blocks' headers looked like its own). A pointer is ours only if its chunk maps to a
 * region, and the region then checks the exact block position. Regions are chunk-aligned
 * (os.h), so a chunk never belongs to two of them.
 *
 * Two levels: a static top table (BSS, touched lazily) of leaves mapped on first use, each between
 * no-access fences (os.h), since a leaf's mapping often lands right below a large block's. Leaves
 * are never unmapped; one leaf covers 4 GiB of address space on 64-bit.
 */
#include "internal.h"

#define LEAF_BITS FM_PAGEMAP_LEAF_BITS
#define TOP_BITS FM_PAGEMAP_TOP_BITS
#define LEAF_ENTRIES ((size_t)1 << LEAF_BITS)
#define LEAF_BYTES (LEAF_ENTRIES * sizeof(uintptr_t))

/* read by the inline lookup (internal.h) on every free */
uintptr_t *fm_pagemap_top[(size_t)1 << TOP_BITS];
#define top fm_pagemap_top

static uintptr_t *leaf_for(size_t chunk, bool create)
{
    size_t t = chunk >> LEAF_BITS;
    uintptr_t *leaf = fm_load_acquire(&top[t]);
    if (leaf != NULL || !create)
        return leaf;
    uintptr_t *fresh = fm_os_map_fenced(LEAF_BYTES);
    if (fresh == NULL)
        return NULL;
    uintptr_t *expected = NULL;
    if (!fm_cas_acq_rel(&top[t], &expected, fresh)) {
        fm_os_unmap_fenced(fresh, LEAF_BYTES); /* another thread installed this leaf first */
        return expected;
    }
    return fresh;
}

bool fm_pagemap_register(const void *base, size_t size, const void *owner, unsigned type)
{
    size_t first = (uintptr_t)base >> FM_OS_CHUNK_SHIFT;
    size_t last = ((uintptr_t)base + size - 1) >> FM_OS_CHUNK_SHIFT;
    if ((last >> (TOP_BITS + LEAF_BITS)) != 0)
        return false; /* beyond the mapped address range: refuse rather than mis-index */
    uintptr_t entry = (uintptr_t)owner | type;
    for (size_t c = first; c <= last; c++) {
        uintptr_t *leaf = leaf_for(c, true);
        if (leaf == NULL) {
            if (c > first)
                fm_pagemap_unregister(base, (c - first) << FM_OS_CHUNK_SHIFT);
            return false;
        }
        fm_store_release(&leaf[c & (LEAF_ENTRIES - 1)], entry);
    }
    return true;
}

void fm_pagemap_unregister(const void *base, size_t size)
{
    size_t first = (uintptr_t)base >> FM_OS_CHUNK_SHIFT;
    size_t last = ((uintptr_t)base + size - 1) >> FM_OS_CHUNK_SHIFT;
    for (size_t c = first; c <= last; c++) {
        uintptr_t *leaf = leaf_for(c, false);
        if (leaf != NULL)
            fm_store_release(&leaf[c & (LEAF_ENTRIES - 1)], 0);
    }
}
