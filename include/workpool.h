/*
 * workpool: fork-join over an index range, for the requests that score
 * thousands of nodes. The caller always does one part itself; helper threads
 * do the others. When the pool is busy with another request, the caller does
 * the whole range alone instead of waiting, so concurrent requests never
 * queue behind each other.
 */
#ifndef GPU_WORKPOOL_H
#define GPU_WORKPOOL_H

#include <stddef.h>

#define WORKPOOL_MAX_PARTS 16

/* Runs on [begin, end); part numbers are 0..parts-1 and unique within one run. */
typedef void (*workpool_fn)(void *ctx, size_t begin, size_t end, int part);

struct workpool;

/* helpers: threads besides the caller (0: none; the caller does everything). */
struct workpool *workpool_new(int helpers);
void workpool_free(struct workpool *p);

/*
 * Splits [0, n) into up to helpers+1 parts of at least min_part items and
 * runs fn on each; returns when all are done. Returns the number of parts used.
 */
int workpool_run(struct workpool *p, size_t n, size_t min_part, workpool_fn fn, void *ctx);

#endif
