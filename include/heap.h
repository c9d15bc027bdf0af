/*
 * heap: how the extender's heap is held and given back (glibc malloc).
 *
 * glibc keeps what the threads free in their arenas and gives back only a
 * heap's top. The binds' and filters' buffers of a burst are about 10 MiB
 * at 1000 nodes; kept, they are reused, but the free space scatters and the
 * RSS creeps (34 to 63 MiB in 16 minutes of rounds of 400 binds, with no
 * trim). A trim once a minute gave them back, but a minute's RSS then
 * depended on where in the minute it was read (43 or 55 MiB). So: a trim
 * when a burst was served (no request in flight, at most once a second),
 * and once a minute for a load that never pauses. glibc's per-thread caches
 * can be set only from the environment; the manifest turns them off
 * (docs/operations.md, Memory).
 */
#ifndef GPU_HEAP_H
#define GPU_HEAP_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* At start, before the threads: caps the arenas (MALLOC_ARENA_MAX, when set, decides). */
void heap_setup(void);

/* A large tree was just freed (the inventory, the first lists): trims now. */
void heap_trim(void);
/* No request in flight any more: trims unless one did within the last second. */
void heap_trim_drained(void);
/* A periodic thread's tick: trims unless one did within the last minute. */
void heap_trim_tick(void);

struct heap_usage {
	size_t in_use;   /* handed out and not had back */
	size_t free;     /* free in the arenas, kept for reuse */
};
struct heap_usage heap_usage(void);

/*
 * The rule: true (and *last_ms set to now_ms) when gap_ms passed since
 * *last_ms; of threads that ask at once, one wins.
 */
bool heap_trim_claim(_Atomic int64_t *last_ms, int64_t now_ms, int64_t gap_ms);

#endif
