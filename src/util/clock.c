/* Monotonic and wall-clock readings, condition-variable deadlines, and the virtual clock of simulations. */
#include "clock.h"

#include <stdatomic.h>
#include <stdbool.h>

/* Set only by a simulation (one thread); production reads false and never the two values. */
static atomic_bool virtual_on;
static _Atomic int64_t virtual_mono_ns, virtual_wall_s;

void clock_virtual_set(int64_t mono_ns, int64_t wall_s)
{
	atomic_store(&virtual_mono_ns, mono_ns);
	atomic_store(&virtual_wall_s, wall_s);
	atomic_store(&virtual_on, true);
}

void clock_real(void)
{
	atomic_store(&virtual_on, false);
}

int64_t clock_mono_ns(void)
{
	if (atomic_load_explicit(&virtual_on, memory_order_relaxed))
		return atomic_load(&virtual_mono_ns);
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

int64_t clock_mono_ms(void)
{
	return clock_mono_ns() / 1000000;
}

int64_t clock_wall_s(void)
{
	if (atomic_load_explicit(&virtual_on, memory_order_relaxed))
		return atomic_load(&virtual_wall_s);
	return (int64_t)time(NULL);
}

struct timespec clock_deadline_ms(int64_t ms)
{
	struct timespec t;
	clock_gettime(CLOCK_REALTIME, &t);
	t.tv_sec += (time_t)(ms / 1000);
	t.tv_nsec += (long)(ms % 1000) * 1000000;
	if (t.tv_nsec >= 1000000000) {
		t.tv_sec++;
		t.tv_nsec -= 1000000000;
	}
	return t;
}
