#include "heaptrim.h"
#include "clock.h"

#include <malloc.h>

static _Atomic int64_t last_trim_ms = INT64_MIN / 2;

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

void heap_trim_drained(void)
{
	trim_after(HEAP_TRIM_DRAINED_GAP_MS);
}

void heap_trim_tick(void)
{
	trim_after(HEAP_TRIM_TICK_GAP_MS);
}
