#include "heap.h"
#include "clock.h"

#include <malloc.h>
#include <stdlib.h>
#include <unistd.h>

#define DRAINED_GAP_MS 1000
#define TICK_GAP_MS 60000

static _Atomic int64_t last_trim_ms = INT64_MIN / 2;

/*
 * At most two arenas a CPU (glibc makes up to eight): the bind threads,
 * which wait on the API server far more than they allocate, would otherwise
 * spread over arenas that each keep their peak, and the heap grow for
 * minutes as the load reaches them all.
 */
void heap_setup(void)
{
	long cpus = sysconf(_SC_NPROCESSORS_ONLN);
	if (!getenv("MALLOC_ARENA_MAX"))
		mallopt(M_ARENA_MAX, cpus > 0 ? (int)(2 * cpus) : 2);
}

bool heap_trim_claim(_Atomic int64_t *last_ms, int64_t now_ms, int64_t gap_ms)
{
	int64_t last = atomic_load(last_ms);
	return now_ms - last >= gap_ms && atomic_compare_exchange_strong(last_ms, &last, now_ms);
}

static void trim_after(int64_t gap_ms)
{
	if (heap_trim_claim(&last_trim_ms, clock_mono_ms(), gap_ms))
		malloc_trim(0);
}

void heap_trim(void)
{
	atomic_store(&last_trim_ms, clock_mono_ms());
	malloc_trim(0);
}

void heap_trim_drained(void)
{
	trim_after(DRAINED_GAP_MS);
}

void heap_trim_tick(void)
{
	trim_after(TICK_GAP_MS);
}

struct heap_usage heap_usage(void)
{
	struct mallinfo2 m = mallinfo2();
	return (struct heap_usage){ .in_use = m.uordblks + m.hblkhd, .free = m.fordblks };
}
