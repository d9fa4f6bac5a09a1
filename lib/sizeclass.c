/*
 * sizeclass.c - FastMM5's size geometry: the small-block classes, the request -> class lookup
 * table, and the 1024 medium bins.
 */
#include "internal.h"

/* Block sizes include the 2-byte flag word, so a class serves requests up to size - 2. The step
 * widens with the size so that the waste stays near 10% (FastMM5's table, doc/fastmm5-facts.md 2.2). */
const uint16_t fm_small_class_sizes[FM_SMALL_INDEX_COUNT] = {
#if UINTPTR_MAX > 0xffffffffu
    16, 32, 48, 64, 80, 96, 112, 128, 144, 160,
#else
    /* 32-bit: every multiple of 8 up to 160 (8-byte granularity) */
    8, 16, 24, 32, 40, 48, 56, 64, 72, 80, 88, 96, 104, 112, 120, 128, 136, 144, 152, 160,
#endif
    176, 192, 208, 224, 240, 256, 272, 288, 304, 320,
    352, 384, 416, 448, 480, 512, 544, 576, 608, 640,
    704, 768, 832, 896, 960, 1024, 1088, 1152, 1216, 1280, 1344,
    1472, 1600, 1728, 1856, 1984, 2112, 2240, 2368, 2496, 2624,
    /* the twins (layout.h): the classes above that are multiples of 32, in the same order */
    32, 64, 96, 128, 160, 192, 224, 256, 288, 320,
    352, 384, 416, 448, 480, 512, 544, 576, 608, 640,
    704, 768, 832, 896, 960, 1024, 1088, 1152, 1216, 1280, 1344,
    1472, 1600, 1728, 1856, 1984, 2112, 2240, 2368, 2496, 2624,
};

uint8_t fm_small_twin[FM_SMALL_CLASS_COUNT];

uint8_t fm_small_lookup[FM_SMALL_LOOKUP_SIZE];

/* Entry k serves requests whose (size + 1) >> granularity_shift is k: the smallest class whose
 * usable size (class - 2) holds the largest such request. */
void fm_sizeclass_init(void)
{
    unsigned cls = 0;
    for (unsigned k = 0; k < FM_SMALL_LOOKUP_SIZE; k++) {
        size_t largest_request = (((size_t)k + 1) << FM_SMALL_GRANULARITY_SHIFT) - 2;
        if (largest_request > FM_SMALL_MAX_USER)
            largest_request = FM_SMALL_MAX_USER;
        while ((size_t)fm_small_class_sizes[cls] - 2 < largest_request)
            cls++;
        fm_small_lookup[k] = (uint8_t)cls;
    }
    unsigned twin = FM_SMALL_CLASS_COUNT;
    for (unsigned c = 0; c < FM_SMALL_CLASS_COUNT; c++)
        fm_small_twin[c] = (uint8_t)(fm_small_class_sizes[c] % 32u == 0 ? twin++ : c);
}

unsigned fm_medium_bin_of(size_t block_size)
{
    if (block_size < FM_MEDIUM_MIDDLE_BINS_START)
        return (unsigned)((block_size - FM_MEDIUM_MIN_BLOCK) >> 8);
    if (block_size < FM_MEDIUM_FINAL_BINS_START)
        return 384u + (unsigned)((block_size - FM_MEDIUM_MIDDLE_BINS_START) >> 9);
    size_t bin = 768u + ((block_size - FM_MEDIUM_FINAL_BINS_START) >> 10);
    return bin > FM_MEDIUM_BIN_COUNT - 1 ? FM_MEDIUM_BIN_COUNT - 1 : (unsigned)bin;
}

size_t fm_medium_bin_size(unsigned bin)
{
    if (bin < 384)
        return FM_MEDIUM_MIN_BLOCK + ((size_t)bin << 8);
    if (bin < 768)
        return FM_MEDIUM_MIDDLE_BINS_START + ((size_t)(bin - 384) << 9);
    return FM_MEDIUM_FINAL_BINS_START + ((size_t)(bin - 768) << 10);
}

/* A request becomes a block of the next bin size after adding the 8-byte header (3000 -> 3136),
 * so that any block found in that bin or above fits. */
size_t fm_medium_round_request(size_t user_size)
{
    size_t block = user_size + FM_MEDIUM_HEADER;
    if (block <= FM_MEDIUM_MIN_BLOCK)
        return FM_MEDIUM_MIN_BLOCK;
    unsigned bin = fm_medium_bin_of(block);
    size_t size = fm_medium_bin_size(bin);
    return size < block ? fm_medium_bin_size(bin + 1) : size;
}
