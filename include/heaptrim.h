/*
 * heaptrim: when the heap's free memory goes back to the system
 * (malloc_trim). glibc keeps what the threads free in their arenas, and
 * gives back only a heap's top. The binds' and filters' buffers of a burst
 * are about 10 MiB at 1000 nodes; kept, they are reused, but the free
 * space scatters and the RSS creeps (34 to 63 MiB in 16 minutes of rounds
 * of 400 binds, with no trim). A trim once a minute gave them back, but a
 * minute's RSS then depended on where in the minute it was read (43 or 55
 * MiB). So: a trim when a burst was served (no request in flight, at most
 * once a second), and once a minute for a load that never pauses.
 */
#ifndef GPU_HEAPTRIM_H
#define GPU_HEAPTRIM_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#define HEAP_TRIM_DRAINED_GAP_MS 1000
#define HEAP_TRIM_TICK_GAP_MS 60000

/* No request in flight any more: trims unless one did within the drained gap. */
void heap_trim_drained(void);
/* A periodic thread's tick: trims unless one did within the tick gap. */
void heap_trim_tick(void);

/*
 * The rule: true (and *last_ms set to now_ms) when gap_ms passed since
 * *last_ms; of threads that ask at once, one wins.
 */
bool heap_trim_claim(_Atomic int64_t *last_ms, int64_t now_ms, int64_t gap_ms);

#endif
