/*
 * slab: a size-class allocator for the cache's hot view blocks. Blocks come
 * from 2 MiB chunks (huge pages where the kernel allows), so the data every
 * request scans for every node of a large cluster sits densely in memory
 * instead of between unrelated heap blocks (docs/performance.md measures
 * the difference). Freed blocks are reused by size class; chunks are given
 * back when the slab is freed. Thread-safe.
 */
#ifndef GPU_SLAB_H
#define GPU_SLAB_H

#include <stddef.h>
#include <stdint.h>

#define SLAB_MAX_BLOCK 4096     /* larger requests fall back to the heap */

struct slab;

struct slab *slab_new(void);
/* Frees every chunk: all blocks must have been given back (or be unused). */
void slab_free(struct slab *s);
/* A 64-byte aligned block of at least n bytes, or NULL. */
void *slab_alloc(struct slab *s, size_t n);
/* Gives back a block of n bytes (the same n as allocated) from slab_alloc. */
void slab_release(struct slab *s, void *p, size_t n);

#endif
